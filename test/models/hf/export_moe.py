#!/usr/bin/python3
"""Mixture-of-experts decoders exported the way users export them: the
research exports for issue 40 (docs/design/moe-import.md).

Tiny random-weight MixtralForCausalLM and Qwen2MoeForCausalLM, their weights
re-drawn with generate.py's `redraw` (O(1) activations, so that the router's
top-k is not a tie), exported with `torch.onnx.export` as generate.py
exports the dense zoo: eval mode, `use_cache=False`, logits only, inputs
input_ids + attention_mask with dynamic batch and sequence axes, constant
folding on; at opset 14 and 17. Each export is checked with onnxruntime
(when it is importable; Debian's python has none, the pyenv python3 has it:
`--check`) against torch's logits on the traced shape and on other shapes
(1 token: most experts get no token; an odd batch and length).

Two more exports are mixtral with transformers 5's `batched_mm` experts
(stacked [E, ...] weights gathered by the top-k ids; 4.47 has no such
path): `mixtral_batched_mm_sum` combines the k outputs by a sum and matches;
`mixtral_batched_mm` combines by index_add_ as transformers 5 does, which
torch 1.13 exports wrong (KNOWN_WRONG: --check expects the mismatch).

Outputs go to OUT (default /tmp/moe/, not the repository):
  OUT/<name>-opset<N>/model.onnx
  OUT/<name>-opset<N>/{input_ids,attention_mask,logits}.npy   traced shape
  OUT/<name>-opset<N>/check<i>_{input_ids,attention_mask,logits}.npy
  OUT/index.json    what each model is, its config and shapes

--zoo instead writes the models of ZOO (the same configs made smaller, so
that each model.onnx stays well under 1 MB) into the repository's zoo,
test/models/hf/<name>/{model.onnx,input_ids,attention_mask,logits.npy} at
opset 14, and adds their entries to test/models/hf/zoo.json (leaving the
others as they are), where utils/reference-run/run_zoo.py and
test/Numerics/zoo/{mixtral,qwen2_moe}.test read them.

Needs Debian's python3-torch 1.13 and transformers 4.47 (see generate.py):
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 test/models/hf/export_moe.py [--out DIR] [name ...]
then, with onnxruntime:
  python3 test/models/hf/export_moe.py --check [--out DIR] [name ...]
Deterministic: torch.manual_seed(0) before each model.
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OPSETS = (14, 17)
BATCH, SEQ = 2, 12
# Other shapes checked against torch: (batch, sequence).
CHECK_SHAPES = ((1, 1), (3, 7), (1, 40))

# name -> (transformers config class, model class, config, what it is)
MODELS = {
    "mixtral": (
        "MixtralConfig", "MixtralForCausalLM",
        dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, num_local_experts=4,
             num_experts_per_tok=2, max_position_embeddings=64,
             sliding_window=None, router_jitter_noise=0.0),
        "MixtralForCausalLM: 4 experts, top-2, softmax -> topk -> divide "
        "by the sum; SwiGLU experts (w1, w3, w2), no shared expert"),
    "qwen2_moe": (
        "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
        dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
             moe_intermediate_size=32, shared_expert_intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
             norm_topk_prob=False, decoder_sparse_step=1,
             max_position_embeddings=64, use_sliding_window=False),
        "Qwen2MoeForCausalLM: 8 experts, top-2, softmax -> topk, not "
        "renormalised; a shared SwiGLU expert scaled by "
        "sigmoid(x @ shared_expert_gate)"),
    "qwen2_moe_norm": (
        "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
        dict(vocab_size=1000, hidden_size=64, intermediate_size=128,
             moe_intermediate_size=32, shared_expert_intermediate_size=128,
             num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, num_experts=8, num_experts_per_tok=2,
             norm_topk_prob=True, decoder_sparse_step=1,
             max_position_embeddings=64, use_sliding_window=False),
        "Qwen2MoeForCausalLM as qwen2_moe with norm_topk_prob=True: the "
        "top-2 probabilities divided by their sum"),
}
# transformers 4.47 has only the eager per-expert loop; transformers 5's
# `batched_mm` experts (integrations/moe.py) gather stacked [E, ...] weights
# by the top-k indices. These are mixtral (same weights) with each
# MixtralSparseMoeBlock replaced by that computation (BatchedMoe below):
# "index_add" combines as transformers does (index_add_ over token ids that
# repeat k times), "sum" as a reshape to [T, k, H] and a sum over k.
BATCHED = {
    "mixtral_batched_mm": ("mixtral", "index_add",
                           "mixtral with transformers 5's batched_mm experts "
                           "(stacked gate_up [E, 2I, H], down [E, H, I], "
                           "Gather by top-k ids, bmm, index_add_)"),
    "mixtral_batched_mm_sum": ("mixtral", "sum",
                               "mixtral_batched_mm combining by a sum over "
                               "the k slots instead of index_add_"),
}
# The zoo's copies: name -> (model of MODELS, config changes). Smaller
# vocabularies and experts than the research exports (1.6 MB each).
ZOO = {
    "mixtral": ("mixtral", dict(vocab_size=512, intermediate_size=32)),
    "qwen2_moe": ("qwen2_moe", dict(vocab_size=512, moe_intermediate_size=16,
                                    shared_expert_intermediate_size=32)),
}
ZOO_OPSET = 14
# Exports that onnxruntime is expected to get wrong, and why.
KNOWN_WRONG = {
    "mixtral_batched_mm": "torch 1.13 exports index_add_ as ScatterElements "
                          "without reduction (its symbolic assumes no "
                          "repeated index; each token repeats k times), so "
                          "only one of the k expert outputs survives",
}


def inputs_for(batch, seq, vocab, seed):
    import torch
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq), generator=gen)
    mask = torch.ones(batch, seq, dtype=torch.int64)
    return {"input_ids": ids, "attention_mask": mask}


def batched_moe(block, combine):
    """A module computing `block` (a MixtralSparseMoeBlock) the way
    transformers 5's batched_mm_experts_forward does."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class BatchedMoe(nn.Module):
        def __init__(self):
            super().__init__()
            self.top_k = block.top_k
            self.gate = block.gate
            self.act_fn = block.experts[0].act_fn
            with torch.no_grad():
                self.gate_up_proj = nn.Parameter(torch.stack([
                    torch.cat([e.w1.weight, e.w3.weight]) for e in block.experts]))
                self.down_proj = nn.Parameter(torch.stack([
                    e.w2.weight for e in block.experts]))

        def forward(self, hidden_states):
            b, s, h = hidden_states.shape
            x = hidden_states.view(-1, h)
            router_logits = self.gate(x)
            w = F.softmax(router_logits, dim=1, dtype=torch.float)
            w, ids = torch.topk(w, self.top_k, dim=-1)
            w = w / w.sum(dim=-1, keepdim=True)
            t = x.shape[0]
            expert_ids = ids.reshape(-1)                        # [T*k]
            token_idx = torch.arange(t).unsqueeze(1).expand(
                -1, self.top_k).reshape(-1)                     # [T*k]
            gate_up = torch.bmm(self.gate_up_proj[expert_ids],  # [T*k, 2I, H]
                                x[token_idx].unsqueeze(-1)).squeeze(-1)
            g, u = gate_up.chunk(2, dim=-1)
            y = torch.bmm(self.down_proj[expert_ids],           # [T*k, H, I]
                          (self.act_fn(g) * u).unsqueeze(-1)).squeeze(-1)
            y = y * w.reshape(-1).unsqueeze(-1)
            if combine == "index_add":
                out = torch.zeros_like(x).index_add_(0, token_idx, y)
            else:
                out = y.view(t, self.top_k, h).sum(dim=1)
            return out.view(b, s, h), router_logits

    return BatchedMoe()


