#!/usr/bin/python3
"""A traced module that pools per-sequence features the ways real model
heads do, for the converters of aten::index, max/min reductions and string
conv padding; saved as pooling/model.pt with its inputs (x.npy, last.npy)
and torch's outputs (output_<i>.npy):

- the last real token of each sequence, h[torch.arange(B), last] (a
  sequence-classification head), and fixed positions, h[:, [0, -1, 2]];
- the max and min over time, h.max(dim=1).values + h.min(dim=1)[0], and
  over everything, h.max();
- a dilated temporal conv with padding="same" and an even kernel (torch
  pads one more at the end), and a 2-D conv with padding="valid".

And two files for bad-input.test: mask_index.pt (x[x > 0], whose shape
depends on the values) and max_indices.pt (uses the indices of
x.max(dim)).

  /usr/bin/python3 test/Target/TorchScript/Inputs/make_pooling.py
"""
import os

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


class Pooling(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.temporal = nn.Conv1d(d, d, 4, padding="same", dilation=2)
        self.image = nn.Conv2d(1, 4, 3, padding="valid")

    def forward(self, x, last):
        h = self.proj(x)
        tokens = h[torch.arange(h.size(0)), last]
        picks = h[:, torch.tensor([0, -1, 2])]
        extremes = h.max(dim=1).values + h.min(dim=1)[0]
        temporal = self.temporal(h.transpose(1, 2)).transpose(1, 2)
        image = self.image(h.unsqueeze(1))
        return tokens + extremes, picks, temporal, image, h.max()


class MaskIndex(nn.Module):
    def forward(self, x):
        return x[x > 0]


class MaxIndices(nn.Module):
    def forward(self, x):
        return x.max(dim=1).indices


def main():
    torch.manual_seed(0)
    model = Pooling().eval()
    x = torch.randn(2, 8, 32)
    last = torch.tensor([7, 4])
    with torch.no_grad():
        traced = torch.jit.trace(model, (x, last))
        outputs = model(x, last)
    folder = os.path.join(HERE, "pooling")
    os.makedirs(folder, exist_ok=True)
    traced.save(os.path.join(folder, "model.pt"))
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    np.save(os.path.join(folder, "last.npy"), last.numpy())
    for i, output in enumerate(outputs):
        np.save(os.path.join(folder, f"output_{i}.npy"), output.numpy())
    for module, name in ((MaskIndex(), "mask_index.pt"),
                         (MaxIndices(), "max_indices.pt")):
        torch.jit.trace(module.eval(), torch.randn(2, 4)).save(
            os.path.join(HERE, name))


if __name__ == "__main__":
    main()
