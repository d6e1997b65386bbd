#!/usr/bin/python3
"""TorchScript versions of zoo models (torch.jit.trace), for the TorchScript
frontend: the model generate.py exported to ONNX, rebuilt with the same seed
(so the same weights), traced on the stored inputs and saved as
test/models/hf/<name>/model.pt. The traced module must reproduce the stored
references, so that both frontends are held to the same ones.

  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 test/models/hf/export_torchscript.py [name ...]

Default: gpt2, bert and llama.

With --attention sdpa (decoders only), the model is built with
transformers' SDPA attention classes, their default under PyTorch 2, and
saved as model_sdpa.pt: its code calls torch.scaled_dot_product_attention
as a trace made with PyTorch 2 does. Debian's torch 1.13 has no such op,
so the script defines it first (test/models/torch_sdpa.py) and lets
transformers use it.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as zoo  # noqa: E402

sys.path.insert(0, os.path.dirname(HERE))
import torch_sdpa  # noqa: E402


def export(name, attention):
    build, kind, _, _ = zoo.ZOO[name]
    torch.manual_seed(0)
    if attention == "sdpa":
        if kind != "causal":
            sys.exit(f"--attention sdpa: {name} is not a decoder")
        torch_sdpa.enable()
        model = build(attention="sdpa").eval()
    else:
        model = build().eval()
    folder = os.path.join(HERE, name)
    # The inputs generate.py stored, in the export wrapper's order.
    with open(os.path.join(HERE, "zoo.json")) as f:
        input_names = list(json.load(f)[name]["inputs"])
    inputs = [torch.from_numpy(np.load(os.path.join(folder, n + ".npy")))
              for n in input_names]
    with torch.no_grad():
        traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
    if attention == "sdpa":
        assert "aten::scaled_dot_product_attention" in str(
            traced.inlined_graph), f"{name}: no SDPA in the trace"
    path = os.path.join(folder, "model.pt" if attention == "eager"
                        else f"model_{attention}.pt")
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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--attention", choices=["eager", "sdpa"],
                        default="eager")
    args = parser.parse_args()
    for name in args.names or ["gpt2", "bert", "llama"]:
        export(name, args.attention)


if __name__ == "__main__":
    main()
