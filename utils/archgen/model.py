"""Plain torch modules for a `Features` record, written the way real
models write each feature (the family is named beside each), with weights
redrawn so that activations are O(1), and their export.

Needs torch (Debian's python3-torch 1.13); no transformers.
"""
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from features import alibi_slopes

BATCH, SEQ = 2, 12
MAX_POS = 64
# DeBERTa's attention span: relative positions clamp to [-SPAN, SPAN).
SPAN = 4
# transformers' mask value: the float32 minimum, not -inf.
NEG = torch.finfo(torch.float32).min
# What real heads do to their logits after the product (logit_post):
# Cohere's logit_scale, Granite's logits_scaling, Gemma 2's final cap (30;
# 3 here, so that the tanh bends the O(1) logits of the re-drawn weights).
LOGIT_SCALE, LOGIT_DIVISOR, LOGIT_CAP = 0.0625, 8.0, 3.0


class Conv1D(nn.Module):
    """GPT-2's Conv1D: a [in, out] weight applied with addmm on a
    [batch*seq, in] view."""

    def __init__(self, nx, nf, bias=True):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf)) if bias else None

    def forward(self, x):
        size_out = x.size()[:-1] + (self.nf,)
        flat = x.view(-1, x.size(-1))
        if self.bias is not None:
            flat = torch.addmm(self.bias, flat, self.weight)
        else:
            flat = torch.mm(flat, self.weight)
        return flat.view(size_out)


def linear(f, nx, nf, bias=None):
    bias = f.linear_bias if bias is None else bias
    if f.qkv == "conv1d":
        return Conv1D(nx, nf, bias)
    return nn.Linear(nx, nf, bias=bias)


class Norm(nn.Module):
    """Every form in which exports carry a norm."""

    def __init__(self, style, dim, eps=1e-5):
        super().__init__()
        self.style, self.eps = style, eps
        if style == "layernorm":
            self.ln = nn.LayerNorm(dim, eps=eps)
        else:
            self.weight = nn.Parameter(torch.ones(dim))
        if style in ("layernorm_manual", "nonorm"):
            self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        if self.style == "layernorm":
            return self.ln(x)
        if self.style == "layernorm_manual":
            mean = x.mean(-1, keepdim=True)
            var = (x - mean).pow(2).mean(-1, keepdim=True)
            return (x - mean) / torch.sqrt(var + self.eps) * self.weight + \
                self.bias
        if self.style == "rms_rsqrt":  # Llama, T5
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
                                   self.eps) * self.weight
        if self.style == "rms_div":
            return self.weight * (x / torch.sqrt(
                x.pow(2).mean(-1, keepdim=True) + self.eps))
        if self.style == "nonorm":  # MobileBERT's NoNorm: no statistics
            return x * self.weight + self.bias
        if self.style == "rms_gemma":  # weight stored as an offset from 1
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) +
                                   self.eps) * (1.0 + self.weight)
        raise ValueError(self.style)


class SeqConv(nn.Module):
    """A depthwise Conv1d over the sequence on [batch, seq, channels]
    (causal: padded on the left only, as a decoder needs)."""

    def __init__(self, channels, causal, kernel=3):
        super().__init__()
        self.causal = causal
        self.conv = nn.Conv1d(channels, channels, kernel, groups=channels,
                              padding=kernel - 1 if causal else kernel // 2)

    def forward(self, x):
        y = self.conv(x.transpose(1, 2))
        if self.causal:
            y = y[:, :, :x.size(1)]
        return y.transpose(1, 2)


def rotate_half(x):  # GPT-NeoX, Llama
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_every_two(x):  # GPT-J
    return torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)