def build(name, changes=None):
    import torch
    import transformers
    sys.path.insert(0, HERE)
    from generate import CausalLM, redraw
    if name in BATCHED:
        base, combine, _ = BATCHED[name]
        model, inner = build(base)
        for layer in inner.model.layers:
            layer.block_sparse_moe = batched_moe(layer.block_sparse_moe,
                                                 combine)
        return model, inner
    config_cls, model_cls, config, _ = MODELS[name]
    torch.manual_seed(0)
    cfg = getattr(transformers, config_cls)(**(config | (changes or {})))
    # torch 1.13 has no scaled_dot_product_attention, so transformers 4.47
    # picks eager attention by itself; say so rather than rely on it.
    cfg._attn_implementation = "eager"
    model = getattr(transformers, model_cls)(cfg).eval()
    return CausalLM(redraw(model)), model


def export(name, out):
    import torch
    import transformers
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    model, inner = build(name)
    vocab = inner.config.vocab_size
    inputs = inputs_for(BATCH, SEQ, vocab, 2)
    names = list(inputs)
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names}
    dynamic["logits"] = {0: "batch", 1: "sequence"}
    base = BATCHED[name][0] if name in BATCHED else name
    about = BATCHED[name][2] if name in BATCHED else MODELS[name][3]
    entry = {"model": type(inner).__name__, "about": about,
             "config": MODELS[base][2],
             "attention": inner.config._attn_implementation,
             "parameters": sum(p.numel() for p in inner.parameters()),
             "inputs": {n: list(t.shape) for n, t in inputs.items()},
             "check_shapes": [list(s) for s in CHECK_SHAPES], "opsets": {}}
    with torch.no_grad():
        logits = model(*inputs.values())
        if name in BATCHED:  # the same function as the eager loop
            eager = build(BATCHED[name][0])[0](*inputs.values())
            entry["max_abs_vs_eager"] = float((logits - eager).abs().max())
            print(f"{name}: torch, |batched - eager loop| = "
                  f"{entry['max_abs_vs_eager']:.2e}")
        checks = []
        for i, (b, s) in enumerate(CHECK_SHAPES):
            extra = inputs_for(b, s, vocab, 10 + i)
            checks.append((extra, model(*extra.values())))
    for opset in OPSETS:
        folder = os.path.join(out, f"{name}-opset{opset}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        try:
            torch.onnx.export(model, tuple(inputs.values()), path,
                              input_names=names, output_names=["logits"],
                              dynamic_axes=dynamic, opset_version=opset,
                              do_constant_folding=True)
        except Exception as e:  # report it, go on with the next opset
            entry["opsets"][opset] = {"error": f"{type(e).__name__}: {e}"}
            print(f"{name} opset {opset}: export FAILED: "
                  f"{type(e).__name__}: {e}")
            continue
        for n, t in inputs.items():
            np.save(os.path.join(folder, n + ".npy"), t.numpy())
        np.save(os.path.join(folder, "logits.npy"), logits.numpy())
        for i, (extra, ref) in enumerate(checks):
            for n, t in extra.items():
                np.save(os.path.join(folder, f"check{i}_{n}.npy"), t.numpy())
            np.save(os.path.join(folder, f"check{i}_logits.npy"), ref.numpy())
        entry["opsets"][opset] = {"kib": os.path.getsize(path) // 1024}
        print(f"{name} opset {opset}: {entry['parameters']} parameters, "
              f"{os.path.getsize(path) // 1024} KiB -> {path}")
    return entry


def export_zoo(name):
    """Writes zoo model `name` into test/models/hf/<name>/; returns its
    zoo.json entry (generate.py's fields)."""
    import torch
    import transformers
    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    base, changes = ZOO[name]
    model, inner = build(base, changes)
    inputs = inputs_for(BATCH, SEQ, inner.config.vocab_size, 2)
    names = list(inputs)
    dynamic = {n: {0: "batch", 1: "sequence"} for n in names + ["logits"]}
    with torch.no_grad():
        logits = model(*inputs.values())
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, tuple(inputs.values()), path, input_names=names,
                      output_names=["logits"], dynamic_axes=dynamic,
                      opset_version=ZOO_OPSET, do_constant_folding=True)
    for n, t in inputs.items():
        np.save(os.path.join(folder, n + ".npy"), t.numpy())
    np.save(os.path.join(folder, "logits.npy"), logits.numpy())
    params = sum(p.numel() for p in inner.parameters())
    print(f"{name}: opset {ZOO_OPSET}, {params} parameters, "
          f"{os.path.getsize(path) // 1024} KiB -> {path}")
    return {"model": type(inner).__name__,
            "about": MODELS[base][3] + " (eager per-expert loop, NonZero)",
            "opset": ZOO_OPSET, "kind": "causal", "parameters": params,
            "inputs": {n: list(t.shape) for n, t in inputs.items()},
            "outputs": {"logits": list(logits.shape)}}


def check(name, out):
    """onnxruntime against torch's logits, on every stored input."""
    import onnxruntime as ort
    ok = True
    for opset in OPSETS:
        folder = os.path.join(out, f"{name}-opset{opset}")
        path = os.path.join(folder, "model.onnx")
        if not os.path.exists(path):
            print(f"{name} opset {opset}: no export")
            ok = False
            continue
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        cases = [""] + [f"check{i}_" for i in range(len(CHECK_SHAPES))]
        for prefix in cases:
            feeds = {n: np.load(os.path.join(folder, prefix + n + ".npy"))
                     for n in ("input_ids", "attention_mask")}
            ref = np.load(os.path.join(folder, prefix + "logits.npy"))
            got = sess.run(["logits"], feeds)[0]
            err = float(np.abs(got - ref).max()) if got.shape == ref.shape \
                else float("inf")
            good = err < 1e-4
            verdict = "ok" if good else "MISMATCH"
            if name in KNOWN_WRONG:
                verdict += " (expected: " + KNOWN_WRONG[name] + ")" \
                    if not good else " (expected a mismatch!)"
                good = not good
            ok &= good
            print(f"{name} opset {opset} {list(feeds['input_ids'].shape)}: "
                  f"max |ort - torch| = {err:.2e} {verdict}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="/tmp/moe")
    ap.add_argument("--check", action="store_true",
                    help="check the exports with onnxruntime, export nothing")
    ap.add_argument("names", nargs="*")
    ap.add_argument("--zoo", action="store_true",
                    help="write the ZOO models into test/models/hf and "
                         "zoo.json")
    args = ap.parse_args()
    if args.zoo:
        index_path = os.path.join(HERE, "zoo.json")
        with open(index_path) as f:
            index = json.load(f)
        for n in args.names or list(ZOO):
            index[n] = export_zoo(n)
        with open(index_path, "w") as f:
            json.dump(index, f, indent=1)
            f.write("\n")
        return
    names = args.names or list(MODELS) + list(BATCHED)
    if args.check:
        results = [check(n, args.out) for n in names]
        sys.exit(0 if all(results) else 1)
    import torch
    import transformers
    os.makedirs(args.out, exist_ok=True)
    index_path = os.path.join(args.out, "index.json")
    index = {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    for n in names:
        index[n] = export(n, args.out)
    index["torch"] = torch.__version__
    index["transformers"] = transformers.__version__
    with open(index_path, "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
