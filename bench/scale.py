"""Scale: tp-compile on graphs that are wide or long rather than big.

Two ONNX graphs built with onnx.helper (no torch), cached in bench/.cache/:
  weights  N tiny weights: y = x + w_0 + w_1 + ... + w_{N-1}, each w_i an
           initializer of shape [4]  (N Adds, N initializers)
  chain    N elementwise nodes in a line, alternating Neg and Relu, on a
           [4, 64] input, with no weights

For each it runs `tp-compile --devices 2` (--target none and cpu) and prints
wall time and peak RSS (/usr/bin/time -f %M) per step, then runs the cpu
artifact and compares it with onnxruntime. Prints figures; asserts nothing.

  python3 bench/scale.py                    # N = 10000 for both (~3 min)
  python3 bench/scale.py --sizes 1000 3000  # smaller
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
CACHE = os.path.join(HERE, ".cache", "scale")


def build_weights(n, path):
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        w = f"w{i}"
        inits.append(numpy_helper.from_array(
            np.full([4], (i % 7) * 1e-3, np.float32), w))
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Add", [prev, w], [out], name=f"add{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "weights",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def build_chain(n, path):
    nodes = []
    prev = "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"t{i}"
        nodes.append(helper.make_node("Neg" if i % 2 == 0 else "Relu", [prev],
                                      [out], name=f"op{i}"))
        prev = out
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def timed(cmd):
    """Runs cmd; returns (seconds, peak RSS in MB or None, returncode)."""
    time_bin = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    with tempfile.NamedTemporaryFile(mode="r") as rss:
        full = ([time_bin, "-f", "%M", "-o", rss.name] + cmd) if time_bin else cmd
        start = time.perf_counter()
        proc = subprocess.run(full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
        text = rss.read().strip().splitlines()
        peak = int(text[-1]) / 1024 if time_bin and text and text[-1].isdigit() else None
    if proc.returncode:
        sys.stderr.write(proc.stderr[-2000:])
    return seconds, peak, proc.returncode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000])
    ap.add_argument("--kinds", nargs="+", default=["weights", "chain"])
    ap.add_argument("--tp-compile", default=os.path.join(HERE, "..", "build", "bin", "tp-compile"))
    ap.add_argument("--tp-run", default=os.path.join(HERE, "..", "build", "bin", "tp-run"))
    args = ap.parse_args()
    os.makedirs(CACHE, exist_ok=True)
    print(f"{'graph':>8} {'N':>6} {'target':>6} {'seconds':>8} {'peak MB':>8}  result")
    for kind in args.kinds:
        for n in args.sizes:
            model = os.path.join(CACHE, f"{kind}-{n}.onnx")
            if not os.path.exists(model):
                (build_weights if kind == "weights" else build_chain)(n, model)
            with tempfile.TemporaryDirectory() as work:
                for target in ("none", "cpu"):
                    out = os.path.join(work, f"{target}.tpa")
                    seconds, peak, rc = timed([args.tp_compile, model, "--devices", "2",
                                               "--target", target, "-o", out])
                    result = "ok" if rc == 0 else f"exit {rc}"
                    if rc == 0 and target == "cpu":
                        x = np.random.default_rng(0).standard_normal(
                            [8, 4] if kind == "weights" else [4, 64]).astype(np.float32)
                        np.save(os.path.join(work, "x.npy"), x)
                        run = subprocess.run([args.tp_run, out, "--input", f"x={work}/x.npy",
                                              "--output-dir", work, "--quiet"],
                                             capture_output=True, text=True)
                        if run.returncode:
                            result = "tp-run failed: " + run.stderr.strip()[-200:]
                        else:
                            import onnxruntime as ort
                            ref = ort.InferenceSession(model).run(None, {"x": x})[0]
                            got = np.load(os.path.join(work, "y.npy"))
                            result = f"ok, max abs diff vs onnxruntime {np.abs(got - ref).max():.2g}"
                    peak_text = f"{peak:.0f}" if peak is not None else "?"
                    print(f"{kind:>8} {n:>6} {target:>6} {seconds:>8.1f} {peak_text:>8}  {result}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
