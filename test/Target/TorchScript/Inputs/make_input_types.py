#!/usr/bin/python3
"""Traced modules for how the frontend decides forward() inputs' types,
which a TorchScript file does not declare (input-types.test):

- int_mask/: token ids and an int64 attention mask, the mask consumed as
  transformers' BERT does, (1.0 - mask[:, None, None, :].to(float32)) *
  min, so that no use decides its type; with its inputs (input_ids.npy,
  attention_mask.npy, int64, the second sequence padded) and torch's
  output (output.npy);
- recorded_mask.pt: the same module traced with a float32 mask, and with
  its example inputs' types recorded as PyTorch 2's torch.jit.trace
  records them (traced_inputs.pkl: {"forward": [inputs]}, each tensor's
  storage record left empty), which torch 1.13 cannot write itself;
- mean.pt: x.mean(-1), which runs on floats only but with no op the
  frontend reads a type from.

  /usr/bin/python3 test/Target/TorchScript/Inputs/make_input_types.py
"""
import os
import struct

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))


class MaskedEncoder(nn.Module):
    def __init__(self, vocab=50, hidden=32, heads=4):
        super().__init__()
        self.heads, self.dim = heads, hidden // heads
        self.embed = nn.Embedding(vocab, hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.out = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask):
        h = self.embed(input_ids)
        b, s, d = h.shape
        q, k, v = (t.view(b, s, self.heads, self.dim).transpose(1, 2)
                   for t in self.qkv(h).split(d, dim=-1))
        scores = q @ k.transpose(-1, -2) / self.dim ** 0.5
        mask = attention_mask[:, None, None, :].to(torch.float32)
        mask = (1.0 - mask) * torch.finfo(torch.float32).min
        probs = (scores + mask).softmax(-1)
        return self.out((probs @ v).transpose(1, 2).reshape(b, s, d))


class Mean(nn.Module):
    def forward(self, x):
        return x.mean(-1)


def jit_pickle(inputs):
    """{"forward": inputs} as torch.jit's pickler writes it (Pickler::
    pushIValue): a type-tagged dict and list, each tensor a
    _rebuild_tensor_v2 of a ('storage', type, key, location, numel)
    persistent id, its record named by the key."""
    out = bytearray(b"\x80\x02")  # PROTO 2

    def glob(module, name):
        out.extend(b"c" + f"{module}\n{name}\n".encode())

    def string(text):
        out.extend(b"X" + struct.pack("<I", len(text)) + text.encode())

    def integer(value):
        out.extend(b"J" + struct.pack("<i", value))  # BININT

    def ints(values):
        out.extend(b"(")
        for value in values:
            integer(value)
        out.extend(b"t")

    def tag(annotation):
        string(annotation)
        out.extend(b"\x86R")  # TUPLE2 REDUCE

    glob("torch.jit._pickle", "restore_type_tag")
    out.extend(b"}(")  # EMPTY_DICT MARK
    string("forward")
    glob("torch.jit._pickle", "restore_type_tag")
    out.extend(b"](")  # EMPTY_LIST MARK
    for key, tensor in enumerate(inputs):
        glob("torch._utils", "_rebuild_tensor_v2")
        out.extend(b"((")
        string("storage")
        glob("torch", {torch.int64: "LongStorage",
                       torch.float32: "FloatStorage"}[tensor.dtype])
        string(str(key))
        string("cpu")
        integer(tensor.numel())
        out.extend(b"tQ")  # TUPLE BINPERSID
        integer(0)  # storage offset
        ints(tensor.shape)
        ints(tensor.stride())
        out.extend(b"\x89")  # NEWFALSE: requires_grad
        glob("collections", "OrderedDict")
        out.extend(b")Rt")  # EMPTY_TUPLE REDUCE TUPLE
        out.extend(b"R")  # REDUCE
    out.extend(b"e")  # APPENDS
    tag("List[Any]")
    out.extend(b"u")  # SETITEMS
    tag("Dict[str, List[Any]]")
    out.extend(b".")
    return bytes(out)


def record_inputs(path, inputs):
    """Adds traced_inputs.pkl to the archive at `path`, as PyTorch 2 saves
    a trace's example inputs (ScriptModuleSerializer::writeArchive with
    skip_tensor_data): the pickle, and an empty record per tensor."""
    reader = torch._C.PyTorchFileReader(path)
    records = {name: reader.get_record(name)
               for name in reader.get_all_records()}
    records["traced_inputs.pkl"] = jit_pickle(inputs)
    for key in range(len(inputs)):
        records[f"traced_inputs/{key}"] = b""
    writer = torch._C.PyTorchFileWriter(path)
    for name, data in sorted(records.items()):
        if name != "version":  # the writer writes its own
            writer.write_record(name, data, len(data))
    writer.write_end_of_file()


def main():
    torch.manual_seed(0)
    model = MaskedEncoder().eval()
    input_ids = torch.randint(0, 50, (2, 16))
    attention_mask = torch.ones(2, 16, dtype=torch.int64)
    attention_mask[1, 11:] = 0  # the second sequence is padded
    with torch.no_grad():
        traced = torch.jit.trace(model, (input_ids, attention_mask))
        y = model(input_ids, attention_mask)
    folder = os.path.join(HERE, "int_mask")
    os.makedirs(folder, exist_ok=True)
    traced.save(os.path.join(folder, "model.pt"))
    np.save(os.path.join(folder, "input_ids.npy"), input_ids.numpy())
    np.save(os.path.join(folder, "attention_mask.npy"),
            attention_mask.numpy())
    np.save(os.path.join(folder, "output.npy"), y.numpy())

    float_mask = attention_mask.to(torch.float32)
    path = os.path.join(HERE, "recorded_mask.pt")
    with torch.no_grad():
        torch.jit.trace(model, (input_ids, float_mask)).save(path)
    record_inputs(path, (input_ids, float_mask))
    torch.jit.load(path)  # still a module libtorch loads

    torch.jit.trace(Mean().eval(), torch.randn(2, 4)).save(
        os.path.join(HERE, "mean.pt"))


if __name__ == "__main__":
    main()
