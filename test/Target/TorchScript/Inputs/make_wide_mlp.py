#!/usr/bin/env python3
"""A traced MLP with large weights, for tests of how much memory importing
and compiling a TorchScript file takes: LAYERS x (Linear(WIDTH, WIDTH),
GELU), saved with torch.jit.save as OUT/model.pt, with an input OUT/input.npy
and torch's output for it, OUT/output.npy (the reference run_artifact.py
compares with). Run with Debian's python3 (torch 1.13):

    make_wide_mlp.py OUT --layers 16 --width 2048 --batch 4
"""
import argparse
import math
import os

import numpy as np
import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=16)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    torch.manual_seed(0)
    blocks = []
    for _ in range(args.layers):
        linear = torch.nn.Linear(args.width, args.width)
        # Variance-preserving, so that activations stay O(1) at any depth.
        torch.nn.init.normal_(linear.weight, std=math.sqrt(2.0 / args.width))
        torch.nn.init.normal_(linear.bias, std=0.1)
        blocks += [linear, torch.nn.GELU()]
    model = torch.nn.Sequential(*blocks).eval()
    x = torch.randn(args.batch, args.width)
    with torch.no_grad():
        traced = torch.jit.trace(model, x)
        output = model(x)
    os.makedirs(args.out, exist_ok=True)
    torch.jit.save(traced, os.path.join(args.out, "model.pt"))
    np.save(os.path.join(args.out, "input.npy"), x.numpy())
    np.save(os.path.join(args.out, "output.npy"), output.numpy())


if __name__ == "__main__":
    main()
