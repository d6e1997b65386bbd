"""The packed-weight GEMM kernel (include/tp/Runtime/tp_packed_gemm.h, the
products of every CPU artifact with a resident weight) against OpenBLAS's
sgemm and this core's FMA peak, on the products of a forward pass.

Each shape set is every product of one forward pass, in order, each weight
its own matrix, so that the weights stream as they do in a model:

  minilm  6 layers of all-MiniLM-L6-v2's projections (q, k, v, output:
          384 x 384; MLP 384 x 1536 and 1536 x 384)
  gpt2    6 layers of GPT-2-small's (fused QKV 768 x 2304, output, MLP)
  head    GPT-2's LM head, 768 x 50304
  llama   6 layers of TinyLlama-1.1B's (q 2048 x 2048, k and v 2048 x 256,
          output, MLP gate and up 2048 x 5632, down 5632 x 2048; not
          by default: 1 GiB of weights)

bench/packed_gemm.cpp is built with the flags of an artifact (-O3
-march=native) against the header as it is in this checkout, and, with
--baseline REV, against the header at that git revision too; the two
binaries then run alternately, one process per round, so that both see
the same machine. Each round times --passes passes of the set by the
kernel and by sgemm (the same weights as stored), median of the passes,
then the FMA peak (16 independent accumulators, nothing else). The table
gives the median round of each; it asserts nothing.

Usage:
  python3 bench/packed_gemm.py                       # this checkout
  python3 bench/packed_gemm.py --baseline 67edbeb    # side by side with it
  python3 bench/packed_gemm.py --dtype bf16 --baseline HEAD   # bf16 weights
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

import blas

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HEADERS = {"tp_packed_gemm.h": "tp_packed_gemm.h",
           "tp_runtime.h": "RankContext.h",
           "tp_model_abi.h": "tp_model_abi.h"}  # artifact name: source name


def build(folder, revision=None):
    """The bench built against the runtime headers of `revision` (None:
    this checkout), in `folder`."""
    os.makedirs(folder, exist_ok=True)
    for name, source in HEADERS.items():
        path = os.path.join("include", "tp", "Runtime", source)
        if revision is None:
            shutil.copy(os.path.join(REPO, path), os.path.join(folder, name))
        else:
            text = subprocess.run(["git", "-C", REPO, "show", f"{revision}:{path}"],
                                  check=True, capture_output=True).stdout
            with open(os.path.join(folder, name), "wb") as f:
                f.write(text)
    binary = os.path.join(folder, "packed_gemm")
    cxx = os.environ.get("CXX", "c++")
    p = subprocess.run([cxx, "-O3", "-march=native", "-std=c++17", "-I", folder,
                        os.path.join(REPO, "bench", "packed_gemm.cpp"),
                        "-lopenblas", "-o", binary], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"packed_gemm.py: building against {revision or 'this checkout'} "
                 f"failed (the kernel needs AVX-512 or AVX2 and FMA):\n{p.stderr}")
    return binary


def run(binary, shape_set, rows, passes, dtype):
    p = subprocess.run([binary, shape_set, str(rows), str(passes), dtype], check=True,
                       capture_output=True, text=True, env=blas.env(1))
    return [float(v) for v in p.stdout.split()]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", nargs="+", default=["minilm", "gpt2", "head"])
    ap.add_argument("--rows", type=int, nargs="+", default=[8, 64, 128, 1024])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--baseline", help="a git revision whose header runs beside this one")
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32",
                    help="how the packed weights are stored (sgemm multiplies f32 ones)")
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="tp-packed-gemm-")
    try:
        binaries = {"this": build(os.path.join(work, "this"))}
        if a.baseline:
            binaries["baseline"] = build(os.path.join(work, "baseline"), a.baseline)
        print(f"# packed_gemm.py, {platform.machine()}, {os.cpu_count()} cores, "
              f"OpenBLAS coretype {blas.coretype() or 'default'}, median of "
              f"{a.rounds} alternating rounds; weights packed in {a.dtype}; GFLOP/s")
        head = f"{'set':7} {'rows':>5} {'packed':>7}"
        if a.baseline:
            head += f" {'baseline':>9} {'this/base':>9}"
        print(head + f" {'sgemm':>7} {'packed/sgemm':>12} {'FMA peak':>9} {'of peak':>7}")
        for shape_set in a.sets:
            for rows in a.rows:
                # About 0.1 s of products per round.
                flops = {"minilm": 2.12e7, "gpt2": 8.49e7, "head": 7.73e7,
                         "llama": 5.28e8}[shape_set] * rows
                passes = max(3, int(0.1 * 90e9 / flops))
                results = {name: [] for name in binaries}
                for _ in range(a.rounds):
                    for name, binary in binaries.items():
                        results[name].append(run(binary, shape_set, rows, passes, a.dtype))
                med = lambda name, i: statistics.median(r[i] for r in results[name])
                line = f"{shape_set:7} {rows:5d} {med('this', 0):7.1f}"
                if a.baseline:
                    line += f" {med('baseline', 0):9.1f} {med('this', 0) / med('baseline', 0):8.2f}x"
                sgemm = statistics.median(r[1] for rs in results.values() for r in rs)
                peak = statistics.median(r[2] for rs in results.values() for r in rs)
                line += (f" {sgemm:7.1f} {med('this', 0) / sgemm:11.2f}x {peak:9.1f}"
                         f" {med('this', 0) / peak:6.0%}")
                print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
