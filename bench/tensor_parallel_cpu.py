"""CPU forward time of one HF GPT-2 model: tp-mlir on 2 ranks vs the
`tensor_parallel` library (PyPI tensor-parallel 2.0.0) on 2 CPU shards.

Both sides run the SAME model. Under Debian's python3 + python3-torch (1.13)
it builds `transformers.GPT2LMHeadModel(GPT2Config(...))` (seed 0, eval mode,
dropout 0, use_cache off; default 6 layers, n_embd 768, 12 heads, vocab
50304, 1024 positions, tied LM head), saves torch's logits for a fixed input
as the reference and exports the model with `torch.onnx.export` (opset 17,
input `input_ids` int64 [batch, seq], output `logits`, static shapes,
do_constant_folding=True) to bench/.cache/tp_gpt2_<config>/model.onnx. It
then measures, per batch size:

  torch 1 thread        the unsplit model, torch.set_num_threads(1),
                        OPENBLAS_NUM_THREADS=1 (one core)
  torch 2 threads       the unsplit model, torch.set_num_threads(2),
                        OPENBLAS_NUM_THREADS=2 (both cores; context only)
  tensor_parallel x2    tensor_parallel.tensor_parallel(model, ["cpu", "cpu"])
                        with its defaults (sharded=True), torch.set_num_threads(1)
                        and OPENBLAS_NUM_THREADS=1: the library runs each shard in
                        its own Python thread, so the 2 shards use the 2 cores
  tp-mlir x1 / x2       tp-compile --devices 1 / 2 --target cpu on the exported
                        .onnx, tp-run with 1 / 2 ranks as threads, one BLAS
                        thread each (timed exactly as bench/cpu_throughput.py)

Every figure is the median of --repeat forward passes after one warm-up,
under torch.no_grad() on the torch side (tp-run --repeat 1 --warmup 1, one
process per sample, times the forward only). It prints ms, tokens/s, the
ratio tensor_parallel time / tp-mlir 2-rank time (> 1: tp-mlir is faster)
and the max abs diff of each output vs torch's own logits. It asserts
nothing.

Setup (once): `make bench-deps` installs tensor_parallel 2.0.0, transformers
4.31.0 and the packages transformers imports into bench/.cache/site, which
Debian's python3 gets on PYTHONPATH. The driver itself runs on the pyenv
python3 (numpy only); the torch side runs in child processes of
--torch-python (default /usr/bin/python3).

Usage:
  python3 bench/tensor_parallel_cpu.py                    # batch 1 and 8, 6 layers
  python3 bench/tensor_parallel_cpu.py --layers 1 --batch 1 --repeat 2   # quick
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import blas

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CACHE = os.path.join(HERE, ".cache")
SITE = os.path.join(CACHE, "site")


# ------------------------------------------------------------ torch side (worker)
# Runs under Debian's python3 with PYTHONPATH=bench/.cache/site; imports torch,
# transformers and tensor_parallel only here.

def _build_torch_model(a):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    config = GPT2Config(n_layer=a.layers, n_embd=a.hidden, n_head=a.heads,
                        vocab_size=a.vocab, n_positions=a.positions,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                        use_cache=False)
    model = GPT2LMHeadModel(config).eval()
    return model


def worker_export(a):
    """Build the model, save torch's logits for ids.npy, export model.onnx."""
    import torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    model = _build_torch_model(a)
    ids = torch.from_numpy(np.load(os.path.join(a.folder, "ids.npy")))
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits
    np.save(os.path.join(a.folder, "logits_torch.npy"), logits.numpy())

    class LogitsOnly(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False, return_dict=False)[0]

    path = os.path.join(a.folder, "model.onnx")
    tmp = path + ".tmp"
    with torch.no_grad():
        torch.onnx.export(LogitsOnly(model), (ids,), tmp, opset_version=17,
                          input_names=["input_ids"], output_names=["logits"],
                          do_constant_folding=True)
    os.replace(tmp, path)


def worker_time(a):
    """Time one implementation; print a JSON line, save its logits."""
    import torch
    torch.set_num_threads(a.threads)
    model = _build_torch_model(a)
    ids = torch.from_numpy(np.load(os.path.join(a.folder, "ids.npy")))
    if a.impl == "tensor_parallel":
        import tensor_parallel
        model = tensor_parallel.tensor_parallel(model, ["cpu"] * a.shards)
    times = []
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=False).logits  # warm-up
        for _ in range(a.repeat):
            start = time.perf_counter()
            model(input_ids=ids, use_cache=False)
            times.append(time.perf_counter() - start)
    np.save(a.out, out.numpy())
    print("RESULT " + json.dumps(dict(times=times, threads=torch.get_num_threads())))


