#!/usr/bin/env python3
"""Cross-check the stored torch reference outputs against onnxruntime.

For every test/models/<name>/model.onnx, loads <input>.npy for each graph input,
runs the model under onnxruntime (CPU), and compares every graph output against
<output>.npy. Prints the max abs diff per output; exits non-zero on any mismatch
(> 1e-4), missing file, or shape/dtype mismatch.

Run with an interpreter that has onnxruntime + numpy:
  python3 test/models/check_references.py [model_name ...]
"""

import os
import sys

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["gpt2", "llama", "bert", "cnn"]
TOL = 1e-4


def check(name):
    d = os.path.join(HERE, name)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), opts,
                                providers=["CPUExecutionProvider"])
    feeds = {i.name: np.load(os.path.join(d, i.name + ".npy")) for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    results = sess.run(names, feeds)
    ok = True
    for n, got in zip(names, results):
        ref = np.load(os.path.join(d, n + ".npy"))
        if ref.dtype != np.float32 or got.shape != ref.shape:
            print(f"{name}/{n}: FAIL shape/dtype ref {ref.shape} {ref.dtype} vs ort {got.shape} {got.dtype}")
            ok = False
            continue
        diff = float(np.max(np.abs(got.astype(np.float32) - ref)))
        good = np.isfinite(diff) and diff < TOL
        ok &= good
        print(f"{name}/{n}: shape {ref.shape} max abs diff {diff:.3e} {'ok' if good else 'FAIL'}")
    return ok


def main():
    ok = True
    for name in (sys.argv[1:] or MODELS):
        try:
            ok &= check(name)
        except Exception as e:  # missing files, ORT load errors, ...
            print(f"{name}: FAIL {type(e).__name__}: {e}")
            ok = False
    print("all references match" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
