#!/usr/bin/python3
"""Generate small, real ONNX test models (plus reference inputs/outputs) for tp-mlir.

What it makes (one folder per model under test/models/<name>/):
  model.onnx            exported with torch.onnx.export in eval mode, do_constant_folding=True
  <input_name>.npy      the exact inputs used (int64 token ids / masks, float32 images)
  <output_name>.npy     reference outputs computed by torch on those inputs (float32)
  README.md             architecture, sizes, opset, I/O names and shapes

Models (randomly initialised, float32 weights, all architectures written here, no hub):
  gpt2   GPT-2 style decoder, tied LM head, opset 17, dynamic batch/seq
  llama  Llama style decoder (RMSNorm, RoPE, GQA, SwiGLU), opset 14, dynamic batch/seq
  bert   BERT style encoder + pooler, attention_mask input, opset 14, static [2,16]
  cnn    small CNN for 3x32x32 images (Conv/Relu/MaxPool/BatchNorm/AvgPool/GAP/Gemm), opset 13

How to rerun (needs Debian's python3-torch 1.13 and python3-onnx):
  /usr/bin/python3 test/models/generate.py
Output is deterministic (torch.manual_seed(0) before each model). Cross-check the
stored references against onnxruntime with:
  python3 test/models/check_references.py
"""

import math
import os
import warnings

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
VOCAB = 256
HIDDEN = 64
MAX_POS = 64

warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
warnings.filterwarnings("ignore", category=UserWarning)


