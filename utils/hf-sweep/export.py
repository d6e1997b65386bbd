#!/usr/bin/python3
"""Export transformers architectures that the model zoo does not hold, the
way users export them, into a folder laid out like test/models/hf (a
zoo.json and one folder per model), for utils/reference-run/run_zoo.py.

The zoo (test/models/hf/generate.py) holds the models the compiler was
first tested on; this sweep is the check that it is not tuned to them: 42
more decoders and encoders from transformers 4.47.1, each from a tiny
config of its own class (2 layers, hidden 64, 4 heads, MLP 128, vocab 500
unless the class names them otherwise), weights re-drawn so that
activations are O(1) (matrices N(0, 1/fan_in), biases N(0, 0.01), norm
scales 1 + N(0, 0.01)), eager attention, exported by `torch.onnx.export`
at opset 14 with dynamic batch and sequence axes, torch's output stored
beside it (decoders: logits; encoders: last_hidden_state, the second row
padded after 9 tokens).

Not here because torch 1.13's exporter cannot export them or writes a graph
that onnxruntime refuses too: Falcon with new_decoder_architecture
(aten::broadcast_to) or ALiBi (complex), Gemma 2 (a Where of a double and a
float), Cohere (an Expand that onnxruntime rejects), Mistral-Nemo's
sliding-window mask (aten::bitwise_or), LiLT (its export fails in torch),
RWKV (its export drops the attention mask the others take).

Usage (Debian's python3 with the zoo site's transformers, `make zoo-site`):
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 utils/hf-sweep/export.py OUT [name ...] [--list]
          [--torchscript]
(--torchscript also saves each wrapper traced by torch.jit.trace as
model.pt, for utils/reference-run/run_artifact.py --model model.pt.)
then
  python3 utils/reference-run/run_zoo.py --zoo OUT --opset native \\
      --config tp=2 --config tp=4 --config tp=2,sp
(`make hf-sweep` does both.)
"""

import json
import math
import os
import sys
import warnings

H, LAYERS, HEADS, MLP, VOCAB = 64, 2, 4, 128, 500
COMMON = dict(vocab_size=VOCAB, hidden_size=H, num_hidden_layers=LAYERS,
              num_attention_heads=HEADS, intermediate_size=MLP,
              max_position_embeddings=64)

