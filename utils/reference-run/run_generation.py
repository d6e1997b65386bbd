#!/usr/bin/env python3
"""Generate with the decoders exported with their KV cache and compare with
transformers' generate().

For every model under test/models/hf/with-past (all of index.json, or those
named) and every config, the export is compiled with `tp-compile --target
cpu --max-seq S --max-batch 2 --explain` and run with `tp-run --generate N`
on the stored prompts (two, the second left-padded); the tokens must equal
those transformers' greedy generate() produced (greedy.npy), exactly. The
collectives of one decode step come from the plan. `prefill=N` in a config
is --prefill-len N, one prefill chunk of N tokens (0: the prompt runs
through the decode step; 4: the 6-token prompts take two chunks, the
second right-padded); by default one chunk of 16 covers the whole prompt.
utils/reference-run/run_prefill_chunks.py covers prompts longer than the
chunks. `beams=K` is beam search,
--num-beams K on an artifact of --max-batch 2K, against beam<K>.npy
(transformers' num_beams=K).

    run_generation.py [name ...] [--config tp=1 --config tp=2,prefill=0 ...]
                      [--max-seq S] [--tp-compile P] [--tp-run P]

One line per run:

    gpt2 tp=2: tokens [2, 16] equal | all_gather 1, all_reduce 5 per step

then a closing 'N passed, N failed' line; exit status 1 if any failed.
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
    config = {"tp": 1, "pp": 1, "prefill": None, "beams": 1}
    for part in filter(None, text.split(",")):
        key, _, value = part.partition("=")
        if key not in config or not value.isdigit():
            sys.exit(f"bad config part '{part}' in '{text}'")
        config[key] = int(value)
    return config


def collectives_of(text):
    m = re.search(r"^collectives: (.*?);", text, re.M)
    found = dict((kind, int(count)) for count, kind in
                 re.findall(r"(\d+) (\w+)", m.group(1))) if m else {}
    return ", ".join(f"{k} {v}" for k, v in sorted(found.items()))


def run_one(args, name, entry, text, work):
    config = parse_config(text)
    folder = os.path.join(args.dir, name)
    artifact = os.path.join(work, f"{name}-{text.replace(',', '_')}.tpa")
    compiled = subprocess.run(
        [args.tp_compile, os.path.join(folder, "model.onnx"), "--target",
         "cpu", "--explain", "--max-seq", str(args.max_seq), "--max-batch",
         str(entry["prompt"][0] * config["beams"]), "--devices",
         str(config["tp"]), "--pp",
         str(config["pp"]), "-o", artifact] +
        ([] if config["prefill"] is None else
         ["--prefill-len", str(config["prefill"])]) +
        (["--dtype", args.dtype] if args.dtype else []),
        capture_output=True, text=True)
    head = f"{name} {text}:"
    if compiled.returncode != 0:
        print(f"{head} FAILED to compile\n{compiled.stderr[-2000:]}")
        return False
    out = os.path.join(work, f"{name}-{text.replace(',', '_')}-out")
    ran = subprocess.run(
        [args.tp_run, artifact, "--generate", str(entry["new_tokens"]),
         "--input", "input_ids=" + os.path.join(folder, "input_ids.npy"),
         "--input",
         "attention_mask=" + os.path.join(folder, "attention_mask.npy"),
         "--num-beams", str(config["beams"]), "--output-dir", out, "--quiet"],
        capture_output=True, text=True)
    if ran.returncode != 0:
        print(f"{head} FAILED to run\n{ran.stderr[-2000:]}")
        return False
    tokens = np.load(os.path.join(out, "tokens.npy"))
    reference = np.load(os.path.join(folder, "greedy.npy" if config["beams"] == 1
                                     else f"beam{config['beams']}.npy"))
    counts = collectives_of(compiled.stdout + compiled.stderr)
    counts = f"{counts} per step" if counts else "no collectives"
    if tokens.shape != reference.shape or not (tokens == reference).all():
        print(f"{head} tokens DIFFER | {counts}\n  got      {tokens.tolist()}"
              f"\n  expected {reference.tolist()}")
        return False
    print(f"{head} tokens {list(tokens.shape)} equal | {counts}")
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--config", action="append")
    parser.add_argument("--max-seq", type=int, default=24)
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--dtype", help="tp-compile --dtype (bf16, f16)")
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    args = parser.parse_args()
    with open(os.path.join(args.dir, "index.json")) as f:
        index = json.load(f)
    names = args.names or [n for n, e in index.items() if isinstance(e, dict)]
    configs = args.config or ["tp=1", "tp=2", "tp=4", "tp=2,pp=2",
                              "tp=2,prefill=0", "tp=4,prefill=4",
                              "tp=1,beams=4,prefill=4", "tp=2,beams=4",
                              "tp=2,pp=2,beams=4"]
    passed = failed = 0
    with tempfile.TemporaryDirectory() as work:
        for name in names:
            for text in configs:
                if run_one(args, name, index[name], text, work):
                    passed += 1
                else:
                    failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
