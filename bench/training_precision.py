"""Mixed-precision training of a GPT-2-small-shaped model: the loss curve
of --steps AdamW steps in f32, bf16 and f16, side by side in one run.

The model and its export are bench/training.py's (transformers'
GPT2LMHeadModel from a config, default 6 layers, hidden 768, 12 heads,
vocabulary 50304, tied LM head, weights re-drawn as the model zoo's,
returning its own loss; torch.onnx.export at batch 8 x sequence 128, f32).
The data are --microbatches fixed batches of random tokens, taken in turn
one per step (labels = input_ids). Each precision is one artifact,

  tp-compile model.onnx --train adamw --lr LR --weight-decay 0.01
      --clip-norm 1.0 --devices N --target cpu [--dtype bf16|f16]

trained by tp-run --train --steps S from the same initial weights: bf16
and f16 keep f32 master weights and optimizer states and compute in the
narrow type; f16 scales its loss dynamically (from 65536, as torch's
GradScaler; a step whose gradients overflow is skipped). With --torch,
torch's own f32 loop (one thread; AdamW after clip_grad_norm_) runs the
same steps first, as the reference of all three.

It prints every --every-th step's losses, the largest relative difference
of each precision's loss from the f32 reference over all steps, the steps
f16 skipped and its final scale, and the seconds per step of each. It
asserts nothing. Run with Debian's python3 (torch 1.13) and transformers
4.47 from the zoo site, or `make bench-training-precision`:

  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 bench/training_precision.py --torch  # ~25 min
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 bench/training_precision.py --layers 1 --hidden 64 \\
      --heads 4 --vocab 512 --batch 2 --seq 16 --torch       # smoke, ~20 s

(results/training_precision.txt.)
"""

import argparse
import datetime
import os
import re
import shlex
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import training  # noqa: E402  (sets one BLAS thread before torch loads)
import blas  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

DTYPES = ["f32", "bf16", "f16"]


def microbatches(a):
    out = []
    for k in range(a.microbatches):
        gen = torch.Generator().manual_seed(100 + k)
        ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
        out.append({"input_ids": ids,
                    "attention_mask": torch.ones(a.batch, a.seq,
                                                 dtype=torch.int64),
                    "labels": ids.clone()})
    return out


def torch_losses(wrapper, batches, a):
    """torch's f32 loop: every step's loss and seconds."""
    torch.set_num_threads(1)
    params = list(wrapper.parameters())
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.01)
    losses, times = [], []
    for step in range(a.steps):
        batch = batches[step % len(batches)]
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = wrapper(*batch.values())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
    return losses, times


