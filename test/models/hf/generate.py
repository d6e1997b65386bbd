#!/usr/bin/python3
"""Build the model zoo: tiny random-weight transformers models, exported the
way users export them, with torch's outputs stored as references.

Each model is built from a transformers config (2 layers, hidden 64-192, some
head counts and vocabularies that do not divide 2 or 4), its weights are
re-drawn so that activations are O(1) (transformers' 0.02-std init makes
every logit nearly equal, which hides a wrong split), and it is exported
with `torch.onnx.export` as the transformers docs show: eval mode,
`use_cache=False`, dynamic batch and sequence axes, constant folding on.

Encoder-decoder models (kind "seq2seq": T5, BART, Whisper) are exported as
one graph of the whole forward: encoder inputs (input_ids + attention_mask,
or Whisper's input_features) and decoder_input_ids in, logits out.

One folder per model under test/models/hf/<name>/:
  model.onnx        the export
  <input>.npy       the inputs the references were computed on
  <output>.npy      torch's outputs (float32)
and test/models/hf/zoo.json lists every model: opset, inputs with their
shapes, outputs, and what the model is.

Needs Debian's python3-torch 1.13 and transformers 4.47 (PyPI, installed
with --target; see `make zoo-deps`):
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 test/models/hf/generate.py [name ...]
Deterministic: torch.manual_seed(0) before each model.
"""

import json
import math
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH, SEQ = 2, 12
# Decoder length of the seq2seq models: not the encoder's, so that
# cross-attention scores are not square.
DECODER_SEQ = 8

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()


def redraw(model, fresh=False):
    """Weights with O(1) activations: N(0, 1/fan_in) matrices, N(0, 1)
    embeddings, norms near 1, small biases. With `fresh`, biases and norms
    stay as initialised (0 and 1): equal tensors, which torch.onnx.export
    deduplicates into initializers that unrelated ops share."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if fresh and p.dim() < 2 and not isinstance(
                        module, nn.Embedding):
                    continue
                if isinstance(module, nn.Embedding):
                    p.copy_(torch.randn(p.shape, generator=gen))
                elif "norm" in type(module).__name__.lower() or isinstance(
                        module, (nn.LayerNorm, nn.BatchNorm2d)):
                    base = 1.0 if name == "weight" else 0.0
                    p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
                elif p.dim() >= 2:
                    # nn.Linear is [out, in]; GPT-2's Conv1D is [in, out].
                    conv1d = type(module).__name__ == "Conv1D"
                    fan_in = p.shape[0] if conv1d else p[0].numel()
                    p.copy_(torch.randn(p.shape, generator=gen) /
                            math.sqrt(fan_in))
                else:
                    p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            if isinstance(module, nn.BatchNorm2d):
                module.running_mean.copy_(
                    0.1 * torch.randn(module.running_mean.shape, generator=gen))
                module.running_var.copy_(
                    1 + 0.1 * torch.rand(module.running_var.shape, generator=gen))
    return model


class CausalLM(nn.Module):
    """The export wrapper users write: logits only, no cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          use_cache=False, return_dict=False)[0]


class Encoder(nn.Module):
    def __init__(self, model, outputs):
        super().__init__()
        self.model = model
        self.outputs = outputs

    def forward(self, input_ids, attention_mask):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         return_dict=True)
        return tuple(out[name] for name in self.outputs)


class Seq2SeqLM(nn.Module):
    """The whole encoder-decoder forward as one graph: logits only, no
    cache."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, decoder_input_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          decoder_input_ids=decoder_input_ids,
                          use_cache=False, return_dict=False)[0]


class SpeechSeq2SeqLM(nn.Module):
    """Seq2SeqLM for a model whose encoder reads log-mel features."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_features, decoder_input_ids):
        return self.model(input_features=input_features,
                          decoder_input_ids=decoder_input_ids,
                          use_cache=False, return_dict=False)[0]


class ImageClassifier(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values, return_dict=False)[0]


def causal(config_cls, model_cls, **config):
    # export_torchscript.py --attention sdpa builds the same model (the same
    # weights) with transformers' SDPA attention classes.
    def build(attention="eager"):
        cfg = config_cls(**config)
        cfg._attn_implementation = attention
        return CausalLM(redraw(model_cls(cfg).eval()))
    return build


