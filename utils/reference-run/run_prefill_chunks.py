#!/usr/bin/env python3
"""Chunked prefill against onnxruntime: prompts longer than any chunk.

For every decoder under test/models/hf/with-past (or those named), two
random prompts of --prompt tokens (the second left-padded by 3) are
generated greedily for --new tokens by onnxruntime running the export
itself (the whole prompt with an empty past, then one token per step with
the `present` outputs fed back: an independent reference) and by tp-mlir
(`tp-compile --max-seq S --prefill-chunks ...`, `tp-run --generate`). The
tokens must be equal. Each config is `tp=N,chunks=A+B,seq=S`: with the
defaults a 45-token prompt runs in chunks of 16 (three, the last one
right-padded), or of 4 (twelve), or, at --max-seq 47 with chunks 16 and
32, in 32 then 13 decode steps (no chunk fits the context's last 15
positions). The line says how many chunks ran.

    run_prefill_chunks.py [name ...] [--config tp=2,chunks=4+16,seq=64 ...]
                          [--prompt 45] [--new 2] [--tp-compile P] [--tp-run P]

One line per run:

    llama tp=2,chunks=16,seq=64: tokens [2, 47] equal | 3 prefill chunks

then 'N passed, N failed'; exit status 1 if any failed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DIR = os.path.join(HERE, "..", "..", "test", "models", "hf",
                           "with-past")


def parse_config(text):
    config = {"tp": 1, "pp": 1, "chunks": "16", "seq": 64}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in config:
            sys.exit(f"bad config part '{part}' in '{text}'")
        config[key] = value if key == "chunks" else int(value)
    return config


def prompts(vocab, length, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, vocab, size=(2, length)).astype(np.int64)
    mask = np.ones((2, length), dtype=np.int64)
    ids[1, :3] = 0
    mask[1, :3] = 0
    return ids, mask


def reference(model, ids, mask, new_tokens):
    """Greedy decoding with onnxruntime on the export itself."""
    import onnxruntime as ort
    session = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    inputs = {i.name: i for i in session.get_inputs()}
    past = {}
    for name, info in inputs.items():
        if name.startswith("past_key_values.") or name.startswith("past."):
            shape = [2 if not isinstance(d, int) and i == 0 else
                     (0 if not isinstance(d, int) else d)
                     for i, d in enumerate(info.shape)]
            past[name] = np.zeros(shape, dtype=np.float32)
    outputs = [o.name for o in session.get_outputs()]
    sequence, full_mask, step_ids = ids, mask, ids
    for _ in range(new_tokens):
        feed = dict(past)
        feed["input_ids"] = step_ids
        feed["attention_mask"] = full_mask
        if "position_ids" in inputs:
            positions = np.cumsum(full_mask, axis=1) - 1
            positions[full_mask == 0] = 1
            feed["position_ids"] = positions[:, -step_ids.shape[1]:]
        result = dict(zip(outputs, session.run(outputs, feed)))
        token = result["logits"][:, -1, :].argmax(axis=-1).astype(np.int64)
        sequence = np.concatenate([sequence, token[:, None]], axis=1)
        full_mask = np.concatenate(
            [full_mask, np.ones((2, 1), dtype=np.int64)], axis=1)
        step_ids = token[:, None]
        for name in past:
            present = "present." + name.split(".", 1)[1]
            past[name] = result[present]
    return sequence


def run_one(args, name, text, work):
    config = parse_config(text)
    folder = os.path.join(args.dir, name)
    model = os.path.join(folder, "model.onnx")
    import onnx
    graph = onnx.load(model, load_external_data=False).graph
    vocab = min(d.dim_value for o in graph.output if o.name == "logits"
                for d in o.type.tensor_type.shape.dim[2:]) or 100
    ids, mask = prompts(vocab, args.prompt, args.seed)
    head = f"{name} {text}:"
    label = text.replace(",", "_").replace("+", "-").replace("=", "")
    np.save(os.path.join(work, f"{name}-ids.npy"), ids)
    np.save(os.path.join(work, f"{name}-mask.npy"), mask)
    artifact = os.path.join(work, f"{name}-{label}.tpa")
    compiled = subprocess.run(
        [args.tp_compile, model, "--target", "cpu", "--max-seq",
         str(config["seq"]), "--max-batch", "2", "--devices",
         str(config["tp"]), "--pp", str(config["pp"]), "--prefill-chunks",
         config["chunks"].replace("+", ","), "-o", artifact],
        capture_output=True, text=True)
    if compiled.returncode != 0:
        print(f"{head} FAILED to compile\n{compiled.stderr[-2000:]}")
        return False
    out = os.path.join(work, f"{name}-{label}-out")
    ran = subprocess.run(
        [args.tp_run, artifact, "--generate", str(args.new),
         "--input", f"input_ids={os.path.join(work, name + '-ids.npy')}",
         "--input",
         f"attention_mask={os.path.join(work, name + '-mask.npy')}",
         "--output-dir", out],
        capture_output=True, text=True)
    if ran.returncode != 0:
        print(f"{head} FAILED to run\n{ran.stderr[-2000:]}")
        return False
    chunks = re.search(r"\((\d+) prefill chunks\)", ran.stdout)
    chunks = f"{chunks.group(1)} prefill chunks" if chunks else "?"
    tokens = np.load(os.path.join(out, "tokens.npy"))
    expected = reference(model, ids, mask, args.new)
    if tokens.shape != expected.shape or not (tokens == expected).all():
        print(f"{head} tokens DIFFER | {chunks}\n"
              f"  got      {tokens[:, args.prompt:].tolist()}\n"
              f"  expected {expected[:, args.prompt:].tolist()}")
        return False
    print(f"{head} tokens {list(tokens.shape)} equal | {chunks}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--config", action="append")
    parser.add_argument("--prompt", type=int, default=45)
    parser.add_argument("--new", type=int, default=2)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    args = parser.parse_args()
    with open(os.path.join(args.dir, "index.json")) as f:
        index = json.load(f)
    names = args.names or [n for n, e in index.items() if isinstance(e, dict)]
    configs = args.config or ["tp=1,chunks=16,seq=64",
                              "tp=2,chunks=4,seq=64",
                              "tp=2,chunks=16+32,seq=47"]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            for text in configs:
                if run_one(args, name, text, work):
                    passed += 1
                else:
                    failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