def train(a, model, dtype, work):
    """tp-compile --train and tp-run --train in `dtype`: (losses, seconds
    per step, skipped steps, loss scales) or an error string."""
    artifact = os.path.join(work, f"train-{dtype}.tpa")
    cmd = [os.path.join(work, "tp-compile"), model, "--train", "adamw",
           "--lr", str(a.lr), "--weight-decay", "0.01", "--clip-norm", "1.0",
           "--devices", str(a.devices), "--target", "cpu", "-o", artifact]
    if dtype != "f32":
        cmd += ["--dtype", dtype]
    code, text, _ = training.run_logged(
        cmd, dict(os.environ), os.path.join(work, f"compile-{dtype}.log"))
    if code != 0:
        return f"tp-compile: exit {code}: {training.first_error(text)}"
    code, text, _ = training.run_logged(
        [os.path.join(work, "tp-run"), artifact, "--train", "--data",
         os.path.join(work, "data"), "--steps", str(a.steps)],
        blas.env(1), os.path.join(work, f"run-{dtype}.log"))
    if code != 0:
        return f"tp-run: exit {code}: {training.first_error(text)}"
    steps = re.findall(r"^step (\d+): loss (\S+) .*?\(([0-9.]+) ms(.*)$",
                       text, re.M)
    losses = [float(loss) for _, loss, _, _ in steps]
    seconds = [float(ms) / 1e3 for _, _, ms, _ in steps]
    skipped = [int(n) for n, _, _, rest in steps if "step skipped" in rest]
    scales = re.findall(r"; loss scale (\S+?)[:)]", text)
    return losses, seconds, skipped, scales


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--microbatches", type=int, default=4,
                    help="fixed batches, one per step in turn (default 4)")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--devices", type=int, default=2,
                    help="tensor-parallel ranks (default 2, one per core)")
    ap.add_argument("--torch", action="store_true",
                    help="also run torch's f32 loop, the reference")
    ap.add_argument("--every", type=int, default=5,
                    help="print every N-th step's losses (default 5)")
    ap.add_argument("--build-bin", default=os.path.join(training.REPO,
                                                        "build", "bin"))
    ap.add_argument("--keep", metavar="DIR")
    a = ap.parse_args()

    print(f"# training_precision.py {datetime.datetime.now():%Y-%m-%d %H:%M}:"
          f" python3 bench/training_precision.py {shlex.join(sys.argv[1:])}"
          .rstrip())
    print(f"# machine: {training.cpu_model()}, {os.cpu_count()} cores; "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"# GPT2LMHeadModel: {a.layers} layers, hidden {a.hidden}, "
          f"{a.heads} heads, vocab {a.vocab}; batch {a.batch} x seq {a.seq}; "
          f"{a.steps} AdamW steps (lr {a.lr}, weight decay 0.01, clip 1.0) "
          f"over {a.microbatches} fixed batches in turn; tp-mlir on "
          f"{a.devices} rank(s)", flush=True)
    begin = time.perf_counter()

    def progress(what):
        print(f"[{time.perf_counter() - begin:5.0f} s] {what}", flush=True)

    work = a.keep or tempfile.mkdtemp(prefix="tp-precision-")
    os.makedirs(work, exist_ok=True)
    training.copy_tools(a, work)
    wrapper = training.build(a)
    batches = microbatches(a)
    for k, batch in enumerate(batches):
        folder = os.path.join(work, "data", str(k))
        os.makedirs(folder, exist_ok=True)
        for name, value in batch.items():
            np.save(os.path.join(folder, name + ".npy"), value.numpy())
    model = os.path.join(work, "model.onnx")
    torch.onnx.export(wrapper, tuple(batches[0].values()), model,
                      input_names=list(batches[0]), output_names=["loss"],
                      opset_version=14)
    progress("exported")

    curves, seconds, notes = {}, {}, {}
    for dtype in DTYPES:
        progress(f"tp-mlir {dtype}")
        result = train(a, model, dtype, work)
        if isinstance(result, str):
            notes[dtype] = result
            progress(f"tp-mlir {dtype} FAILED: {result}")
            continue
        losses, times, skipped, scales = result
        curves[dtype] = losses
        seconds[dtype] = statistics.median(times[1:] or times)
        if scales:
            notes[dtype] = (f"loss scale {scales[0]} -> {scales[-1]}, "
                            f"{len(skipped)} step(s) skipped"
                            + (f": {skipped}" if skipped else ""))
    if a.torch:
        progress("torch f32")
        losses, times = torch_losses(wrapper, batches, a)
        curves["torch"] = losses
        seconds["torch"] = statistics.median(times[1:] or times)

    reference = "torch" if "torch" in curves else "f32"
    columns = (["torch"] if "torch" in curves else []) + [
        d for d in DTYPES if d in curves]
    print()
    print("step  " + "  ".join(f"{c:>10}" for c in columns))
    for step in range(a.steps):
        if (step + 1) % a.every and step not in (0, a.steps - 1):
            continue
        print(f"{step + 1:4d}  " + "  ".join(
            f"{curves[c][step]:10.5f}" if step < len(curves[c]) else
            f"{'-':>10}" for c in columns))
    print()
    print(f"against {reference} f32" if reference == "torch"
          else "against tp-mlir f32")
    for c in columns:
        if c == reference:
            continue
        want, got = curves[reference], curves[c]
        n = min(len(want), len(got))
        rel = [abs(g - w) / abs(w) for g, w in zip(got[:n], want[:n])]
        worst = max(range(n), key=lambda i: rel[i]) if n else 0
        print(f"  {c:>5}: max loss rel diff {max(rel, default=0):.2e} "
              f"(step {worst + 1}), mean {np.mean(rel) if rel else 0:.2e}, "
              f"last {rel[-1] if rel else 0:.2e}"
              + (f"; {notes[c]}" if c in notes else ""))
    for c in DTYPES:
        if c not in curves:
            print(f"  {c:>5}: {notes.get(c, 'not run')}")
    print("seconds per step (median of steps 2..): " + ", ".join(
        f"{c} {seconds[c]:.3f}" for c in columns))
    progress("done")


if __name__ == "__main__":
    main()