# ---------------------------------------------------------------- driver side

def torch_env(a, threads):
    env = blas.env(threads)
    env["PYTHONPATH"] = a.site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("PYTHONHOME", None)
    # The quiet ones: HF's advisory chatter and tensor_parallel's "unused pattern"
    # notes (q_attn is cross-attention; lm_head is tied to wte) go to stderr.
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    return env


def model_args(a):
    return ["--layers", str(a.layers), "--hidden", str(a.hidden), "--heads", str(a.heads),
            "--vocab", str(a.vocab), "--positions", str(a.positions)]


def run_worker(a, args, threads):
    cmd = [a.torch_python, os.path.abspath(__file__), *args, *model_args(a)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=torch_env(a, threads))
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit(f"torch worker failed ({' '.join(args[:2])}), exit {p.returncode}")
    return p.stdout


def export_model(a, batch):
    key = (f"tp_gpt2_L{a.layers}_h{a.hidden}_a{a.heads}_v{a.vocab}_p{a.positions}"
           f"_b{batch}_s{a.seq}")
    folder = os.path.join(CACHE, key)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path) and os.path.exists(os.path.join(folder, "logits_torch.npy")):
        return folder
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(batch)
    np.save(os.path.join(folder, "ids.npy"),
            rng.integers(0, a.vocab, size=(batch, a.seq), dtype=np.int64))
    start = time.perf_counter()
    run_worker(a, ["--worker", "export", "--folder", folder], 1)
    print(f"exported {path} ({os.path.getsize(path) / 2**20:.0f} MiB, "
          f"{time.perf_counter() - start:.0f} s)", flush=True)
    return folder


def time_torch(a, folder, impl, threads, work):
    out = os.path.join(work, f"{impl}_{threads}.npy")
    stdout = run_worker(a, ["--worker", "time", "--impl", impl, "--folder", folder,
                            "--threads", str(threads), "--repeat", str(a.repeat),
                            "--out", out], threads)
    result = json.loads(stdout.split("RESULT ", 1)[1].splitlines()[0])
    return statistics.median(result["times"]), np.load(out)


def compile_artifact(a, model, devices, work):
    artifact = os.path.join(work, f"d{devices}_{os.path.basename(os.path.dirname(model))}.tpa")
    cmd = [os.path.join(a.build_bin, "tp-compile"), model, "--target", "cpu",
           "--devices", str(devices), "-o", artifact]
    start = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        raise SystemExit(f"tp-compile --devices {devices} failed, exit {p.returncode}")
    return artifact, time.perf_counter() - start


