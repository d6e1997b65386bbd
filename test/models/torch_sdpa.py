"""torch.nn.functional.scaled_dot_product_attention for torch < 2.

PyTorch 2's fused attention op, which a module traced with PyTorch 2
records as `torch.scaled_dot_product_attention(...)` in its saved code.
Debian's torch 1.13 has none: enable() defines aten::scaled_dot_product_attention
(PyTorch 2.5's schema) with a kernel that computes its definition, so that
the test generators can trace modules that call it, as users' files do.
"""
import math

import torch

SCHEMA = ("scaled_dot_product_attention(Tensor query, Tensor key, "
          "Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, "
          "bool is_causal=False, *, float? scale=None, "
          "bool enable_gqa=False) -> Tensor")

_library = None


def attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *,
              scale=None, enable_gqa=False):
    """The op's definition (torch's documentation of it), in eval mode."""
    assert dropout_p == 0.0
    if enable_gqa and k.size(-3) != q.size(-3):
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    scores = q @ k.transpose(-2, -1) * (
        scale if scale is not None else 1 / math.sqrt(q.size(-1)))
    if is_causal:
        keep = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        scores = (scores.masked_fill(~attn_mask, float("-inf"))
                  if attn_mask.dtype == torch.bool else scores + attn_mask)
    return scores.softmax(-1) @ v


def enable():
    """Makes torch.nn.functional.scaled_dot_product_attention the aten op
    (defining it where torch lacks it), and lets transformers use it."""
    global _library
    if not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        _library = torch._C._dispatch_library("FRAGMENT", "aten", "",
                                              __file__, 0)
        _library.define(SCHEMA)
        _library.impl("scaled_dot_product_attention", "CPU", attention)
        torch.nn.functional.scaled_dot_product_attention = \
            torch.ops.aten.scaled_dot_product_attention
    try:
        # transformers checks the torch version, not the op.
        import transformers.modeling_utils
        transformers.modeling_utils.is_torch_sdpa_available = lambda: True
    except ImportError:
        pass