# --------------------------------------------------------------------------- gpt2
class GPT2Block(nn.Module):
    def __init__(self, d=HIDDEN, n_head=4):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.c_attn = nn.Linear(d, 3 * d)          # fused QKV
        self.c_proj = nn.Linear(d, d)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.c_fc = nn.Linear(d, 4 * d)
        self.mlp_proj = nn.Linear(4 * d, d)
        self.act = nn.GELU(approximate="tanh")     # GPT-2 "gelu_new"
        self.register_buffer(
            "bias", torch.tril(torch.ones(MAX_POS, MAX_POS)).view(1, 1, MAX_POS, MAX_POS))

    def attn(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(c, dim=2)
        hd = c // self.n_head
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp_proj(self.act(self.c_fc(self.ln_2(x))))
        return x


class GPT2(nn.Module):
    def __init__(self, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(MAX_POS, HIDDEN)
        self.h = nn.ModuleList([GPT2Block() for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(HIDDEN, eps=1e-5)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight     # tied
        # GPT-2-like small embedding init keeps logits O(1) (N(0,1) gives |logits| ~50).
        nn.init.normal_(self.wte.weight, std=0.1)
        nn.init.normal_(self.wpe.weight, std=0.1)

    def forward(self, input_ids):
        t = input_ids.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


# -------------------------------------------------------------------------- llama
class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, d=HIDDEN, n_head=4, n_kv=2, head_dim=16, theta=10000.0):
        super().__init__()
        self.n_head, self.n_kv, self.hd = n_head, n_kv, head_dim
        self.q_proj = nn.Linear(d, n_head * head_dim, bias=False)
        self.k_proj = nn.Linear(d, n_kv * head_dim, bias=False)
        self.v_proj = nn.Linear(d, n_kv * head_dim, bias=False)
        self.o_proj = nn.Linear(n_head * head_dim, d, bias=False)
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        freqs = torch.outer(torch.arange(MAX_POS).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)              # [MAX_POS, head_dim]
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def repeat_kv(self, x, n_rep):
        b, h, s, d = x.shape
        x = x[:, :, None, :, :].expand(b, h, n_rep, s, d)
        return x.reshape(b, h * n_rep, s, d)

    def forward(self, x, mask):
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv, self.hd).transpose(1, 2)
        cos = self.cos_cached[:s][None, None]
        sin = self.sin_cached[:s][None, None]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = self.repeat_kv(k, self.n_head // self.n_kv)
        v = self.repeat_kv(v, self.n_head // self.n_kv)
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd) + mask
        att = F.softmax(att, dim=-1, dtype=torch.float32)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, s, self.n_head * self.hd)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, d=HIDDEN, inter=128):
        super().__init__()
        self.gate_proj = nn.Linear(d, inter, bias=False)
        self.up_proj = nn.Linear(d, inter, bias=False)
        self.down_proj = nn.Linear(inter, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = LlamaAttention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = LlamaMLP()

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(self, n_layer=2):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([LlamaLayer() for _ in range(n_layer)])
        self.norm = RMSNorm(HIDDEN)
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        s = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        mask = torch.full((s, s), torch.finfo(torch.float32).min, dtype=torch.float32)
        mask = torch.triu(mask, diagonal=1)[None, None]      # [1,1,s,s] additive
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.norm(x))


# --------------------------------------------------------------------------- bert
class BertLayer(nn.Module):
    def __init__(self, d=HIDDEN, n_head=4, inter=256):
        super().__init__()
        self.n_head, self.hd = n_head, d // n_head
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_ln = nn.LayerNorm(d, eps=1e-12)
        self.intermediate = nn.Linear(d, inter)
        self.output = nn.Linear(inter, d)
        self.out_ln = nn.LayerNorm(d, eps=1e-12)

    def split(self, x):
        b, s, _ = x.shape
        return x.view(b, s, self.n_head, self.hd).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        b, s, d = x.shape
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + ext_mask
        probs = F.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous().view(b, s, d)
        x = self.attn_ln(self.attn_out(ctx) + x)                    # post-LN
        h = self.output(F.gelu(self.intermediate(x)))              # exact erf GELU
        return self.out_ln(h + x)


class Bert(nn.Module):
    def __init__(self, n_layer=2, type_vocab=2):
        super().__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.position_embeddings = nn.Embedding(MAX_POS, HIDDEN)
        self.token_type_embeddings = nn.Embedding(type_vocab, HIDDEN)
        self.emb_ln = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.register_buffer("position_ids", torch.arange(MAX_POS).unsqueeze(0))
        self.register_buffer("token_type_ids", torch.zeros(1, MAX_POS, dtype=torch.long))
        self.layers = nn.ModuleList([BertLayer() for _ in range(n_layer)])
        self.pooler = nn.Linear(HIDDEN, HIDDEN)

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        x = (self.word_embeddings(input_ids)
             + self.position_embeddings(self.position_ids[:, :s])
             + self.token_type_embeddings(self.token_type_ids[:, :s]))
        x = self.emb_ln(x)
        ext = attention_mask[:, None, None, :].to(torch.float32)   # [b,1,1,s]
        ext = (1.0 - ext) * -10000.0
        for layer in self.layers:
            x = layer(x, ext)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


# ---------------------------------------------------------------------------- cnn
class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.pool1 = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=1, padding=1)
        self.bn = nn.BatchNorm2d(16)        # after ReLU -> not folded into conv2
        self.pool2 = nn.AvgPool2d(2)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1, groups=1)
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.pool1(F.relu(self.conv1(x)))
        x = self.bn(F.relu(self.conv2(x)))
        x = self.pool2(x)
        x = F.relu(self.conv3(x))
        return self.fc(self.flatten(self.gap(x)))


# ------------------------------------------------------------------------- driver
def export(name, model, inputs, input_names, output_names, opset, dynamic_axes, readme):
    out_dir = os.path.join(HERE, name)
    os.makedirs(out_dir, exist_ok=True)
    model.eval()
    path = os.path.join(out_dir, "model.onnx")
    with torch.no_grad():
        outs = model(*inputs)
        if isinstance(outs, torch.Tensor):
            outs = (outs,)
        torch.onnx.export(model, tuple(inputs), path,
                          export_params=True, opset_version=opset,
                          do_constant_folding=True,
                          input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes)
    for n, t in zip(input_names, inputs):
        arr = t.numpy()
        arr = arr.astype(np.int64 if arr.dtype.kind in "iu" else np.float32)
        np.save(os.path.join(out_dir, n + ".npy"), arr)
    for n, t in zip(output_names, outs):
        np.save(os.path.join(out_dir, n + ".npy"), t.detach().numpy().astype(np.float32))
    with open(os.path.join(out_dir, "README.md"), "w") as f:
        f.write(readme.strip() + "\n")

    m = onnx.load(path)
    onnx.checker.check_model(m)
    ops = sorted({node.op_type for node in m.graph.node})
    print(f"== {name}: {os.path.getsize(path)} bytes, opset {opset}, "
          f"{len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers")
    print("   ops:", " ".join(ops))
    for n, t in zip(output_names, outs):
        print(f"   {n}: {tuple(t.shape)}")


