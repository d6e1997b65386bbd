#!/usr/bin/python3
"""TorchScript versions of the bundled models, for the TorchScript frontend.

For each of gpt2, llama, bert and cnn this rebuilds the model that
generate.py exported to ONNX (same classes, same seed, so the same weights),
traces it with torch.jit.trace on the stored inputs, saves it as
test/models/<name>/model.pt, and checks that the traced module reproduces
the stored reference outputs (the ones the ONNX version is tested against),
so both frontends are held to one reference.

Run with Debian's python3-torch 1.13:
  /usr/bin/python3 test/models/export_torchscript.py
"""

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as g  # noqa: E402


def cnn():
    model = g.CNN()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.3, 0.3)
    return model


MODELS = {
    "gpt2": (g.GPT2, ["input_ids"], ["logits"]),
    "llama": (g.Llama, ["input_ids"], ["logits"]),
    "bert": (g.Bert, ["input_ids", "attention_mask"],
             ["last_hidden_state", "pooler_output"]),
    "cnn": (cnn, ["input"], ["logits"]),
}


def main():
    for name, (build, inputs, outputs) in MODELS.items():
        folder = os.path.join(HERE, name)
        torch.manual_seed(0)
        model = build().eval()
        args = [torch.from_numpy(np.load(os.path.join(folder, n + ".npy")))
                for n in inputs]
        with torch.no_grad():
            traced = torch.jit.trace(model, tuple(args))
        path = os.path.join(folder, "model.pt")
        traced.save(path)
        loaded = torch.jit.load(path)
        with torch.no_grad():
            got = loaded(*args)
        if isinstance(got, torch.Tensor):
            got = (got,)
        for n, t in zip(outputs, got):
            want = np.load(os.path.join(folder, n + ".npy"))
            err = float(np.abs(t.numpy() - want).max())
            assert err < 1e-5, f"{name}/{n}: traced module differs by {err}"
        print(f"{name}: {os.path.getsize(path)} bytes, matches "
              f"{', '.join(outputs)}")


if __name__ == "__main__":
    main()