class Attention(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f
        h, kv, d, width = f.heads, f.kv_heads, f.head_dim, f.inner
        if f.qk_bottleneck:  # MobileBERT: Q and K share a narrower input
            self.qk_down = linear(f, width, width // 2)
            self.qk_norm = Norm("nonorm", width // 2)
        if f.qkv == "separate":
            qk_width = width // 2 if f.qk_bottleneck else width
            self.q_proj = linear(f, qk_width, h * d)
            self.k_proj = linear(f, qk_width, kv * d)
            self.v_proj = linear(f, width, kv * d)
        else:
            self.qkv_proj = linear(f, width, (h + 2 * kv) * d)
        if f.attn_conv:
            self.conv = SeqConv(h * d, f.kind == "decoder")
        if f.qk_norm != "none":
            per_head = f.qk_norm == "head"
            self.q_norm = Norm(f.norm, d if per_head else h * d)
            self.k_norm = Norm(f.norm, d if per_head else kv * d)
        if f.rel_attention == "disentangled" and (
                f.qkv != "separate" or kv != h or f.qk_bottleneck):
            # DeBERTa v1 (share_att_key=False): projections of their own.
            self.pos_q_proj = linear(f, width, h * d)
            self.pos_k_proj = linear(f, width, h * d)
        self.o_proj = linear(f, h * d, width)

    def project(self, x, b, s):
        f = self.f
        h, kv, d = f.heads, f.kv_heads, f.head_dim
        if f.qkv == "separate":
            qk = self.qk_norm(self.qk_down(x)) if f.qk_bottleneck else x
            return (self.q_proj(qk).view(b, s, h, d),
                    self.k_proj(qk).view(b, s, kv, d),
                    self.v_proj(x).view(b, s, kv, d))
        qkv = self.qkv_proj(x)
        if f.qkv in ("fused", "conv1d"):  # [q | k | v]
            q, k, v = qkv.split([h * d, kv * d, kv * d], dim=-1)
            return (q.view(b, s, h, d), k.view(b, s, kv, d),
                    v.view(b, s, kv, d))
        if f.qkv == "interleaved" and kv == h:  # GPT-NeoX: per head q, k, v
            qkv = qkv.view(b, s, h, 3 * d)
            return qkv[..., :d], qkv[..., d:2 * d], qkv[..., 2 * d:]
        if f.qkv == "interleaved":  # Falcon-40B: per K/V group
            qkv = qkv.view(b, s, kv, h // kv + 2, d)
            return (qkv[:, :, :, :-2].reshape(b, s, h, d), qkv[:, :, :, -2],
                    qkv[:, :, :, -1])
        # kv_tail, Falcon-7B: K and V are the last heads of the projection.
        qkv = qkv.view(b, s, h + 2 * kv, d)
        if kv == 1:
            # transformers' Falcon (multi_query) picks them with index
            # lists, which export as Gather at constant indices.
            return qkv[:, :, :-2], qkv[:, :, [-2]], qkv[:, :, [-1]]
        return qkv[:, :, :h], qkv[:, :, h:h + kv], qkv[:, :, h + kv:]

    def rotary(self, x, cos, sin):
        f = self.f
        rot = f.rotary_dim
        turn = rotate_half if f.rotary_style == "half" else rotate_every_two
        if rot == f.head_dim:
            return x * cos + turn(x) * sin
        x_rot, x_pass = x[..., :rot], x[..., rot:]
        return torch.cat((x_rot * cos + turn(x_rot) * sin, x_pass), dim=-1)

    def repeat(self, x, b, s):
        f = self.f
        groups = f.heads // f.kv_heads
        if groups == 1:
            return x
        if f.repeat_kv == "repeat_interleave":
            return x.repeat_interleave(groups, dim=1)
        x = x[:, :, None, :, :].expand(b, f.kv_heads, groups, s, f.head_dim)
        return x.reshape(b, f.heads, s, f.head_dim)

    def disentangled(self, q, k, ctx, b, s):
        """DeBERTa's c2p + p2c scores ([b, h, s, s]): each query against
        the projected relative-position embeddings, picked at its key's
        relative position by torch.gather (and each key against the
        position queries, transposed), as DisentangledSelfAttention
        computes them (DeBERTa-v2: the K and Q projections shared, on
        [batch*heads] views)."""
        f = self.f
        h, d = f.heads, f.head_dim
        rel = ctx["rel_embeddings"]  # [2 * SPAN, width]
        shared = not hasattr(self, "pos_k_proj")
        pos_k = (self.k_proj if shared else self.pos_k_proj)(rel)
        pos_q = (self.q_proj if shared else self.pos_q_proj)(rel)
        pos_k = pos_k.view(2 * SPAN, h, d).transpose(0, 1)  # [h, 2S, d]
        pos_q = pos_q.view(2 * SPAN, h, d).transpose(0, 1)
        c2p_pos, p2c_pos = ctx["c2p_pos"], ctx["p2c_pos"]  # [s, s]
        if f.bh_view:  # DeBERTa-v2: [batch*heads, seq, 2 * span]
            qf, kf = q.reshape(b * h, s, d), k.reshape(b * h, s, d)
            pk = pos_k.repeat(b, 1, 1)
            pq = pos_q.repeat(b, 1, 1)
            c2p = torch.bmm(qf, pk.transpose(-1, -2))
            c2p = torch.gather(c2p, -1, c2p_pos.expand(b * h, s, s))
            p2c = torch.bmm(kf, pq.transpose(-1, -2))
            p2c = torch.gather(p2c, -1, p2c_pos.expand(b * h, s, s))
            out = c2p + p2c.transpose(-1, -2)
            return out.view(b, h, s, s) / math.sqrt(d)
        c2p = torch.matmul(q, pos_k.transpose(-1, -2))  # [b, h, s, 2S]
        c2p = torch.gather(c2p, -1, c2p_pos.expand(b, h, s, s))
        p2c = torch.matmul(k, pos_q.transpose(-1, -2))
        p2c = torch.gather(p2c, -1, p2c_pos.expand(b, h, s, s))
        return (c2p + p2c.transpose(-1, -2)) / math.sqrt(d)

    def heads(self, x, ctx):
        """The merged heads [b, s, heads * head_dim], before o_proj."""
        f = self.f
        h, d = f.heads, f.head_dim
        b, s = x.size(0), x.size(1)
        q, k, v = self.project(x, b, s)
        if f.qk_norm == "head":  # Qwen3: over each head's features
            q, k = self.q_norm(q), self.k_norm(k)
        elif f.qk_norm == "full":  # OLMo 2: over the whole projection
            q = self.q_norm(q.reshape(b, s, -1)).view(q.shape)
            k = self.k_norm(k.reshape(b, s, -1)).view(k.shape)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if f.position == "rotary":
            q = self.rotary(q, ctx["cos"], ctx["sin"])
            k = self.rotary(k, ctx["cos"], ctx["sin"])
        k, v = self.repeat(k, b, s), self.repeat(v, b, s)
        alpha = 1.0
        if f.scale == "query":
            q = q * d ** -0.5
        else:
            alpha = 1.0 / math.sqrt(d)
        bias = ctx.get("bias")  # [heads, s, s]
        if f.bh_view:  # BLOOM, GPT-NeoX: [batch*heads] views and bmm
            qf, kf = q.reshape(b * h, s, d), k.reshape(b * h, s, d)
            if bias is not None:
                full = bias.unsqueeze(0).expand(b, h, s, s).reshape(
                    b * h, s, s)
                scores = torch.baddbmm(full, qf, kf.transpose(1, 2),
                                       beta=1.0, alpha=alpha)
            else:
                scores = torch.bmm(qf, kf.transpose(1, 2))
                if alpha != 1.0:
                    scores = scores * alpha
            scores = scores.view(b, h, s, s)
        else:
            scores = torch.matmul(q, k.transpose(-1, -2))
            if alpha != 1.0:
                scores = scores / math.sqrt(d)
            if bias is not None:
                scores = scores + bias
        if f.rel_attention == "disentangled":
            scores = scores + self.disentangled(q, k, ctx, b, s)
        if "causal_keep" in ctx:
            scores = torch.where(ctx["causal_keep"], scores,
                                 torch.tensor(NEG, dtype=scores.dtype))
        if "causal_add" in ctx:
            scores = scores + ctx["causal_add"]
        scores = scores + ctx["pad"]
        probs = F.softmax(scores, dim=-1)
        if f.bh_view:
            out = torch.bmm(probs.view(b * h, s, s), v.reshape(b * h, s, d))
            out = out.view(b, h, s, d)
        else:
            out = torch.matmul(probs, v)
        out = out.transpose(1, 2).reshape(b, s, h * d)
        if f.attn_conv:
            out = out + self.conv(out)
        return out

    def forward(self, x, ctx):
        return self.o_proj(self.heads(x, ctx))


def gelu_tanh(x):  # GPT-2's gelu_new
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


class MLP(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f
        width, inter = f.inner, f.intermediate
        if f.gated and f.fused_gate:
            self.gate_up = linear(f, width, 2 * inter)
        elif f.gated:
            self.gate = linear(f, width, inter)
            self.up = linear(f, width, inter)
        else:
            self.fc1 = linear(f, width, inter)
        if f.mlp_conv:
            self.conv = SeqConv(inter, f.kind == "decoder")
        self.fc2 = linear(f, inter, width)

    def act(self, x):
        return {"gelu": F.gelu, "gelu_tanh": gelu_tanh, "relu": F.relu,
                "swiglu": F.silu, "geglu": F.gelu}[self.f.mlp](x)

    def hidden(self, x):
        """The intermediate, before fc2."""
        f = self.f
        if f.gated and f.fused_gate:
            gate, up = self.gate_up(x).chunk(2, dim=-1)
            y = self.act(gate) * up
        elif f.gated:
            y = self.act(self.gate(x)) * self.up(x)
        else:
            y = self.act(self.fc1(x))
        if f.mlp_conv:
            y = y + self.conv(y)
        return y

    def forward(self, x):
        return self.fc2(self.hidden(x))


class Layer(nn.Module):
    def __init__(self, f):
        super().__init__()
        self.f = f
        width = f.inner
        if f.bottleneck:  # MobileBERT
            self.down = nn.Linear(f.hidden, width, bias=f.linear_bias)
            self.down_norm = Norm(f.norm, width)
            self.up = nn.Linear(width, f.hidden, bias=f.linear_bias)
            if f.norm_place == "post":
                self.out_norm = Norm(f.norm, f.hidden)
        self.attn = Attention(f)
        self.mlp = MLP(f)
        self.norm1 = Norm(f.norm, width)
        if not (f.residual == "parallel" and f.parallel_norms == 1):
            self.norm2 = Norm(f.norm, width)
        if f.fused_out:  # one projection of [heads | intermediate]
            self.out = linear(f, width + f.intermediate, width)
        if f.norm_place == "sandwich":  # Gemma 2: each block's output too
            self.post1 = Norm(f.norm, width)
            self.post2 = Norm(f.norm, width)

    def block(self, y, ctx):
        f = self.f
        if f.residual == "parallel":  # GPT-J (one norm), GPT-NeoX (two)
            n1 = self.norm1(y)
            n2 = n1 if f.parallel_norms == 1 else self.norm2(y)
            if f.fused_out:
                z = self.out(torch.cat([self.attn.heads(n1, ctx),
                                        self.mlp.hidden(n2)], dim=-1))
                return z + y if f.parallel_sum == "blocks_first" else y + z
            if f.parallel_sum == "blocks_first":
                return self.attn(n1, ctx) + self.mlp(n2) + y
            return y + self.attn(n1, ctx) + self.mlp(n2)
        if f.norm_place == "post":  # BERT
            y = self.norm1(y + self.attn(y, ctx))
            return self.norm2(y + self.mlp(y))
        if f.norm_place == "sandwich":
            y = y + self.post1(self.attn(self.norm1(y), ctx))
            return y + self.post2(self.mlp(self.norm2(y)))
        y = y + self.attn(self.norm1(y), ctx)
        return y + self.mlp(self.norm2(y))

    def forward(self, x, ctx):
        if not self.f.bottleneck:
            return self.block(x, ctx)
        y = self.block(self.down_norm(self.down(x)), ctx)
        x = x + self.up(y)
        return self.out_norm(x) if self.f.norm_place == "post" else x


def relative_bucket(rel, bidirectional, num_buckets=16, max_distance=32):
    """T5's _relative_position_bucket."""
    buckets = 0
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (rel > 0).to(torch.long) * num_buckets
        n = torch.abs(rel)
    else:
        n = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (torch.log(n.float() / max_exact) /
                         math.log(max_distance / max_exact) *
                         (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, n, large)


class ArchModel(nn.Module):
    """A causal LM (input_ids, attention_mask -> logits) or an encoder
    (-> last_hidden_state) from a Features record."""

    def __init__(self, f):
        super().__init__()
        self.f = f
        hidden = f.hidden
        self.wte = nn.Embedding(f.vocab, hidden)
        if f.position == "learned":  # OPT's table has an offset of 2
            self.wpe = nn.Embedding(MAX_POS + 2, hidden)
        elif f.position == "sinusoidal":
            pos = torch.arange(MAX_POS, dtype=torch.float32)[:, None]
            div = torch.exp(torch.arange(0, hidden, 2, dtype=torch.float32)
                            * (-math.log(10000.0) / hidden))
            table = torch.zeros(MAX_POS, hidden)
            table[:, 0::2] = torch.sin(pos * div)
            table[:, 1::2] = torch.cos(pos * div)
            self.register_buffer("sinusoid", table, persistent=False)
        elif f.position == "rotary":
            rot = f.rotary_dim
            self.register_buffer(
                "inv_freq", 1.0 / (10000 ** (torch.arange(
                    0, rot, 2, dtype=torch.float32) / rot)),
                persistent=False)
        elif f.position == "relative":  # T5: one table, shared by layers
            self.relative = nn.Embedding(16, f.heads)
        if f.rel_attention == "disentangled":  # DeBERTa: shared by layers
            self.rel_embeddings = nn.Embedding(2 * SPAN, f.inner)
            self.rel_norm = Norm(f.norm, f.inner)  # norm_rel_ebd
        if f.kind == "decoder" and f.causal_mask == "buffer":  # GPT-2
            self.register_buffer("causal", torch.tril(torch.ones(
                MAX_POS, MAX_POS, dtype=torch.bool)).view(
                    1, 1, MAX_POS, MAX_POS), persistent=False)
        if f.embed_norm:
            self.embed_norm = Norm(f.norm, hidden)
        if f.shared_layers:  # ALBERT: one layer, applied f.layers times
            self.layers = nn.ModuleList([Layer(f)] * f.layers)
        else:
            self.layers = nn.ModuleList(Layer(f) for _ in range(f.layers))
        if f.norm_place in ("pre", "sandwich"):
            self.final_norm = Norm(f.norm, hidden)
        if f.kind == "decoder" and not f.tied:
            self.lm_head = nn.Linear(hidden, f.vocab, bias=f.lm_bias)
        elif f.kind == "decoder" and f.lm_bias:
            self.lm_bias = nn.Parameter(torch.zeros(f.vocab))

    def forward(self, input_ids, attention_mask):
        f = self.f
        s = input_ids.size(1)
        x = self.wte(input_ids)
        if f.embed_scale:  # Gemma
            x = x * torch.tensor(f.hidden ** 0.5, dtype=x.dtype)
        if f.position == "learned":
            if f.position_ids == "cumsum":  # OPT
                ids = (torch.cumsum(attention_mask, dim=1) *
                       attention_mask).long() - 1
            else:  # GPT-2
                ids = torch.arange(s, dtype=torch.long).unsqueeze(0)
            x = x + self.wpe(ids + 2)
        elif f.position == "sinusoidal":
            x = x + self.sinusoid[:s]
        if f.embed_norm:
            x = self.embed_norm(x)
        ctx = {"pad": (1.0 - attention_mask[:, None, None, :].to(x.dtype)) *
               NEG}
        if f.kind == "decoder":
            if f.causal_mask == "buffer":
                ctx["causal_keep"] = self.causal[:, :, :s, :s]
            else:
                ctx["causal_add"] = torch.full((s, s), NEG).triu(1)
        positions = torch.arange(s, dtype=torch.long)
        if f.position == "rotary":
            freqs = positions.float()[:, None] * self.inv_freq[None, :]
            if f.rotary_style == "half":
                emb = torch.cat((freqs, freqs), dim=-1)
            else:
                emb = torch.stack((freqs, freqs), dim=-1).flatten(-2)
            ctx["cos"], ctx["sin"] = emb.cos(), emb.sin()
        rel = positions[None, :] - positions[:, None]  # key - query
        if f.position == "alibi":
            slopes = torch.tensor(alibi_slopes(f.heads))[:, None, None]
            dist = rel if f.kind == "decoder" else -rel.abs()
            ctx["bias"] = slopes * dist.to(torch.float32)[None]
        elif f.position == "relative":
            buckets = relative_bucket(rel, f.kind == "encoder")
            ctx["bias"] = self.relative(buckets).permute(2, 0, 1)
        if f.rel_attention == "disentangled":
            # DeBERTa's relative_pos is query - key; c2p reads it shifted
            # into [0, 2 * SPAN), p2c its negation.
            ctx["rel_embeddings"] = self.rel_norm(self.rel_embeddings.weight)
            ctx["c2p_pos"] = torch.clamp(-rel + SPAN, 0, 2 * SPAN - 1)
            ctx["p2c_pos"] = torch.clamp(rel + SPAN, 0, 2 * SPAN - 1)
        for layer in self.layers:
            x = layer(x, ctx)
        if f.norm_place in ("pre", "sandwich"):
            x = self.final_norm(x)
        if f.kind == "encoder":
            return x
        if f.tied:
            logits = F.linear(x, self.wte.weight,
                              self.lm_bias if f.lm_bias else None)
        else:
            logits = self.lm_head(x)
        if f.logit_post == "scale":  # Cohere
            logits = logits * LOGIT_SCALE
        elif f.logit_post == "div":  # Granite
            logits = logits / LOGIT_DIVISOR
        elif f.logit_post == "softcap":  # Gemma 2
            logits = torch.tanh(logits / LOGIT_CAP) * LOGIT_CAP
        return logits


def redraw(model, seed, fresh=False):
    """Weights with O(1) activations (as test/models/hf/generate.py draws
    them): N(0, 1/fan_in) matrices, N(0, 1) embeddings, norms near 1
    (Gemma's offset near 0), small biases. With `fresh`, biases and norms
    stay as initialised (0 and 1), equal tensors that torch.onnx.export
    deduplicates into initializers shared across unrelated ops."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if fresh and p.dim() < 2 and not isinstance(
                        module, nn.Embedding):
                    continue
                if isinstance(module, nn.Embedding):
                    p.copy_(torch.randn(p.shape, generator=gen))
                elif isinstance(module, (Norm, nn.LayerNorm)):
                    base = 1.0 if name == "weight" and getattr(
                        module, "style", "") != "rms_gemma" else 0.0
                    p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
                elif p.dim() >= 2:
                    fan_in = p.shape[0] if isinstance(module, Conv1D) else \
                        p[0].numel()
                    p.copy_(torch.randn(p.shape, generator=gen) /
                            math.sqrt(fan_in))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    return model


def build(f, seed):
    torch.manual_seed(seed)
    return redraw(ArchModel(f).eval(), seed, fresh=f.init == "fresh")


def make_inputs(f, seed):
    gen = torch.Generator().manual_seed(seed + 2)
    ids = torch.randint(3, f.vocab, (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    if f.kind == "encoder":  # the second sentence is padded
        mask[1, SEQ - 4:] = 0
        ids[1, SEQ - 4:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def export(f, seed, folder):
    """Build, run and export the model of `f` into `folder` (model.onnx,
    inputs and torch's outputs as .npy); returns its zoo.json entry."""
    model = build(f, seed)
    inputs = make_inputs(f, seed)
    with torch.no_grad():
        out = model(*inputs.values())
    out_name = "logits" if f.kind == "decoder" else "last_hidden_state"
    if not torch.isfinite(out).all():
        raise RuntimeError("torch's output is not finite")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    dynamic = {n: {0: "batch", 1: "sequence"} for n in inputs}
    dynamic[out_name] = {0: "batch", 1: "sequence"}
    torch.onnx.export(model, tuple(inputs.values()), path,
                      input_names=list(inputs), output_names=[out_name],
                      dynamic_axes=dynamic, opset_version=f.opset,
                      do_constant_folding=True)
    for n, t in inputs.items():
        np.save(os.path.join(folder, n + ".npy"), t.numpy())
    np.save(os.path.join(folder, out_name + ".npy"),
            out.numpy().astype(np.float32))
    return {"model": "archgen", "about": f.describe(), "opset": f.opset,
            "kind": "causal" if f.kind == "decoder" else "encoder",
            "parameters": sum(p.numel() for p in model.parameters()),
            "inputs": {n: list(t.shape) for n, t in inputs.items()},
            "outputs": {out_name: list(out.shape)},
            "output_rms": float(out.pow(2).mean().sqrt())}
