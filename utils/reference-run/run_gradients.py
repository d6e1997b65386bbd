"""Gradients from tp-compile --gradients against torch.autograd.

Builds small torch models with a scalar loss (random weights, fixed seed),
exports each with torch.onnx.export, computes the loss and every
parameter's gradient with torch.autograd, then compiles the export with
`tp-compile --gradients --devices N --target cpu` for each N, runs it with
tp-run, and compares the loss and every `grad.<weight>` output with torch's
gradient (atol 1e-5 + rtol 1e-4 of the gradient's largest entry). ONNX
MatMul weights are exported under generated names and transposed: they are
matched to a torch parameter by shape.

Models:
  mlp      LayerNorm -> Linear -> GELU -> Linear -> softmax, mean squared
           error against a target
  lm       token and learned position embeddings, one causal attention
           block (Q/K/V/O projections, scaled scores, masked softmax), a
           GELU MLP, pre-norms, an untied LM head; cross-entropy against
           one-hot labels (LogSoftmax); the mask buffer is frozen
           (--freeze)

Run with Debian's python3 (torch):
  /usr/bin/python3 utils/reference-run/run_gradients.py \\
      --tp-compile build/bin/tp-compile --tp-run build/bin/tp-run
Prints one line per model and rank count; exit status 1 on a mismatch.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch

ATOL, RTOL = 1e-5, 1e-4


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x, target):
        h = torch.nn.functional.gelu(self.fc1(self.norm(x)))
        p = torch.softmax(self.fc2(h), -1)
        return ((p - target) ** 2).mean()

    @staticmethod
    def inputs():
        return {"x": torch.randn(2, 3, 8), "target": torch.rand(2, 3, 4)}


class LM(torch.nn.Module):
    vocab, hidden, heads, seq = 40, 16, 4, 6
    # The causal mask is a buffer, exported as an initializer like the
    # weights: not trained.
    freeze = "^mask$"

    def __init__(self):
        super().__init__()
        h = self.hidden
        self.wte = torch.nn.Embedding(self.vocab, h)
        self.wpe = torch.nn.Parameter(torch.randn(self.seq, h) * 0.5)
        self.norm1 = torch.nn.LayerNorm(h)
        self.q = torch.nn.Linear(h, h)
        self.k = torch.nn.Linear(h, h)
        self.v = torch.nn.Linear(h, h)
        self.o = torch.nn.Linear(h, h)
        self.norm2 = torch.nn.LayerNorm(h)
        self.fc1 = torch.nn.Linear(h, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, h)
        self.head = torch.nn.Linear(h, self.vocab, bias=False)
        mask = torch.triu(torch.full((self.seq, self.seq), -1e4), 1)
        self.register_buffer("mask", mask)

    def forward(self, input_ids, labels):
        b, s = input_ids.shape
        d = self.hidden // self.heads
        x = self.wte(input_ids) + self.wpe
        n = self.norm1(x)

        def split(t):
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.q(n)), split(self.k(n)), split(self.v(n))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d) + self.mask
        a = torch.softmax(scores, -1) @ v
        x = x + self.o(a.transpose(1, 2).reshape(b, s, self.hidden))
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm2(x))))
        logits = self.head(x)
        logp = torch.log_softmax(logits, -1)
        return -(labels * logp).sum(-1).mean()

    @classmethod
    def inputs(cls):
        ids = torch.randint(0, cls.vocab, (2, cls.seq))
        labels = torch.nn.functional.one_hot(
            torch.randint(0, cls.vocab, (2, cls.seq)), cls.vocab).float()
        return {"input_ids": ids, "labels": labels}


MODELS = {"mlp": MLP, "lm": LM}


def export(name, folder):
    torch.manual_seed(0)
    model = MODELS[name]()
    # Parameters that start equal (every norm's ones) would be one
    # initializer in the export: trained models' are all different.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    inputs = model.inputs()
    path = os.path.join(folder, f"{name}.onnx")
    torch.onnx.export(model, tuple(inputs.values()), path,
                      input_names=list(inputs), output_names=["loss"],
                      opset_version=14)
    loss = model(*inputs.values())
    loss.backward()
    for key, value in inputs.items():
        np.save(os.path.join(folder, f"{key}.npy"), value.numpy())
    grads = {n: p.grad.numpy() for n, p in model.named_parameters()}
    return path, loss.item(), grads


def reference_for(name, got, grads):
    """The torch gradient of the weight `name` (ONNX MatMul weights are
    transposed Linear weights under generated names)."""
    if name in grads:
        return grads[name]
    matches = [g.T for n, g in grads.items()
               if g.ndim == 2 and g.T.shape == got.shape and n.endswith(
                   "weight")]
    # Several Linear weights may share a shape: the closest one is the
    # match (a wrong gradient fails against every one of them).
    return min(matches, key=lambda g: np.abs(g - got).max()) if matches \
        else None


def check(name, ranks, args, folder):
    path, loss, grads = export(name, folder)
    artifact = os.path.join(folder, f"{name}-{ranks}.tpa")
    out = os.path.join(folder, f"{name}-{ranks}-out")
    freeze = getattr(MODELS[name], "freeze", None)
    subprocess.run([args.tp_compile, path, "--gradients", "--devices",
                    str(ranks), "--target", "cpu", "-o", artifact] +
                   (["--freeze", freeze] if freeze else []),
                   check=True, stdout=subprocess.DEVNULL)
    inputs = [a for f in sorted(os.listdir(folder)) if f.endswith(".npy")
              for a in ("--input", f"{f[:-4]}={os.path.join(folder, f)}")]
    subprocess.run([args.tp_run, artifact, *inputs, "--output-dir", out],
                   check=True, stdout=subprocess.DEVNULL)
    problems, worst, count = [], 0.0, 0
    got_loss = float(np.load(os.path.join(out, "loss.npy")))
    if abs(got_loss - loss) > ATOL + RTOL * abs(loss):
        problems.append(f"loss {got_loss} != torch's {loss}")
    for f in sorted(os.listdir(out)):
        if not f.startswith("grad."):
            continue
        weight = f[len("grad."):-len(".npy")]
        got = np.load(os.path.join(out, f))
        want = reference_for(weight.replace("__", "::"), got, grads)
        if want is None:
            problems.append(f"no torch parameter for {weight}")
            continue
        count += 1
        diff = float(np.abs(got - want).max())
        worst = max(worst, diff)
        if diff > ATOL + RTOL * float(np.abs(want).max()):
            problems.append(f"grad.{weight} max abs diff {diff:.3g}")
    if count != len(grads):
        problems.append(f"{count} gradients, torch has {len(grads)}")
    status = "ok" if not problems else "FAIL: " + "; ".join(problems)
    print(f"{name} tp={ranks}: loss {got_loss:.6f}, {count} gradients, "
          f"max abs diff {worst:.2g} {status}")
    return not problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--ranks", nargs="*", type=int, default=[1, 2, 4])
    args = parser.parse_args()
    ok = True
    for name in args.models:
        for ranks in args.ranks:
            with tempfile.TemporaryDirectory() as folder:
                ok &= check(name, ranks, args, folder)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
