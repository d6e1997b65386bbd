#!/usr/bin/python3
"""Decoders exported with their KV cache, and transformers' own generate()
tokens as references: the inputs of text generation (tp-compile --max-seq).

Each model is a zoo model (test/models/hf/generate.py: the same config and
re-drawn weights) exported the way optimum's `text-generation-with-past`
task lays it out: inputs input_ids, attention_mask, position_ids and
past_key_values.{i}.key / .value, outputs logits and present.{i}.key /
.value, with dynamic batch, sequence and past-sequence axes. The export is
traced with 3 past positions, so that the graph concatenates past and new.

One folder per model under test/models/hf/with-past/<name>/:
  model.onnx            the export
  input_ids.npy         int64 [2, 6] prompts; the second left-padded by 2
  attention_mask.npy    int64 [2, 6], 0 on that padding
  greedy.npy            int64 [2, 16]: model.generate(..., do_sample=False,
                        max_new_tokens=10), the prompts and 10 new tokens
  beam4.npy             int64 [2, 16]: the same with num_beams=4 (no stop
                        token, length_penalty 1, early_stopping False)
and with-past/index.json: what each model is, the prompt and token counts.

Needs Debian's python3-torch 1.13 and transformers 4.47 (see generate.py):
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 test/models/hf/export_with_past.py [name ...]
"""

import json
import os
import sys
import warnings

import numpy as np
import torch
import transformers
import transformers.generation.utils as generation_utils

HERE = os.path.dirname(os.path.abspath(__file__))

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
# generate() asks whether the model is FSDP-managed, which imports
# torch.distributed.fsdp; Debian's torch 1.13 cannot import it on Python
# 3.11. Nothing here is.
generation_utils.is_fsdp_managed_module = lambda module: False

BATCH, PROMPT, NEW, PAD, TRACE_PAST, BEAMS = 2, 6, 10, 2, 3, 4
MODELS = {
    "gpt2": "GPT2LMHeadModel, 6 heads, vocab 1001: fused QKV, learned "
            "positions from position_ids",
    "llama": "LlamaForCausalLM, GQA (4 query heads, 2 KV heads): RoPE at "
             "position_ids, the cache holds the KV heads",
    "opt": "OPTForCausalLM, 5 heads, vocab 1003: no position_ids input (as "
           "optimum exports it), positions from a CumSum over attention_mask",
    "mixtral": "MixtralForCausalLM (the zoo's, export_moe.py): 4 experts, "
               "top-2, routed per token by the eager per-expert loop; GQA",
    "qwen2_moe": "Qwen2MoeForCausalLM (the zoo's, export_moe.py): 8 experts, "
                 "top-2 and a sigmoid-gated shared expert; GQA",
}
# Models exported without a position_ids input: they derive positions from
# attention_mask themselves (optimum's TextDecoderOnnxConfig).
NO_POSITIONS = {"opt"}


class WithPast(torch.nn.Module):
    """optimum's with-past signature over a transformers causal LM."""

    def __init__(self, model, layers, positions=True):
        super().__init__()
        self.model = model
        self.layers = layers
        self.positions = positions

    def forward(self, input_ids, attention_mask, *rest):
        position_ids, past = (rest[0], rest[1:]) if self.positions else \
            (None, rest)
        pairs = tuple((past[2 * i], past[2 * i + 1])
                      for i in range(self.layers))
        extra = {"position_ids": position_ids} if self.positions else {}
        logits, presents = self.model(
            input_ids=input_ids, attention_mask=attention_mask,
            past_key_values=pairs, use_cache=True, return_dict=False,
            **extra)[:2]
        if hasattr(presents, "to_legacy_cache"):
            presents = presents.to_legacy_cache()
        return (logits,) + tuple(t for pair in presents for t in pair)