def seq2seq(config_cls, model_cls, wrapper=Seq2SeqLM, **config):
    def build():
        cfg = config_cls(**config)
        cfg._attn_implementation = "eager"
        model = redraw(model_cls(cfg).eval())
        with torch.no_grad():
            gen = torch.Generator().manual_seed(3)
            bias = getattr(model, "final_logits_bias", None)
            if bias is not None:
                # A buffer, zeros at init: redrawn so that it is seen.
                bias.copy_(0.1 * torch.randn(bias.shape, generator=gen))
            if isinstance(model, transformers.WhisperForConditionalGeneration):
                # Whisper's encoder positions are a fixed sinusoid table.
                from transformers.models.whisper.modeling_whisper import \
                    sinusoids
                table = model.model.encoder.embed_positions.weight
                table.copy_(sinusoids(*table.shape))
        return wrapper(model)
    return build


# name -> (builder, kind, opset, what it exercises)
ZOO = {
    "gpt2": (causal(transformers.GPT2Config, transformers.GPT2LMHeadModel,
                    vocab_size=1001, n_positions=64, n_embd=96, n_layer=2,
                    n_head=6, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0),
             "causal", 17,
             "GPT2LMHeadModel: Conv1D (matmul on a [B*S, H] view), fused QKV "
             "split after a reshape, tied LM head, 6 heads, vocab 1001"),
    "opt": (causal(transformers.OPTConfig, transformers.OPTForCausalLM,
                   vocab_size=1003, hidden_size=80, num_hidden_layers=2,
                   ffn_dim=160, num_attention_heads=5,
                   max_position_embeddings=64, word_embed_proj_dim=80,
                   dropout=0, attention_dropout=0),
            "causal", 14,
            "OPTForCausalLM: positions from a CumSum over the mask, 5 heads, "
            "vocab 1003"),
    "bloom": (causal(transformers.BloomConfig, transformers.BloomForCausalLM,
                     vocab_size=1000, hidden_size=64, n_layer=2, n_head=4,
                     hidden_dropout=0, attention_dropout=0),
              "causal", 14,
              "BloomForCausalLM: ALiBi (CumSum over the mask), QKV "
              "interleaved per head"),
    "gpt_neox": (causal(transformers.GPTNeoXConfig,
                        transformers.GPTNeoXForCausalLM, vocab_size=1000,
                        hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=256,
                        max_position_embeddings=64, rotary_pct=0.25,
                        use_parallel_residual=True, hidden_dropout=0,
                        attention_dropout=0),
                 "causal", 14,
                 "GPTNeoXForCausalLM: QKV interleaved per head, partial "
                 "rotary, parallel residual"),
    "gptj": (causal(transformers.GPTJConfig, transformers.GPTJForCausalLM,
                    vocab_size=1000, n_positions=64, n_embd=64, n_layer=2,
                    n_head=4, rotary_dim=8, resid_pdrop=0, embd_pdrop=0,
                    attn_pdrop=0),
             "causal", 14,
             "GPTJForCausalLM: interleaved rotary from a Tile'd position "
             "table, parallel residual, untied LM head with bias"),
    "llama": (causal(transformers.LlamaConfig, transformers.LlamaForCausalLM,
                     vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=128, max_position_embeddings=64),
              "causal", 14,
              "LlamaForCausalLM: GQA (4 Q heads, 2 KV heads), RoPE, "
              "decomposed RMSNorm, SwiGLU"),
    "mistral": (causal(transformers.MistralConfig,
                       transformers.MistralForCausalLM, vocab_size=1001,
                       hidden_size=96, num_hidden_layers=2,
                       num_attention_heads=6, num_key_value_heads=2,
                       intermediate_size=192, max_position_embeddings=64,
                       sliding_window=None),
                "causal", 14,
                "MistralForCausalLM: GQA (6 Q heads, 2 KV heads), vocab 1001"),
    "gpt_bigcode": (causal(transformers.GPTBigCodeConfig,
                           transformers.GPTBigCodeForCausalLM,
                           vocab_size=1000, n_positions=64, n_embd=64,
                           n_layer=2, n_head=4, multi_query=True,
                           resid_pdrop=0, embd_pdrop=0, attn_pdrop=0),
                    "causal", 14,
                    "GPTBigCodeForCausalLM: multi-query attention fused in "
                    "one projection (4 Q heads, 1 K/V head)"),
    "bert": ((lambda: Encoder(redraw(transformers.BertModel(
                 transformers.BertConfig(
                     vocab_size=1002, hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128,
                     max_position_embeddings=64, hidden_dropout_prob=0,
                     attention_probs_dropout_prob=0,
                     attn_implementation="eager"))).eval(),
                 ["last_hidden_state", "pooler_output"])),
             "encoder", 14,
             "BertModel: padded attention mask, pooler, vocab 1002"),
    "roberta": ((lambda: Encoder(redraw(transformers.RobertaModel(
                    transformers.RobertaConfig(
                        vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=128,
                        max_position_embeddings=66, pad_token_id=1,
                        hidden_dropout_prob=0, attention_probs_dropout_prob=0,
                        attn_implementation="eager"),
                    add_pooling_layer=False)).eval(),
                    ["last_hidden_state"])),
                "encoder", 14,
                "RobertaModel: positions from a CumSum over input_ids != pad"),
    "deberta_v2": ((lambda: Encoder(redraw(transformers.DebertaV2Model(
                       transformers.DebertaV2Config(
                           vocab_size=1000, hidden_size=64,
                           num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=128, max_position_embeddings=64,
                           relative_attention=True, position_buckets=16,
                           pos_att_type=["p2c", "c2p"],
                           norm_rel_ebd="layer_norm", share_att_key=True,
                           position_biased_input=False,
                           hidden_dropout_prob=0,
                           attention_probs_dropout_prob=0)),
                       fresh=True).eval(),
                       ["last_hidden_state"])),
                   "encoder", 14,
                   "DebertaV2Model: disentangled attention (torch.gather of "
                   "content-to-position and position-to-content scores on "
                   "[batch*heads] views, log-bucketed relative positions "
                   "with Sign), biases and norms as initialised (one shared "
                   "initializer)"),
    "t5": (seq2seq(transformers.T5Config,
                   transformers.T5ForConditionalGeneration, vocab_size=1000,
                   d_model=64, d_kv=8, d_ff=128, num_layers=2,
                   num_decoder_layers=2, num_heads=6,
                   relative_attention_num_buckets=32,
                   relative_attention_max_distance=64,
                   feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                   dropout_rate=0, decoder_start_token_id=0),
           "seq2seq", 14,
           "T5ForConditionalGeneration (v1.1/Flan config): relative position "
           "buckets, RMS norms, no biases, gated-GELU, untied head, 6 heads"),
    "bart": (seq2seq(transformers.BartConfig,
                     transformers.BartForConditionalGeneration,
                     vocab_size=1000, d_model=80, encoder_layers=2,
                     decoder_layers=2, encoder_attention_heads=5,
                     decoder_attention_heads=5, encoder_ffn_dim=96,
                     decoder_ffn_dim=96, max_position_embeddings=64,
                     dropout=0, attention_dropout=0, activation_dropout=0),
             "seq2seq", 14,
             "BartForConditionalGeneration: learned positions (offset 2), "
             "post-LN, shared embedding and head, final_logits_bias, "
             "5 heads"),
    "whisper": (seq2seq(transformers.WhisperConfig,
                        transformers.WhisperForConditionalGeneration,
                        wrapper=SpeechSeq2SeqLM, vocab_size=1000,
                        num_mel_bins=80, d_model=64, encoder_layers=2,
                        decoder_layers=2, encoder_attention_heads=4,
                        decoder_attention_heads=4, encoder_ffn_dim=128,
                        decoder_ffn_dim=128, max_source_positions=32,
                        max_target_positions=64, pad_token_id=0,
                        bos_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1, dropout=0,
                        attention_dropout=0, activation_dropout=0),
                "seq2seq", 17,
                "WhisperForConditionalGeneration: log-mel input_features "
                "[batch, 80, 64] through two Conv1d + GELU, sinusoidal "
                "encoder positions, 4 heads"),
    "resnet": ((lambda: ImageClassifier(redraw(
                   transformers.ResNetForImageClassification(
                       transformers.ResNetConfig(
                           num_channels=3, embedding_size=16,
                           hidden_sizes=[16, 32], depths=[1, 1],
                           layer_type="basic", num_labels=10))).eval())),
               "image", 14,
               "ResNetForImageClassification: 2 stages of basic blocks"),
    "swin": ((lambda: ImageClassifier(redraw(
                 transformers.SwinForImageClassification(
                     transformers.SwinConfig(
                         image_size=32, patch_size=4, embed_dim=32,
                         depths=[2, 2], num_heads=[2, 4], window_size=4,
                         hidden_dropout_prob=0, attention_probs_dropout_prob=0,
                         drop_path_rate=0, num_labels=10))).eval())),
             "image", 14,
             "SwinForImageClassification: a patch embedding convolution "
             "and its layer norm, windowed attention with shifted windows "
             "and a relative position bias table, patch merging"),
    "segformer": ((lambda: ImageClassifier(redraw(
                      transformers.SegformerForImageClassification(
                          transformers.SegformerConfig(
                              num_encoder_blocks=2, depths=[1, 1],
                              sr_ratios=[2, 1], hidden_sizes=[16, 32],
                              num_attention_heads=[1, 2],
                              patch_sizes=[7, 3], strides=[4, 2],
                              hidden_dropout_prob=0,
                              attention_probs_dropout_prob=0,
                              drop_path_rate=0, num_labels=10))).eval())),
                  "image", 14,
                  "SegformerForImageClassification: overlapping patch "
                  "embedding convolutions each followed by a layer norm, "
                  "attention whose keys and values come from a strided "
                  "convolution, a depthwise convolution in the MLP"),
}


