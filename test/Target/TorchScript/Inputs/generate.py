#!/usr/bin/python3
"""Small TorchScript files for the frontend's tests, with torch references.

  /usr/bin/python3 test/Target/TorchScript/Inputs/generate.py

scripted_mlp.pt   torch.jit.script of a custom module (a ModuleList loop,
                  a static `if self.training`, a residual), with its input
                  x.npy and output output.npy
Bad input, each for one error message:
scripted_if.pt    a branch on a tensor's value (Python control flow)
int_arg.pt        forward() takes an int
train_mode.pt     traced and saved in training mode
unsupported.pt    uses aten::sort, which the frontend does not convert
state_dict.pt     torch.save of a state dict: a zip, but not TorchScript
truncated.pt      the first 4096 bytes of scripted_mlp.pt
future.pt         scripted_mlp.pt with its version record set to 99
"""
import os
import zipfile

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(0)


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 4 * d)
        self.down = nn.Linear(4 * d, d)

    def forward(self, x):
        h = self.down(torch.relu(self.up(self.norm(x))))
        if self.training:
            h = nn.functional.dropout(h, 0.1)
        return x + h


class ScriptedMLP(nn.Module):
    def __init__(self, d=32, layers=2):
        super().__init__()
        self.blocks = nn.ModuleList([Block(d) for _ in range(layers)])
        self.head = nn.Linear(d, 8)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class DataIf(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        if bool(y.sum() > 0):
            y = torch.relu(y)
        return y


class IntArg(nn.Module):
    def forward(self, x, n: int):
        return x * n


class Sorting(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return torch.sort(self.lin(x), dim=-1)[0]


def main():
    model = ScriptedMLP().eval()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        y = model(x)
    scripted = torch.jit.script(model)
    path = os.path.join(HERE, "scripted_mlp.pt")
    scripted.save(path)
    np.save(os.path.join(HERE, "x.npy"), x.numpy())
    np.save(os.path.join(HERE, "output.npy"), y.numpy())

    torch.jit.script(DataIf().eval()).save(os.path.join(HERE, "scripted_if.pt"))
    torch.jit.script(IntArg().eval()).save(os.path.join(HERE, "int_arg.pt"))
    train = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))  # left in training
    torch.jit.trace(train, torch.randn(2, 4)).save(
        os.path.join(HERE, "train_mode.pt"))
    torch.jit.trace(Sorting().eval(), torch.randn(2, 4)).save(
        os.path.join(HERE, "unsupported.pt"))
    torch.save(model.state_dict(), os.path.join(HERE, "state_dict.pt"))
    with open(path, "rb") as f:
        head = f.read(4096)
    with open(os.path.join(HERE, "truncated.pt"), "wb") as f:
        f.write(head)
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(
            os.path.join(HERE, "future.pt"), "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/version"):
                data = b"99\n"
            dst.writestr(info.filename, data)
    print("wrote", sorted(f for f in os.listdir(HERE) if f.endswith(".pt")))


if __name__ == "__main__":
    main()
