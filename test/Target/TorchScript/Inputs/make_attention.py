#!/usr/bin/python3
"""A traced attention block that calls PyTorch 2's fused attention op every
way transformers' models and users' code do, saved as attention/model.pt
with its inputs (x.npy, mask.npy) and torch's output (output.npy):

- causal, with an explicit scale (is_causal=True, scale=0.3);
- a boolean mask (True: attend), with K/V heads repeated by hand;
- grouped-query attention by the op itself (enable_gqa=True), with an
  additive float mask.

8 query heads, 2 K/V heads, hidden 64. Debian's torch 1.13 lacks the op;
test/models/torch_sdpa.py defines it.

  /usr/bin/python3 test/Target/TorchScript/Inputs/make_attention.py
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "models"))
import torch_sdpa  # noqa: E402


class Attention(nn.Module):
    def __init__(self, hidden=64, heads=8, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.dim = hidden // heads
        self.q = nn.Linear(hidden, hidden)
        self.k = nn.Linear(hidden, kv_heads * self.dim)
        self.v = nn.Linear(hidden, kv_heads * self.dim)
        self.o = nn.Linear(hidden, hidden)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        k = self.k(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        v = self.v(x).view(b, s, self.kv_heads, self.dim).transpose(1, 2)
        repeat = self.heads // self.kv_heads
        causal = F.scaled_dot_product_attention(
            q, k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1),
            is_causal=True, scale=0.3)
        masked = F.scaled_dot_product_attention(
            q, k.repeat_interleave(repeat, 1), v.repeat_interleave(repeat, 1),
            attn_mask=mask)
        additive = torch.zeros(s, s).masked_fill(~mask[0, 0], -1e4)
        grouped = F.scaled_dot_product_attention(q, k, v, attn_mask=additive,
                                                 enable_gqa=True)
        out = (causal + masked + grouped).transpose(1, 2).reshape(b, s, -1)
        return self.o(out)


def main():
    torch_sdpa.enable()
    torch.manual_seed(0)
    model = Attention().eval()
    x = torch.randn(2, 8, 64)
    mask = torch.ones(2, 1, 8, 8, dtype=torch.bool).tril()
    mask[1, :, :, :2] = False  # the second sequence is left-padded
    mask[1, :, :2, 0] = True   # ... and its padding rows attend somewhere
    with torch.no_grad():
        traced = torch.jit.trace(model, (x, mask))
        y = model(x, mask)
    assert str(traced.inlined_graph).count(
        "aten::scaled_dot_product_attention") == 3
    folder = os.path.join(HERE, "attention")
    os.makedirs(folder, exist_ok=True)
    traced.save(os.path.join(folder, "model.pt"))
    np.save(os.path.join(folder, "x.npy"), x.numpy())
    np.save(os.path.join(folder, "mask.npy"), mask.numpy())
    np.save(os.path.join(folder, "output.npy"), y.numpy())


if __name__ == "__main__":
    main()
