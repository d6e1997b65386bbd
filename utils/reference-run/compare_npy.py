#!/usr/bin/env python3
"""compare_npy.py GOT.npy REFERENCE.npy [--atol 1e-5] [--rtol 1e-5]

Prints the max abs difference and whether |got - ref| <= atol + rtol * |ref|
holds everywhere; exits 1 if it does not (used by `make demo`)."""
import argparse
import sys

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("got")
    ap.add_argument("reference")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args()
    got, ref = np.load(a.got), np.load(a.reference)
    if got.shape != ref.shape:
        print(f"FAIL: shape {got.shape} vs reference {ref.shape}")
        return 1
    diff = float(np.abs(got.astype(np.float64) - ref).max())
    ok = np.allclose(got, ref, atol=a.atol, rtol=a.rtol)
    print(f"{'OK' if ok else 'FAIL'}: {a.got} vs {a.reference}: shape {list(got.shape)}, "
          f"max abs diff {diff:.3g} (atol {a.atol:g}, rtol {a.rtol:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