# name: (transformers class, config, tolerance). A tolerance other than
# run_zoo's 1e-5 says why.
DECODERS = {
    "falcon": ("FalconForCausalLM", dict(
        vocab_size=VOCAB, hidden_size=H, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, new_decoder_architecture=False,
        multi_query=True, parallel_attn=True, alibi=False), None),
    "phi": ("PhiForCausalLM", dict(COMMON, partial_rotary_factor=0.5), None),
    "phi3": ("Phi3ForCausalLM", dict(COMMON, num_key_value_heads=2,
                                     pad_token_id=0), None),
    # Embeddings scaled by sqrt(hidden): logits up to ~8, and onnxruntime
    # differs from torch by 1.6e-5 on the same export.
    "gemma": ("GemmaForCausalLM", dict(COMMON, num_key_value_heads=1,
                                       head_dim=16), 5e-5),
    "stablelm": ("StableLmForCausalLM", dict(
        COMMON, num_key_value_heads=2, partial_rotary_factor=0.25,
        use_qkv_bias=True), None),
    "qwen2": ("Qwen2ForCausalLM", dict(COMMON, num_key_value_heads=2), None),
    "mpt": ("MptForCausalLM", dict(d_model=H, n_heads=HEADS, n_layers=LAYERS,
                                   vocab_size=VOCAB, max_seq_len=64), None),
    "codegen": ("CodeGenForCausalLM", dict(
        vocab_size=VOCAB, n_embd=H, n_layer=LAYERS, n_head=HEADS,
        n_positions=64, rotary_dim=8), None),
    "persimmon": ("PersimmonForCausalLM", COMMON, None),
    "olmo": ("OlmoForCausalLM", dict(COMMON, num_key_value_heads=2,
                                     clip_qkv=8.0), None),
    "olmo2": ("Olmo2ForCausalLM", dict(COMMON, num_key_value_heads=2), None),
    "starcoder2": ("Starcoder2ForCausalLM", dict(COMMON,
                                                 num_key_value_heads=2), None),
    "xglm": ("XGLMForCausalLM", dict(
        vocab_size=VOCAB, d_model=H, num_layers=LAYERS, attention_heads=HEADS,
        ffn_dim=MLP, max_position_embeddings=64), None),
    "gpt_neo": ("GPTNeoForCausalLM", dict(
        vocab_size=VOCAB, hidden_size=H, num_layers=LAYERS, num_heads=HEADS,
        attention_types=[[["global", "local"], 1]], window_size=8,
        max_position_embeddings=64), None),
    "biogpt": ("BioGptForCausalLM", COMMON, None),
    "granite": ("GraniteForCausalLM", dict(
        COMMON, num_key_value_heads=2, embedding_multiplier=2.0,
        residual_multiplier=0.5, logits_scaling=4.0,
        attention_multiplier=0.2), None),
    "openai_gpt": ("OpenAIGPTLMHeadModel", dict(
        vocab_size=VOCAB, n_embd=H, n_layer=LAYERS, n_head=HEADS,
        n_positions=64), None),
    "ctrl": ("CTRLLMHeadModel", dict(
        vocab_size=VOCAB, n_embd=H, n_layer=LAYERS, n_head=HEADS, dff=MLP,
        n_positions=64), None),
    "bert_generation": ("BertGenerationDecoder", dict(COMMON, is_decoder=True),
                        None),
    "megatron_bert_lm": ("MegatronBertForCausalLM",
                         dict(COMMON, is_decoder=True), None),
    # A state-space model: no attention; its projections split, its
    # selective scan's per-channel state with them.
    "mamba": ("MambaForCausalLM", dict(
        vocab_size=VOCAB, hidden_size=H, num_hidden_layers=LAYERS,
        state_size=8, expand=2, conv_kernel=4, use_mambapy=False), None),
}
ENCODERS = {
    "albert": ("AlbertModel", dict(COMMON, embedding_size=32), None),
    "distilbert": ("DistilBertModel", dict(
        vocab_size=VOCAB, dim=H, n_layers=LAYERS, n_heads=HEADS,
        hidden_dim=MLP, max_position_embeddings=64), None),
    "electra": ("ElectraModel", dict(COMMON, embedding_size=32), None),
    "mobilebert": ("MobileBertModel", dict(
        COMMON, embedding_size=32, intra_bottleneck_size=32,
        num_feedforward_networks=2), None),
    "convbert": ("ConvBertModel", dict(COMMON, embedding_size=H, head_ratio=2,
                                       conv_kernel_size=3), None),
    "esm": ("EsmModel", dict(COMMON, position_embedding_type="rotary",
                             pad_token_id=1, mask_token_id=2), None),
    "xlm_roberta": ("XLMRobertaModel", dict(COMMON,
                                            max_position_embeddings=66), None),
    "roformer": ("RoFormerModel", dict(COMMON, embedding_size=H), None),
    "mpnet": ("MPNetModel", dict(COMMON, max_position_embeddings=66), None),
    "ernie": ("ErnieModel", dict(COMMON, use_task_id=False), None),
    "big_bird": ("BigBirdModel", dict(COMMON, attention_type="original_full"),
                 None),
    "nezha": ("NezhaModel", COMMON, None),
    "funnel": ("FunnelBaseModel", dict(
        vocab_size=VOCAB, d_model=H, n_head=HEADS, d_head=16, d_inner=MLP,
        block_sizes=[1, 1]), None),
    "layoutlm": ("LayoutLMModel", COMMON, None),
    "rembert": ("RemBertModel", dict(COMMON, input_embedding_size=32,
                                     output_embedding_size=32), None),
    "deberta": ("DebertaModel", dict(
        COMMON, relative_attention=True, max_relative_positions=16,
        pos_att_type=["c2p", "p2c"]), None),
    # Grouped 1x1 convolutions as projections; onnxruntime itself differs
    # from torch by 4.1e-5 on this export.
    "squeezebert": ("SqueezeBertModel", dict(
        COMMON, embedding_size=H, q_groups=2, k_groups=2, v_groups=2,
        post_attention_groups=2, intermediate_groups=2, output_groups=2),
        1e-4),
    "nystromformer": ("NystromformerModel", dict(
        COMMON, num_landmarks=4, segment_means_seq_len=12,
        max_position_embeddings=66), None),
    "xlnet": ("XLNetModel", dict(vocab_size=VOCAB, d_model=H, n_layer=LAYERS,
                                 n_head=HEADS, d_inner=MLP), None),
    "megatron_bert": ("MegatronBertModel", COMMON, None),
    "splinter": ("SplinterModel", COMMON, None),
}


