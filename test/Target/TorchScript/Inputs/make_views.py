#!/usr/bin/python3
"""A traced module that writes in place into views and uses the ops the
hf-sweep's traces needed (utils/hf-sweep: Falcon, Persimmon, MobileBERT,
Funnel, XGLM, ConvBERT), saved as views/model.pt with its input (x.npy)
and torch's outputs (output_<i>.npy):

- x.T on a weight (aten::numpy_T, Falcon's rotary cache) and x.mT;
- torch.square (Persimmon's squared ReLU);
- F.pad, constant, with a pad list shorter than the rank (MobileBERT's
  shifted embeddings, Funnel's masks);
- F.unfold (aten::im2col: ConvBERT's span-based convolution);
- in-place writes into views: positions += offset through an unsqueeze
  (XGLM), scores[..., :n] *= mask through a slice (Funnel), a row of a
  transposed view scaled (select of a transpose), each read afterwards
  through the tensor they alias.

And bad_alias.pt for bad-input.test: a view made before an in-place write
into another view of the same tensor, read after it.

  /usr/bin/python3 test/Target/TorchScript/Inputs/make_views.py
"""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class Views(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.w = nn.Parameter(torch.randn(d, d))

    def forward(self, x):                   # x: [2, 6, 8]
        y = x @ self.w.T + x.mT.sum(-1, keepdim=True).mT
        z = torch.square(y)
        padded = F.pad(z, (1, 2))           # last dim: 1 before, 2 after
        windows = F.unfold(y.transpose(1, 2).unsqueeze(-1), [3, 1],
                           padding=[1, 0])  # [2, 8 * 3, 6]
        positions = torch.arange(6).unsqueeze(0)
        positions += 2                      # into the unsqueeze view
        scores = y.clone()
        scores[:, :, :4] *= 0.5             # into a slice
        t = scores.transpose(1, 2)
        t[:, 0] *= 3.0                      # a row of a transposed view
        return padded, windows, positions, scores


class BadAlias(nn.Module):
    def forward(self, x):
        y = x.clone()
        first = y[:, :2]                    # made before the write
        y[:, 2:] += 1.0
        second = y.unsqueeze(0)             # made after it: fine
        return first * 2.0 + second.sum()


def main():
    torch.manual_seed(0)
    model = Views().eval()
    x = torch.randn(2, 6, 8)
    with torch.no_grad():
        traced = torch.jit.trace(model, (x,), check_trace=False)
        outputs = model(x)
    folder = os.path.join(HERE, "views")
    os.makedirs(folder, exist_ok=True)
    traced.save(os.path.join(folder, "model.pt"))
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    for i, output in enumerate(outputs):
        np.save(os.path.join(folder, f"output_{i}.npy"),
                output.numpy().astype(np.float32 if output.is_floating_point()
                                      else np.int64))
    with torch.no_grad():
        torch.jit.trace(BadAlias().eval(), torch.randn(2, 4),
                        check_trace=False).save(
            os.path.join(HERE, "bad_alias.pt"))


if __name__ == "__main__":
    main()
