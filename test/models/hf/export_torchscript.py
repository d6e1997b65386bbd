#!/usr/bin/python3
"""TorchScript versions of zoo models (torch.jit.trace), for the TorchScript
frontend: the model generate.py exported to ONNX, rebuilt with the same seed
(so the same weights), traced on the stored inputs and saved as
test/models/hf/<name>/model.pt. The traced module must reproduce the stored
references, so that both frontends are held to the same ones.

  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 test/models/hf/export_torchscript.py [name ...]

Default: gpt2, bert and llama.
"""

import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as zoo  # noqa: E402


def export(name):
    build, kind, _, _ = zoo.ZOO[name]
    torch.manual_seed(0)
    model = build().eval()
    folder = os.path.join(HERE, name)
    input_names = (["pixel_values"] if kind == "image"
                   else ["input_ids", "attention_mask"])
    inputs = [torch.from_numpy(np.load(os.path.join(folder, n + ".npy")))
              for n in input_names]
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
    path = os.path.join(folder, "model.pt")
    traced.save(path)
    with torch.no_grad():
        got = torch.jit.load(path)(*inputs)
    if isinstance(got, torch.Tensor):
        got = (got,)
    out_names = model.outputs if kind == "encoder" else ["logits"]
    for n, t in zip(out_names, got):
        want = np.load(os.path.join(folder, n + ".npy"))
        err = float(np.abs(t.numpy() - want).max())
        assert err < 1e-5, f"{name}/{n}: the traced module differs by {err}"
    print(f"{name}: {os.path.getsize(path) // 1024} KiB, matches "
          f"{', '.join(out_names)}")


def main():
    for name in sys.argv[1:] or ["gpt2", "bert", "llama"]:
        export(name)


if __name__ == "__main__":
    main()