def make_inputs(kind, vocab, pad_id, model):
    gen = torch.Generator().manual_seed(2)
    if kind == "image":
        return {"pixel_values": torch.randn(BATCH, 3, 32, 32, generator=gen)}
    if isinstance(model, SpeechSeq2SeqLM):
        cfg = model.model.config
        frames = 2 * cfg.max_source_positions
        return {"input_features": torch.randn(BATCH, cfg.num_mel_bins, frames,
                                              generator=gen),
                "decoder_input_ids": torch.randint(
                    3, vocab, (BATCH, DECODER_SEQ), generator=gen)}
    ids = torch.randint(3, vocab, (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    if kind in ("encoder", "seq2seq"):
        # The second sentence is shorter: its tail is padding.
        mask[1, SEQ - 4:] = 0
        ids[1, SEQ - 4:] = pad_id
    inputs = {"input_ids": ids, "attention_mask": mask}
    if kind == "seq2seq":
        inputs["decoder_input_ids"] = torch.randint(
            3, vocab, (BATCH, DECODER_SEQ), generator=gen)
    return inputs


def generate(name):
    build, kind, opset, about = ZOO[name]
    torch.manual_seed(0)
    model = build()
    inner = model.model
    cfg = inner.config
    vocab = getattr(cfg, "vocab_size", 0)
    pad_id = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    inputs = make_inputs(kind, vocab, pad_id, model)
    names = list(inputs)
    with torch.no_grad():
        outs = model(*inputs.values())
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    out_names = (model.outputs if kind == "encoder" else ["logits"])
    dynamic = {n: {0: "batch"} | ({1: "sequence"} if kind != "image" else {})
               for n in names}
    if kind == "seq2seq":
        # The decoder's sequence axis is not the encoder's; Whisper's
        # input_features have a fixed length.
        dynamic = {n: {0: "batch"} | ({1: "sequence"} if n in (
            "input_ids", "attention_mask") else {1: "decoder_sequence"}
            if n == "decoder_input_ids" else {}) for n in names}
    for n, o in zip(out_names, outs):
        dynamic[n] = {0: "batch"} | ({1: "decoder_sequence"}
                                     if kind == "seq2seq" else
                                     {1: "sequence"} if o.dim() == 3 else {})
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, tuple(inputs.values()), path,
                      input_names=names, output_names=out_names,
                      dynamic_axes=dynamic, opset_version=opset,
                      do_constant_folding=True)
    for n, t in inputs.items():
        np.save(os.path.join(folder, n + ".npy"), t.numpy())
    for n, o in zip(out_names, outs):
        np.save(os.path.join(folder, n + ".npy"), o.numpy().astype(np.float32))
    params = sum(p.numel() for p in inner.parameters())
    print(f"{name}: opset {opset}, {params} parameters, "
          f"{os.path.getsize(path) // 1024} KiB")
    return {"model": type(inner).__name__, "about": about, "opset": opset,
            "kind": kind, "parameters": params,
            "inputs": {n: list(t.shape) for n, t in inputs.items()},
            "outputs": {n: list(o.shape) for n, o in zip(out_names, outs)}}


def main():
    names = sys.argv[1:] or list(ZOO)
    index_path = os.path.join(HERE, "zoo.json")
    index = {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    for name in names:
        index[name] = generate(name)
    # This script's models in its order, then the entries other scripts
    # add (export_moe.py --zoo), kept as they are.
    index = {n: index[n] for n in ZOO if n in index} | {
        n: v for n, v in index.items() if n not in ZOO}
    with open(index_path, "w") as f:
        json.dump({"torch": torch.__version__,
                   "transformers": transformers.__version__} | {
                       k: v for k, v in index.items()
                       if k not in ("torch", "transformers")}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
