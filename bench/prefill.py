"""Time to first token with chunked prefill: a Llama-style decoder on 1 and
2 CPU ranks beside onnxruntime's prefill of the same prompts, in one run.

The model is transformers' LlamaForCausalLM with a TinyLlama-1.1B shape by
default (22 layers, hidden 2048, 32 query heads, 4 KV heads, MLP 5632,
vocab 32000; random weights re-drawn so that activations are O(1)), built
under Debian's python3 + python3-torch with transformers from
test/models/hf/.cache/site (`make zoo-site`) and exported with its KV cache
in optimum's text-generation-with-past layout
(test/models/hf/export_with_past.py). Per prompt length (default 16, 64,
128, 512; batch 1):

  onnxruntime      the export in onnxruntime (1 intra-op thread): the
                   prompt in one call with an empty past, to its first
                   token
  tp-mlir x1 / x2  tp-compile --max-seq S --target cpu --devices 1 / 2
                   (default prefill chunks 16, 64, 256), then
                   Session.generate(prompt, max_new_tokens=1) through the
                   Python module: its prefill_seconds (the prompt's chunks
                   and the first token; weights already loaded), best of
                   --repeat; one BLAS thread per rank
                   (OPENBLAS_NUM_THREADS=1 unless set)

It prints each time, tp-mlir x1 against onnxruntime, x2 against x1, and a
16-token prompt's time against a 64-token one's; and whether tp-mlir's
tokens for the longest prompt (--check-new of them, greedy) equal
transformers' generate(). It asserts nothing.

Usage:
  python3 bench/prefill.py                                  # ~1.1 B, slow
  python3 bench/prefill.py --layers 2 --hidden 256 --heads 8 --kv-heads 2 \\
      --intermediate 688 --vocab 1000 --max-seq 600        # quick
  python3 bench/prefill.py --dtypes f32,bf16 --work /tmp/pf-big  # and bf16
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SITE = os.path.join(REPO, "test", "models", "hf", ".cache", "site")


# --- Runs under Debian's python3 (torch, transformers) ---

def _build(a):
    import math
    import torch
    import transformers
    cfg = transformers.LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        intermediate_size=a.intermediate,
        max_position_embeddings=max(2048, a.max_seq))
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if isinstance(module, torch.nn.Embedding):
                    p.copy_(torch.randn(p.shape, generator=gen))
                elif p.dim() >= 2:
                    p.copy_(torch.randn(p.shape, generator=gen) /
                            math.sqrt(p.shape[1]))
                else:
                    p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
    return model


def worker_export(a):
    import torch
    sys.path.insert(0, os.path.join(REPO, "test", "models", "hf"))
    from export_with_past import export_onnx
    model = _build(a)
    dim = a.hidden // a.heads
    past = [torch.randn(1, a.kv_heads, 3, dim) for _ in range(2 * a.layers)]
    export_onnx(model, torch.zeros(1, 2, dtype=torch.int64), past, a.out, 17)


def worker_generate(a):
    import torch
    # Python 3.11 refuses a dataclass of torch 1.13's torch.distributed that
    # generate() imports to ask about FSDP; nothing here is FSDP.
    import transformers.generation.utils as generation_utils
    generation_utils.is_fsdp_managed_module = lambda module: False
    torch.set_num_threads(1)
    model = _build(a)
    ids = torch.from_numpy(np.load(a.ids))
    with torch.no_grad():
        tokens = model.generate(ids, attention_mask=torch.ones_like(ids),
                                do_sample=False, max_new_tokens=a.new,
                                min_new_tokens=a.new, pad_token_id=0)
    np.save(a.tokens, tokens.numpy())


# --- Runs under the pyenv python3 (numpy, onnxruntime, tp_mlir) ---

def model_args(a):
    return ["--layers", str(a.layers), "--hidden", str(a.hidden), "--heads",
            str(a.heads), "--kv-heads", str(a.kv_heads), "--intermediate",
            str(a.intermediate), "--vocab", str(a.vocab), "--max-seq",
            str(a.max_seq)]


def torch_worker(a, *args):
    env = dict(os.environ, PYTHONPATH=a.site, HF_HUB_OFFLINE="1",
               TRANSFORMERS_VERBOSITY="error", PYTHONWARNINGS="ignore",
               OMP_NUM_THREADS="1")
    subprocess.run([a.torch_python, __file__, *args] + model_args(a),
                   check=True, env=env)


def onnxruntime_prefill(model, ids, a):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options,
                                   providers=["CPUExecutionProvider"])
    pasts = [i.name for i in session.get_inputs()
             if i.name.startswith("past_key_values.")]
    dim = a.hidden // a.heads
    empty = np.zeros((1, a.kv_heads, 0, dim), np.float32)
    best = {}
    for length in [4] + a.prompts:  # the first is a warm-up
        feed = {"input_ids": ids[:, :length],
                "attention_mask": np.ones((1, length), np.int64),
                "position_ids": np.arange(length, dtype=np.int64)[None]}
        feed.update({p: empty for p in pasts})
        times = []
        for _ in range(a.repeat):
            begin = time.perf_counter()
            logits = session.run(["logits"], feed)[0]
            logits[:, -1].argmax(-1)
            times.append(time.perf_counter() - begin)
        best[length] = min(times)
    return best


def tp_prefill(artifact, ids, a):
    import tp_mlir
    session = tp_mlir.Session(artifact)
    best, tokens = {}, None
    for length in [4] + a.prompts:
        times = []
        for _ in range(a.repeat):
            session.generate(ids[:, :length], max_new_tokens=1)
            times.append(session.generation_timings["prefill_seconds"])
        best[length] = min(times)
    longest = ids[:, :max(a.prompts)]
    tokens = session.generate(longest, max_new_tokens=a.check_new)
    return best, np.asarray(tokens), session.generation_timings


def config_key(ranks, dtype):
    return f"x{ranks}" if dtype == "f32" else f"x{ranks} {dtype}"


def print_table(results, dtype, a):
    """One table per dtype: onnxruntime (f32) beside tp-mlir's ranks."""
    print(f"\nTime to first token, batch 1, best of {a.repeat} "
          f"({a.layers} layers x {a.hidden}, {a.heads}/{a.kv_heads} heads, "
          f"vocab {a.vocab}, --max-seq {a.max_seq}; tp-mlir {dtype}):")
    keys = [config_key(r, dtype) for r in a.ranks]
    print("| prompt | onnxruntime ms | " +
          " | ".join(f"tp-mlir {k} ms" for k in keys) +
          " | x1 vs onnxruntime | x2 vs x1 |")
    print("|---" * (4 + len(a.ranks)) + "|")
    for length in a.prompts:
        row = [f"{1e3 * results['onnxruntime'][length]:.1f}"]
        row += [f"{1e3 * results[k][length]:.1f}" for k in keys]
        one = results.get(config_key(1, dtype), {}).get(length)
        two = results.get(config_key(2, dtype), {}).get(length)
        vs_ort = f"{results['onnxruntime'][length] / one:.2f}x" if one else "-"
        vs_one = f"{one / two:.2f}x" if one and two else "-"
        print(f"| {length} | " + " | ".join(row) +
              f" | {vs_ort} | {vs_one} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", choices=["export", "generate"])
    parser.add_argument("--layers", type=int, default=22)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--max-seq", type=int, default=2048)
    parser.add_argument("--prompts", type=lambda t: [int(x) for x in
                                                     t.split(",")],
                        default=[16, 64, 128, 512])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--check-new", type=int, default=4)
    parser.add_argument("--ranks", type=lambda t: [int(x) for x in
                                                   t.split(",")],
                        default=[1, 2])
    parser.add_argument("--dtypes", type=lambda t: t.split(","),
                        default=["f32"],
                        help="tp-compile --dtype of each artifact, e.g. "
                        "f32,bf16 (bf16: weights and activations in bf16, "
                        "f32 accumulation)")
    parser.add_argument("--prefill-chunks",
                        help="tp-compile --prefill-chunks (default: its own)")
    parser.add_argument("--work", help="keep the export and artifacts here")
    parser.add_argument("--site", default=SITE)
    parser.add_argument("--torch-python", default="/usr/bin/python3")
    parser.add_argument("--tp-compile",
                        default=os.path.join(REPO, "build", "bin",
                                             "tp-compile"))
    parser.add_argument("--out")
    parser.add_argument("--ids")
    parser.add_argument("--tokens")
    parser.add_argument("--new", type=int, default=1)
    a = parser.parse_args()
    if a.worker == "export":
        return worker_export(a)
    if a.worker == "generate":
        return worker_generate(a)

    # One BLAS thread per rank, as onnxruntime has one thread: tp-mlir's
    # own choice would give a lone rank both cores of this machine.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    sys.path.insert(0, os.path.join(REPO, "build", "python"))
    work = a.work or tempfile.mkdtemp(prefix="tp-prefill-")
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model.onnx")
    if not os.path.exists(model):
        print(f"exporting the model to {model} ...", flush=True)
        torch_worker(a, "--worker", "export", "--out", model)
    rng = np.random.default_rng(0)
    ids = rng.integers(2, a.vocab, size=(1, max(a.prompts))).astype(np.int64)
    ids_path = os.path.join(work, "ids.npy")
    np.save(ids_path, ids)
    ref_path = os.path.join(work, f"reference-{a.check_new}.npy")
    if not os.path.exists(ref_path):
        print("transformers generate() on the longest prompt ...", flush=True)
        torch_worker(a, "--worker", "generate", "--ids", ids_path,
                     "--tokens", ref_path, "--new", str(a.check_new))
    reference = np.load(ref_path)

    print("onnxruntime prefill (1 thread) ...", flush=True)
    ort = onnxruntime_prefill(model, ids, a)
    results = {"onnxruntime": ort}
    equal = {}
    for dtype in a.dtypes:
        for ranks in a.ranks:
            key = config_key(ranks, dtype)
            suffix = "" if dtype == "f32" else f"-{dtype}"
            chunks = []
            if a.prefill_chunks:
                chunks = ["--prefill-chunks", a.prefill_chunks]
                suffix += "-c" + a.prefill_chunks.replace(",", "-")
            artifact = os.path.join(work, f"x{ranks}{suffix}.tpa")
            if not os.path.exists(artifact):
                print(f"tp-compile --devices {ranks} --dtype {dtype} ...",
                      flush=True)
                subprocess.run([a.tp_compile, model, "--max-seq",
                                str(a.max_seq), "--max-batch", "1",
                                "--devices", str(ranks), "--dtype", dtype,
                                "--target", "cpu", *chunks, "-o", artifact],
                               check=True, stdout=subprocess.DEVNULL)
            best, tokens, last = tp_prefill(artifact, ids, a)
            results[key] = best
            equal[key] = (tokens.shape == reference.shape and
                          bool((tokens == reference).all()))

    for dtype in a.dtypes:
        print_table(results, dtype, a)
    for key, times in results.items():
        if key != "onnxruntime" and 16 in times and 64 in times:
            print(f"{key}: a 16-token prompt costs "
                  f"{times[16] / times[64]:.2f} of a 64-token one")
    for key, same in equal.items():
        print(f"{key}: {a.check_new} tokens after the {max(a.prompts)}-token "
              f"prompt {'equal' if same else 'DIFFER from'} transformers' "
              f"generate()")
    print(json.dumps({k: {str(n): v for n, v in t.items()}
                      for k, t in results.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
