"""CPU throughput of a compiled GPT-2-style model: tp-mlir vs onnxruntime,
and 2 ranks vs 1 rank.

Builds a GPT-2-shaped ONNX model with real random weights (onnx.helper, the
same graph as compile_time.py: fused QKV, tanh GELU, causal mask, untied LM
head; default 6 layers, hidden 768, 12 heads, vocab 50304) for each batch
size, then measures in one run, side by side:

  onnxruntime  InferenceSession on the same .onnx, 1 intra-op thread,
               all graph optimisations on
  tp-mlir x1   tp-compile --devices 1 --target cpu, tp-run (1 rank)
  tp-mlir x2   tp-compile --devices 2 --target cpu, tp-run (2 ranks as
               threads, one BLAS thread each): the 2-rank split of the same
               model on the 2 cores
  tp-mlir x2 mpi   the same artifact under mpirun -np 2 (--mpi)

Every figure is the median time of --repeat forward passes after one warm-up
(tp-run --repeat/--warmup times the forward only, like session.run). It
prints the figures and the ratios against the targets from the issue
(tp-mlir x1 >= 0.8x onnxruntime's throughput; 2 ranks >= 1.5x one rank); it
asserts nothing. The compiled outputs are checked against onnxruntime's
(max abs diff printed) so a fast wrong answer cannot pass unnoticed.

Usage:
  python3 bench/cpu_throughput.py                 # batch 1 and 8, seq 128
  python3 bench/cpu_throughput.py --batch 1 --layers 2 --repeat 3   # quick
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
import onnx

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from compile_time import RandomWeights, build_gpt2  # noqa: E402

CACHE = os.path.join(HERE, ".cache")


def build_model(a, batch):
    key = f"run_L{a.layers}_h{a.hidden}_a{a.heads}_v{a.vocab}_b{batch}_s{a.seq}"
    folder = os.path.join(CACHE, key)
    path = os.path.join(folder, "model.onnx")
    if os.path.exists(path):
        return path
    os.makedirs(folder, exist_ok=True)
    weights = RandomWeights(os.path.join(folder, "weights.bin"))
    model, _, params = build_gpt2(a.layers, hidden=a.hidden, heads=a.heads,
                                  mlp=4 * a.hidden, vocab=a.vocab,
                                  positions=max(a.seq, 128), seq=a.seq,
                                  batch=batch, weights=weights)
    weights.close()
    onnx.save(model, path)
    print(f"built {path} ({params / 1e6:.0f}M parameters)", flush=True)
    return path


def time_onnxruntime(model, ids, a):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(model, options,
                                   providers=["CPUExecutionProvider"])
    out = session.run(None, {"input_ids": ids})[0]
    times = []
    for _ in range(a.repeat):
        start = time.perf_counter()
        session.run(None, {"input_ids": ids})
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def compile_artifact(a, model, devices, work):
    artifact = os.path.join(work, f"d{devices}_{os.path.basename(os.path.dirname(model))}.tpa")
    cmd = [os.path.join(a.build_bin, "tp-compile"), model, "--target", "cpu",
           "--devices", str(devices), "-o", artifact]
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return artifact, time.perf_counter() - start


def time_tp_run(a, artifact, ids_path, out_dir, mpi=False, ranks=1):
    cmd = [os.path.join(a.build_bin, "tp-run"), artifact, "--input",
           f"input_ids={ids_path}", "--output-dir", out_dir, "--warmup", "1",
           "--quiet"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    # One sample per process so that the median is over independent runs.
    times = []
    for _ in range(a.repeat):
        run = cmd + ["--repeat", "1"]
        if mpi:
            root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
            run = ["mpirun", *root, "--oversubscribe", "--bind-to", "core",
                   "-np", str(ranks)] + run + ["--launcher", "mpi"]
        p = subprocess.run(run, check=True, capture_output=True, text=True, env=env)
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
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mpi", action="store_true", help="also time 2 ranks under mpirun")
    ap.add_argument("--build-bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--json", help="write the figures here")
    a = ap.parse_args()

    print(f"# cpu_throughput.py {datetime.datetime.now():%Y-%m-%d %H:%M}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    print(f"# GPT-2-style: {a.layers} layers, hidden {a.hidden}, {a.heads} heads, "
          f"vocab {a.vocab}, seq {a.seq}; median of {a.repeat} runs")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tp-bench-") as work:
        for batch in a.batch:
            model = build_model(a, batch)
            rng = np.random.default_rng(batch)
            ids = rng.integers(0, a.vocab, size=(batch, a.seq), dtype=np.int64)
            ids_path = os.path.join(work, f"ids_{batch}.npy")
            np.save(ids_path, ids)
            out_dir = os.path.join(work, "out")
            os.makedirs(out_dir, exist_ok=True)

            t_ort, ref = time_onnxruntime(model, ids, a)
            art1, c1 = compile_artifact(a, model, 1, work)
            t1, out1 = time_tp_run(a, art1, ids_path, out_dir)
            art2, c2 = compile_artifact(a, model, 2, work)
            t2, out2 = time_tp_run(a, art2, ids_path, out_dir)
            row = dict(batch=batch, ort_s=t_ort, tp1_s=t1, tp2_s=t2,
                       compile1_s=c1, compile2_s=c2,
                       diff1=float(np.abs(out1 - ref).max()),
                       diff2=float(np.abs(out2 - ref).max()))
            if a.mpi:
                t2m, out2m = time_tp_run(a, art2, ids_path, out_dir, mpi=True, ranks=2)
                row.update(tp2_mpi_s=t2m, diff2_mpi=float(np.abs(out2m - ref).max()))
            rows.append(row)
            tokens = batch * a.seq
            print(f"\nbatch {batch} x seq {a.seq} ({tokens} tokens)")
            print(f"  onnxruntime (1 thread)   {t_ort * 1e3:9.1f} ms  {tokens / t_ort:8.0f} tok/s")
            print(f"  tp-mlir 1 rank           {t1 * 1e3:9.1f} ms  {tokens / t1:8.0f} tok/s"
                  f"  max|diff| vs ort {row['diff1']:.2e}")
            print(f"  tp-mlir 2 ranks threads  {t2 * 1e3:9.1f} ms  {tokens / t2:8.0f} tok/s"
                  f"  max|diff| vs ort {row['diff2']:.2e}")
            if a.mpi:
                print(f"  tp-mlir 2 ranks mpi      {row['tp2_mpi_s'] * 1e3:9.1f} ms  "
                      f"{tokens / row['tp2_mpi_s']:8.0f} tok/s"
                      f"  max|diff| vs ort {row['diff2_mpi']:.2e}")
            print(f"  ratio tp-mlir 1 rank / onnxruntime throughput: {t_ort / t1:.2f}x"
                  f"  (target >= 0.8x)")
            print(f"  speed-up 2 ranks / 1 rank: {t1 / t2:.2f}x (threads)"
                  + (f", {t1 / row['tp2_mpi_s']:.2f}x (mpi)" if a.mpi else "")
                  + "  (target >= 1.5x)")
            print(f"  compile time: {c1:.1f} s (1 rank), {c2:.1f} s (2 ranks)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