# Traces the TorchScript frontend refuses, by design, with an error: not
# saved, so that run_zoo.py --opset torchscript skips them.
TRACE_REFUSED = {
    "deberta": "its @torch.jit.script helpers branch on sizes (prim::If): "
               "'Python control flow ... make the branch static'",
}


def redraw(model, torch):
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.dim() >= 2:
                p.copy_(noise / math.sqrt(p.shape[-1]))
            elif "bias" in name:
                p.copy_(0.1 * noise)
            else:
                p.copy_(1 + 0.1 * noise)


def export(name, cls_name, kwargs, tolerance, causal, out, torchscript):
    import numpy as np
    import torch
    import transformers
    cls = getattr(transformers, cls_name)
    config = cls.config_class(**kwargs)
    config._attn_implementation = "eager"
    config.use_cache = False
    torch.manual_seed(0)
    model = cls(config).eval()
    redraw(model, torch)
    ids = torch.randint(3, VOCAB, (2, 12))
    mask = torch.ones(2, 12, dtype=torch.int64)
    if not causal:
        mask[1, 9:] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    if name == "layoutlm":  # boxes (x0, y0, x1, y1) with x0 <= x1, y0 <= y1
        corners = torch.randint(0, 500, (2, 12, 2, 2)).sort(-2).values
        feeds["bbox"] = corners.reshape(2, 12, 4)
    output = "logits" if causal else "last_hidden_state"

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        # Named inputs (not *args): the TorchScript frontend reads them.
        def forward(self, input_ids, attention_mask, bbox=None):
            extra = {} if bbox is None else {"bbox": bbox}
            result = self.inner(input_ids=input_ids,
                                attention_mask=attention_mask, **extra)
            return getattr(result, output)

    wrapper = Wrapper(model).eval()
    with torch.no_grad():
        reference = wrapper(*feeds.values())
    folder = os.path.join(out, name)
    os.makedirs(folder, exist_ok=True)
    axes = {k: {0: "batch", 1: "sequence"} for k in list(feeds) + [output]}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, tuple(feeds.values()),
                          os.path.join(folder, "model.onnx"),
                          input_names=list(feeds), output_names=[output],
                          dynamic_axes=axes, opset_version=14)
    if torchscript and name not in TRACE_REFUSED:  # the same module traced
        with torch.no_grad():
            traced = torch.jit.trace(wrapper, tuple(feeds.values()),
                                     check_trace=False)
        traced.save(os.path.join(folder, "model.pt"))
    for key, value in feeds.items():
        np.save(os.path.join(folder, key + ".npy"), value.numpy())
    np.save(os.path.join(folder, output + ".npy"), reference.numpy())
    entry = {"model": cls_name, "opset": 14,
             "kind": "causal" if causal else "encoder",
             "inputs": {k: list(v.shape) for k, v in feeds.items()},
             "outputs": {output: list(reference.shape)},
             "output_rms": float(reference.pow(2).mean().sqrt())}
    if tolerance:
        entry["atol"] = entry["rtol"] = tolerance
    return entry


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    models = {n: (c, k, t, True) for n, (c, k, t) in DECODERS.items()}
    models.update({n: (c, k, t, False) for n, (c, k, t) in ENCODERS.items()})
    if "--list" in sys.argv:
        print(" ".join(models))
        return 0
    if not args:
        sys.exit(__doc__)
    out, names = args[0], args[1:] or list(models)
    for name in names:
        if name not in models:
            sys.exit(f"'{name}' is not in the sweep ({', '.join(models)})")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "zoo.json")
    zoo = json.load(open(path)) if os.path.exists(path) else {}
    for name in names:
        cls_name, kwargs, tolerance, causal = models[name]
        zoo[name] = export(name, cls_name, kwargs, tolerance, causal, out,
                           "--torchscript" in sys.argv)
        print(f"exported {name} ({cls_name})", flush=True)
    with open(path, "w") as f:
        json.dump(zoo, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