def time_tp_run(a, artifact, ids_path, out_dir):
    cmd = [os.path.join(a.build_bin, "tp-run"), artifact, "--input",
           f"input_ids={ids_path}", "--output-dir", out_dir, "--warmup", "1",
           "--quiet", "--repeat", "1"]
    env = blas.env(1)
    # One sample per process so that the median is over independent runs.
    times = []
    for _ in range(a.repeat):
        p = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
        m = re.search(r"time per run: ([0-9.]+) ms", p.stdout)
        times.append(float(m.group(1)) / 1e3)
    return statistics.median(times), np.load(os.path.join(out_dir, "logits.npy"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--positions", type=int, default=1024)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-torch2", action="store_true",
                    help="skip the unsplit torch model on 2 threads")
    ap.add_argument("--build-bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--torch-python", default="/usr/bin/python3",
                    help="python with torch 1.13 (Debian's python3-torch)")
    ap.add_argument("--site", default=SITE,
                    help="PYTHONPATH for --torch-python (make bench-deps fills it)")
    ap.add_argument("--json", help="write the figures here")
    # torch-side worker mode (internal)
    ap.add_argument("--worker", choices=["export", "time"], help=argparse.SUPPRESS)
    ap.add_argument("--impl", choices=["torch", "tensor_parallel"], help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--shards", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()

    if a.worker == "export":
        return worker_export(a)
    if a.worker == "time":
        return worker_time(a)

    if not os.path.isdir(os.path.join(a.site, "tensor_parallel")):
        raise SystemExit(f"{a.site} has no tensor_parallel: run `make bench-deps` first")
    probe = subprocess.run(
        [a.torch_python, "-c", "import torch, transformers, tensor_parallel as t; "
         "print(torch.__version__, transformers.__version__, "
         "__import__('importlib.metadata').metadata.version('tensor_parallel'))"],
        capture_output=True, text=True, env=torch_env(a, 1))
    if probe.returncode != 0:
        sys.stderr.write(probe.stderr[-2000:])
        raise SystemExit(f"{a.torch_python} cannot import torch/transformers/tensor_parallel")
    torch_v, hf_v, tp_v = probe.stdout.split()

    print(f"# tensor_parallel_cpu.py {datetime.datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"# HF GPT2LMHeadModel: {a.layers} layers, n_embd {a.hidden}, {a.heads} heads, "
          f"vocab {a.vocab}, {a.positions} positions, seq {a.seq}; median of {a.repeat} runs")
    print(f"# torch {torch_v}, transformers {hf_v}, tensor_parallel {tp_v}; "
          f"threads: torch x1 and tensor_parallel use torch.set_num_threads(1) + "
          f"OPENBLAS_NUM_THREADS=1, tp-run 1 BLAS thread per rank")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as work:
        # Copies, so that a concurrent rebuild of build/ does not break a run.
        for tool in ("tp-compile", "tp-run"):
            src = os.path.join(a.build_bin, tool)
            if not os.path.exists(src):
                raise SystemExit(f"{src} is missing: build it first (make build)")
            shutil.copy2(src, os.path.join(work, tool))
        a.build_bin = work
        for batch in a.batch:
            folder = export_model(a, batch)
            model = os.path.join(folder, "model.onnx")
            ids_path = os.path.join(folder, "ids.npy")
            ref = np.load(os.path.join(folder, "logits_torch.npy"))
            out_dir = os.path.join(work, "out")
            os.makedirs(out_dir, exist_ok=True)

            def diff(x):
                return float(np.abs(x - ref).max())

            row = dict(batch=batch)
            t, o = time_torch(a, folder, "torch", 1, work)
            row.update(torch1_s=t, torch1_diff=diff(o))
            if not a.no_torch2:
                t, o = time_torch(a, folder, "torch", 2, work)
                row.update(torch2_s=t, torch2_diff=diff(o))
            t, o = time_torch(a, folder, "tensor_parallel", 1, work)
            row.update(tpar_s=t, tpar_diff=diff(o))
            art1, row["compile1_s"] = compile_artifact(a, model, 1, work)
            t, o = time_tp_run(a, art1, ids_path, out_dir)
            row.update(tp1_s=t, tp1_diff=diff(o))
            art2, row["compile2_s"] = compile_artifact(a, model, 2, work)
            t, o = time_tp_run(a, art2, ids_path, out_dir)
            row.update(tp2_s=t, tp2_diff=diff(o))
            rows.append(row)

            tokens = batch * a.seq
            print(f"\nbatch {batch} x seq {a.seq} ({tokens} tokens)")
            print(f"  {'':34} {'ms':>9} {'tok/s':>8}  max|diff| vs torch")
            lines = [("torch 1 thread", "torch1"),
                     ("torch 2 threads", "torch2"),
                     ("tensor_parallel 2 cpu shards", "tpar"),
                     ("tp-mlir 1 rank", "tp1"),
                     ("tp-mlir 2 ranks (threads)", "tp2")]
            for label, k in lines:
                if f"{k}_s" not in row:
                    continue
                t = row[f"{k}_s"]
                print(f"  {label:34} {t * 1e3:9.1f} {tokens / t:8.0f}  {row[f'{k}_diff']:.2e}")
            print(f"  ratio tensor_parallel / tp-mlir 2 ranks (time): "
                  f"{row['tpar_s'] / row['tp2_s']:.2f}x")
            print(f"  speed-up on 2 cores vs 1: tensor_parallel {row['torch1_s'] / row['tpar_s']:.2f}x"
                  f" (vs torch 1 thread), tp-mlir {row['tp1_s'] / row['tp2_s']:.2f}x"
                  f" (vs tp-mlir 1 rank)")
            print(f"  tp-compile time: {row['compile1_s']:.1f} s (1 rank), "
                  f"{row['compile2_s']:.1f} s (2 ranks)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(torch=torch_v, transformers=hf_v, tensor_parallel=tp_v,
                           layers=a.layers, seq=a.seq, repeat=a.repeat, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
