"""Products with weights packed once per rank (tp::rt::weightGemm,
tp_packed_gemm.h) against float64 numpy, end to end through tp-compile
--target cpu and tp-run, on shapes that cross every edge of the kernel:
rows not a multiple of its tile (8 rows with AVX-512, 6 with AVX2; every
remainder), columns not a multiple of its panel (32 or 16 columns) and
past its 256-column block, a depth past its 256-deep block, 128 rows (the
most the emitter packs a copy for; AVX-512 hands 65 to 128 rows to sgemm),
weights whose columns fill whole panels, which the rank packs into their
own memory and reads packed at any number of rows (1: no sgemv; 300: the
blocked kernel, A packed), weights
stored [K, N] (MatMul) and [N, K] (Gemm transB=1), a bias folded into the
product's init, and the same weight used by two products (packed once,
read by both), and an activation of a product (tanh), which runs in the
kernel's epilogue on each block of columns as it is final (on the BLAS
fallback, after the call). Each model runs twice in one tp-run (--repeat 2), so the
second pass reads the panels the first one packed.

Tolerance (stated here, checked below): |got - ref| <= 2e-5 + 2e-5 * |ref|
with ref in float64; outputs are O(1) (weights scaled by 1/sqrt(K)).
--dtype bf16 compiles with --dtype bf16: the weights are stored in bf16,
which the kernel widens (in registers, or each panel once into f32 at
128 rows or more), and every stored result is rounded to bf16. The
reference then multiplies the weights rounded to bf16 by x and tanh(x)
rounded to bf16 (tp-convert-dtype rounds an f32 input that meets a bf16
weight in a product, as a bf16 model takes its inputs) in float64, and the tolerance is two roundings' worth
of the terms' magnitude: |got - ref| <= 2e-3 + 8e-3 * scale, scale being
|ref|, or |x wt^T| + |bias| for the biased product, whose product is
rounded before the bias is added (bf16's unit roundoff is 2^-9).
--cxx-flags adds flags to the build (-mno-avx512f: the AVX2 kernel on a
machine with AVX-512; -mno-avx2: the cblas_sgemm fallback the same calls
take without either).
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# (rows, depth, columns): rows = batch x sequence of the input.
SHAPES = [(1, 5, 70), (3, 37, 70), (10, 37, 33), (13, 300, 64), (64, 260, 97),
          (15, 520, 31), (101, 600, 270), (128, 70, 300), (1, 40, 96),
          (300, 70, 128)]


def model(batch, seq, k, n, rng):
    w = (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32)
    wt = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
    bias = rng.standard_normal(n).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"]),
        helper.make_node("Reshape", ["x", "flat"], ["x2"]),
        helper.make_node("Gemm", ["x2", "wt", "bias"], ["z2"], transB=1),
        helper.make_node("Reshape", ["z2", "back"], ["z"]),
        # The same weight again, on a transformed input.
        helper.make_node("Tanh", ["x"], ["tx"]),
        helper.make_node("MatMul", ["tx", "w"], ["u"]),
        # An activation of a product: the packed kernel's epilogue.
        helper.make_node("Tanh", ["u"], ["tu"]),
    ]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wt, "wt"),
             numpy_helper.from_array(bias, "bias"),
             numpy_helper.from_array(np.array([batch * seq, k], np.int64), "flat"),
             numpy_helper.from_array(np.array([batch, seq, n], np.int64), "back")]
    graph = helper.make_graph(
        nodes, "packed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, k])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [batch, seq, n])
         for name in ("y", "z", "tu")], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

    def reference(x, dtype):
        r = to_bf16 if dtype == "bf16" else (lambda v: v)
        xd = r(x).astype(np.float64)
        wd, wtd, bd = (r(v).astype(np.float64) for v in (w, wt, bias))
        tx = r(np.tanh(x.astype(np.float32))).astype(np.float64)
        y, zp, u = xd @ wd, xd @ wtd.T, tx @ wd
        # (reference, the magnitude its rounding errors scale with: tanh's
        # are u's, as tanh is 1-Lipschitz and |tanh u| <= |u|)
        return {"y": (y, np.abs(y)), "z": (zp + bd, np.abs(zp) + np.abs(bd)),
                "tu": (np.tanh(u), np.abs(u))}
    return m, reference


def to_bf16(v):
    """float32 values rounded to the nearest bf16 (ties to even)."""
    bits = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp-compile", default="tp-compile")
    ap.add_argument("--tp-run", default="tp-run")
    ap.add_argument("--cxx-flags", default="")
    ap.add_argument("--devices", type=int, default=1)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    failures = 0
    for rows, k, n in SHAPES:
        batch = 1 if rows % 2 else 2
        seq = rows // batch
        m, reference = model(batch, seq, k, n, rng)
        x = rng.standard_normal((batch, seq, k)).astype(np.float32)
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "packed.onnx")
            onnx.save(m, path)
            np.save(os.path.join(work, "x.npy"), x)
            artifact = os.path.join(work, "packed.tpa")
            cmd = [a.tp_compile, path, "--devices", str(a.devices), "--target",
                   "cpu", "-o", artifact]
            if a.cxx_flags:
                cmd.append("--cxx-flags=" + a.cxx_flags)
            cmd += ["--dtype", a.dtype]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            with open(os.path.join(artifact, "model.cpp")) as f:
                source = f.read()
            in_place = source.count("tp::rt::residentWeightGemm(")
            packed_calls = source.count("tp::rt::weightGemm(") + in_place
            epilogues = source.count("tp::rt::Epilogue::of(")
            subprocess.run([a.tp_run, artifact, "--input",
                            "x=" + os.path.join(work, "x.npy"), "--output-dir",
                            work, "--repeat", "2", "--quiet"], check=True)
            worst = 0.0
            atol, rtol = (2e-3, 8e-3) if a.dtype == "bf16" else (2e-5, 2e-5)
            for name, (ref, scale) in reference(x, a.dtype).items():
                got = np.load(os.path.join(work, name + ".npy")).astype(np.float64)
                excess = np.abs(got - ref) - (atol + rtol * scale)
                worst = max(worst, float(np.abs(got - ref).max()))
                failures += bool((excess > 0).any())
        print(f"rows {rows} depth {k} columns {n}: {packed_calls} packed "
              f"products ({in_place} into the weights' own memory), "
              f"{epilogues} epilogues, max abs diff {worst:.2e}")
    print("FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
