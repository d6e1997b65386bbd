"""Compares the ONNX model tp-export-weights wrote (-o NAME.onnx) with the
model it was compiled from: every initializer equal (bit for bit, or within
a relative RTOL for an artifact compiled with --dtype bf16/f16, whose
weights were rounded), the same nodes, inputs and outputs, and the same
outputs from onnxruntime on the given inputs (atol = rtol = RTOL).

  check_onnx_export.py SOURCE.onnx EXPORTED.onnx [--rtol R] [NAME=FILE.npy ...]
"""
import argparse
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("source")
    parser.add_argument("exported")
    parser.add_argument("--rtol", type=float, default=0.0)
    parser.add_argument("inputs", nargs="*")
    args = parser.parse_args()
    src, out = onnx.load(args.source), onnx.load(args.exported)
    assert [n.SerializeToString() for n in src.graph.node] == \
        [n.SerializeToString() for n in out.graph.node], "nodes differ"
    assert src.graph.input == out.graph.input, "inputs differ"
    assert src.graph.output == out.graph.output, "outputs differ"
    a = {t.name: numpy_helper.to_array(t) for t in src.graph.initializer}
    b = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    assert a.keys() == b.keys(), "initializers differ"
    worst = 0.0
    for name, want in a.items():
        got = b[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if want.dtype.kind != "f":
            assert np.array_equal(got, want), name
            continue
        diff = float(np.abs(got.astype(np.float64) - want).max(initial=0))
        worst = max(worst, diff / max(1.0, float(np.abs(want).max(initial=0))))
    print(f"initializers: {len(a)}, max rel diff {worst:.2g}")
    if worst > args.rtol:
        sys.exit(f"initializers differ by {worst:.2g} > {args.rtol}")
    feed = {}
    for item in args.inputs:
        name, path = item.split("=", 1)
        feed[name] = np.load(path)
    if feed:
        run = [ort.InferenceSession(p, providers=["CPUExecutionProvider"])
               .run(None, feed) for p in (args.source, args.exported)]
        diff = max(float(np.abs(x - y).max()) for x, y in zip(*run))
        print(f"onnxruntime outputs: max abs diff {diff:.2g}")
        tol = args.rtol * max(1.0, max(float(np.abs(x).max()) for x in run[0]))
        if diff > tol:
            sys.exit(f"outputs differ by {diff:.2g} > {tol:.2g}")


if __name__ == "__main__":
    main()