def export_onnx(model, ids, past, path, opset, positions=True):
    """torch.onnx.export of `model` with optimum's with-past names and
    dynamic axes, traced on `ids` ([batch, sequence]) after `past` (the
    keys and values of each layer, [batch, heads, past, dim]); without a
    position_ids input unless `positions`."""
    batch, sequence = ids.shape
    before = past[0].shape[2]
    layers = len(past) // 2
    kinds = [f"{i}.{k}" for i in range(layers) for k in ("key", "value")]
    inputs = (["input_ids", "attention_mask"] +
              (["position_ids"] if positions else []) +
              [f"past_key_values.{k}" for k in kinds])
    outputs = ["logits"] + [f"present.{k}" for k in kinds]
    dynamic = {"input_ids": {0: "batch", 1: "sequence"},
               "attention_mask": {0: "batch", 1: "past_sequence + sequence"},
               "position_ids": {0: "batch", 1: "sequence"},
               "logits": {0: "batch", 1: "sequence"}}
    if not positions:
        del dynamic["position_ids"]
    for n in inputs[3 if positions else 2:]:
        dynamic[n] = {0: "batch", 2: "past_sequence"}
    for n in outputs[1:]:
        dynamic[n] = {0: "batch", 2: "past_sequence + sequence"}
    mask = torch.ones(batch, before + sequence, dtype=torch.int64)
    where = torch.arange(before, before + sequence).expand(batch, sequence)
    args = (ids, mask) + ((where,) if positions else ()) + tuple(past)
    torch.onnx.export(WithPast(model, layers, positions), args,
                      path, input_names=inputs, output_names=outputs,
                      dynamic_axes=dynamic, opset_version=opset,
                      do_constant_folding=True)


def export(name):
    # The zoo's configs need transformers 4.47 (Mistral and friends);
    # bench/generation.py imports WithPast alone, under 4.31.
    sys.path.insert(0, HERE)
    import export_moe
    import generate as zoo
    torch.manual_seed(0)
    if name in export_moe.ZOO:
        model = export_moe.build(*export_moe.ZOO[name])[1]
        opset = export_moe.ZOO_OPSET
    else:
        model = zoo.ZOO[name][0]().model
        opset = zoo.ZOO[name][2]
    cfg = model.config
    gen = torch.Generator().manual_seed(3)
    ids = torch.randint(3, cfg.vocab_size, (BATCH, PROMPT), generator=gen)
    mask = torch.ones(BATCH, PROMPT, dtype=torch.int64)
    mask[1, :PAD] = 0
    pad_id = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    ids[1, :PAD] = pad_id
    with torch.no_grad():
        greedy = model.generate(ids, attention_mask=mask, do_sample=False,
                                max_new_tokens=NEW, min_new_tokens=NEW,
                                pad_token_id=pad_id)
        # Beam search without a stop token (which would end beams at random
        # with random weights): every beam runs NEW tokens.
        model.generation_config.eos_token_id = None
        beams = model.generate(ids, attention_mask=mask, do_sample=False,
                               num_beams=BEAMS, early_stopping=False,
                               length_penalty=1.0, max_new_tokens=NEW,
                               pad_token_id=pad_id)
        # The cache's layout, from one step without a past.
        presents = model(input_ids=ids[:, :1], use_cache=True,
                         return_dict=False)[1]
        if hasattr(presents, "to_legacy_cache"):
            presents = presents.to_legacy_cache()
    layers = len(presents)
    past = []
    for key, value in presents:
        for t in (key, value):
            shape = list(t.shape)
            shape[0], shape[2] = BATCH, TRACE_PAST
            past.append(torch.randn(shape, generator=gen))
    folder = os.path.join(HERE, "with-past", name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "model.onnx")
    export_onnx(model, ids[:, :2], past, path, opset,
                positions=name not in NO_POSITIONS)
    np.save(os.path.join(folder, "input_ids.npy"), ids.numpy())
    np.save(os.path.join(folder, "attention_mask.npy"), mask.numpy())
    np.save(os.path.join(folder, "greedy.npy"), greedy.numpy())
    np.save(os.path.join(folder, f"beam{BEAMS}.npy"), beams.numpy())
    print(f"{name}: {layers} layers, cache {list(presents[0][0].shape[1:2])} "
          f"heads, {os.path.getsize(path) // 1024} KiB")
    return {"model": type(model).__name__, "about": MODELS[name],
            "layers": layers, "prompt": [BATCH, PROMPT], "left_padding": PAD,
            "new_tokens": NEW, "pad_token_id": pad_id, "num_beams": BEAMS}


def main():
    names = sys.argv[1:] or list(MODELS)
    index_path = os.path.join(HERE, "with-past", "index.json")
    index = {}
    if os.path.exists(index_path):
        with open(index_path) as f:
            index = json.load(f)
    for name in names:
        index[name] = export(name)
    index["torch"] = torch.__version__
    index["transformers"] = transformers.__version__
    with open(index_path, "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
