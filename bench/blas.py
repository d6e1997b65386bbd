"""The OpenBLAS kernels every process of a benchmark gets.

tp-run sets OPENBLAS_CORETYPE by the CPU's vector units before it loads a
model library (lib/Runtime/BlasKernels.cpp), because OpenBLAS alone falls
back to its slowest kernels on a CPU it does not know by model number (this
machine: "Intel(R) Xeon(R) Processor" with AVX-512 got the SSE3 kernels).
Debian's torch links the same OpenBLAS, so the benchmarks give torch and
tensor_parallel the same choice: every side runs the same sgemm.
"""
import os


def coretype():
    """OPENBLAS_CORETYPE as the user set it, else what tp-run would choose
    ("" for neither)."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return os.environ["OPENBLAS_CORETYPE"]
    flags = set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= flags:
        return "SkylakeX"
    if {"avx2", "fma"} <= flags:
        return "Haswell"
    return ""


def env(threads=1, base=None):
    """An environment with `threads` BLAS/OpenMP threads and the kernels above."""
    result = dict(base if base is not None else os.environ,
                  OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    if coretype():
        result["OPENBLAS_CORETYPE"] = coretype()
    return result
