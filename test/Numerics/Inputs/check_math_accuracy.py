"""Accuracy of the generated CPU code's own f32 exp, tanh and erf (expF,
tanhF, erfF in
the C++ prelude, which replace libm calls so that loops over them
vectorise), against double-precision numpy, end to end: an ONNX graph of
Exp, Tanh and Erf over inputs covering every range, compiled with tp-compile
--target cpu and run with tp-run.

Tolerances (stated here, checked below):
  exp   normal results: at most 1.5 ulp of the f32 result (measured 0.98);
        subnormal results: at most 1.5 units of the smallest subnormal
        (measured 0.74);
        below -104 exactly 0, above 88.7228 +inf, NaN stays NaN, -inf -> 0.
  tanh  absolute error at most 2e-7 (tanhF's documented 1.6e-7), relative
        error at most 1e-6; the sign of zero kept; +-inf -> +-1; NaN -> NaN.
  erf   relative error at most 5e-7 (4.45e-7 at worst, near |x| = 3.2,
        in a scan of 2 million points);
        the sign of zero kept; +-inf -> +-1; NaN -> NaN.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper


def inputs():
    grid = np.linspace(-110.0, 90.0, 400001)
    special = [0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.125, -0.125,
               88.72, 88.7228, 88.7229, 88.73, 89.0, -87.33, -87.34, -100.0,
               -103.97, -103.98, -104.0, -104.01, -200.0, -3.4e38, 3.4e38,
               np.inf, -np.inf, np.nan]
    subnormal = np.linspace(-103.99, -87.3, 20001)
    return np.concatenate([grid, special, subnormal]).astype(np.float32)


def ulp(x):
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp-compile", default="tp-compile")
    ap.add_argument("--tp-run", default="tp-run")
    a = ap.parse_args()
    x = inputs()
    n = x.size
    graph = helper.make_graph(
        [helper.make_node("Exp", ["x"], ["exp"]),
         helper.make_node("Tanh", ["x"], ["tanh"]),
         helper.make_node("Erf", ["x"], ["erf"])],
        "math", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
        [helper.make_tensor_value_info("exp", TensorProto.FLOAT, [n]),
         helper.make_tensor_value_info("tanh", TensorProto.FLOAT, [n]),
         helper.make_tensor_value_info("erf", TensorProto.FLOAT, [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, "math.onnx")
        onnx.save(model, path)
        np.save(os.path.join(work, "x.npy"), x)
        artifact = os.path.join(work, "math.tpa")
        subprocess.run([a.tp_compile, path, "--devices", "1", "--target", "cpu",
                        "-o", artifact], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([a.tp_run, artifact, "--input",
                        "x=" + os.path.join(work, "x.npy"), "--output-dir", work,
                        "--quiet"], check=True)
        got_exp = np.load(os.path.join(work, "exp.npy")).astype(np.float64)
        got_tanh = np.load(os.path.join(work, "tanh.npy")).astype(np.float64)
        got_erf = np.load(os.path.join(work, "erf.npy")).astype(np.float64)

    failures = 0
    xd = x.astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = np.exp(xd)
        ref32 = ref.astype(np.float32).astype(np.float64)
    finite = np.isfinite(ref32) & (ref32 > 0)
    normal = finite & (ref32 >= np.finfo(np.float32).tiny)
    err_ulp = np.abs(got_exp[normal] - ref[normal]) / ulp(ref32[normal])
    sub = finite & ~normal
    err_sub = np.abs(got_exp[sub] - ref[sub]) / np.finfo(np.float32).smallest_subnormal
    print(f"exp: {normal.sum()} normal results, max error {err_ulp.max():.2f} ulp; "
          f"{sub.sum()} subnormal, max error {err_sub.max():.2f} subnormal units")
    failures += err_ulp.max() > 1.5 or err_sub.max() > 1.5
    zero = xd < -104
    bad = ~(got_exp[zero] == 0)
    inf = xd > 88.7228394
    bad_inf = ~np.isposinf(got_exp[inf])
    nan_ok = np.isnan(got_exp[np.isnan(xd)]).all()
    print(f"exp: {zero.sum()} inputs below -104 give 0: {not bad.any()}; "
          f"{inf.sum()} above 88.7228 give inf: {not bad_inf.any()}; NaN kept: {nan_ok}")
    failures += bad.any() or bad_inf.any() or not nan_ok

    ref_t = np.tanh(xd)
    ok = ~np.isnan(xd)
    abs_err = np.abs(got_tanh[ok] - ref_t[ok])
    nz = ok & (ref_t != 0)
    rel_err = np.abs(got_tanh[nz] - ref_t[nz]) / np.abs(ref_t[nz])
    signs = np.signbit(got_tanh[xd == 0]) == np.signbit(xd[xd == 0])
    print(f"tanh: max abs error {abs_err.max():.2e}, max rel error {rel_err.max():.2e}; "
          f"zero signs kept: {signs.all()}; NaN kept: {np.isnan(got_tanh[np.isnan(xd)]).all()}")
    failures += abs_err.max() > 2e-7 or rel_err.max() > 1e-6 or not signs.all()
    failures += not np.isnan(got_tanh[np.isnan(xd)]).all()

    ref_e = np.array([math.erf(v) if not math.isnan(v) else math.nan for v in xd])
    nz = ok & (ref_e != 0)
    rel_e = np.abs(got_erf[nz] - ref_e[nz]) / np.abs(ref_e[nz])
    signs_e = np.signbit(got_erf[xd == 0]) == np.signbit(xd[xd == 0])
    limits = (got_erf[np.isposinf(xd)] == 1).all() and (got_erf[np.isneginf(xd)] == -1).all()
    nan_e = np.isnan(got_erf[np.isnan(xd)]).all()
    print(f"erf: max rel error {rel_e.max():.2e}; zero signs kept: {signs_e.all()}; "
          f"+-inf give +-1: {limits}; NaN kept: {nan_e}")
    failures += rel_e.max() > 5e-7 or not signs_e.all() or not limits or not nan_e
    print("FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