HOWTO = "Made by `/usr/bin/python3 test/models/generate.py` (torch %s, seed 0, eval mode, " \
        "do_constant_folding=True); references checked by `python3 test/models/check_references.py`." \
        % torch.__version__


def main():
    # gpt2
    torch.manual_seed(0)
    model = GPT2()
    ids = torch.randint(0, VOCAB, (2, 16), dtype=torch.long)
    export("gpt2", model, [ids], ["input_ids"], ["logits"], 17,
           {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}, f"""
# gpt2
GPT-2 style decoder: vocab 256, learned positions (max 64), 2 layers, hidden 64, 4 heads, pre-LayerNorm,
fused QKV (c_attn 64->192), causal mask via tril buffer + masked_fill(-inf), MLP 64->256->64 with tanh-approx GELU,
final LayerNorm, LM head tied to wte (wte/wpe init N(0,0.1)). Opset 17 (LayerNormalization op), dynamic axes batch/seq.
Input `input_ids` int64 [batch, seq] (reference: [2, 16]); output `logits` float32 [batch, seq, 256].
{HOWTO}
""")

    # llama
    torch.manual_seed(0)
    model = Llama()
    ids = torch.randint(0, VOCAB, (2, 16), dtype=torch.long)
    export("llama", model, [ids], ["input_ids"], ["logits"], 14,
           {"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}}, f"""
# llama
Llama style decoder: vocab 256, 2 layers, hidden 64, 4 query heads / 2 KV heads (GQA via expand+reshape), head dim 16,
hand-written RMSNorm (eps 1e-6), RoPE (cos/sin buffers, rotate_half), causal additive mask (triu of finfo.min),
SwiGLU MLP (gate/up 64->128, down 128->64, silu), final RMSNorm, untied LM head, no biases. Opset 14, dynamic batch/seq.
Input `input_ids` int64 [batch, seq] (reference: [2, 16]); output `logits` float32 [batch, seq, 256].
{HOWTO}
""")

    # bert
    torch.manual_seed(0)
    model = Bert()
    ids = torch.randint(0, VOCAB, (2, 16), dtype=torch.long)
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[0, 12:] = 0
    mask[1, 9:] = 0
    export("bert", model, [ids, mask], ["input_ids", "attention_mask"],
           ["last_hidden_state", "pooler_output"], 14, None, f"""
# bert
BERT style encoder: word (256) + position (max 64) + token-type (2, all zero) embeddings, embedding LayerNorm,
2 layers, hidden 64, 4 heads, post-LayerNorm (eps 1e-12), additive mask (1-mask)*-10000 as [b,1,1,s],
MLP 64->256->64 exact erf GELU, pooler = tanh(Linear(first token)). Opset 14 (LayerNorm decomposed), static shapes.
Inputs `input_ids`, `attention_mask` int64 [2, 16] (mask has trailing zeros); outputs `last_hidden_state` float32 [2, 16, 64], `pooler_output` float32 [2, 64].
{HOWTO}
""")

    # cnn
    torch.manual_seed(0)
    model = CNN()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.3, 0.3)
    x = torch.randn(2, 3, 32, 32)
    export("cnn", model, [x], ["input"], ["logits"], 13, None, f"""
# cnn
Small CNN for 3x32x32: Conv(3->8,3x3,p1)+ReLU, MaxPool 2, Conv(8->16,3x3,p1)+ReLU, BatchNorm2d(16) (random stats,
after ReLU so not folded), AvgPool 2, Conv(16->16,3x3,p1)+ReLU, AdaptiveAvgPool(1) (GlobalAveragePool), Flatten, Linear 16->10 (Gemm).
Opset 13, static shapes. Input `input` float32 [2, 3, 32, 32]; output `logits` float32 [2, 10].
{HOWTO}
""")


if __name__ == "__main__":
    main()
