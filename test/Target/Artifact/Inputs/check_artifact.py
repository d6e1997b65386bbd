"""Checks a tp-compile artifact against the ONNX model it came from.

Usage: check_artifact.py ARTIFACT [--full FULL.safetensors]

Every rank file must be valid safetensors whose header agrees with the
manifest, and each shard must equal the t-th chunk along the split dim of
the range of its initializer that it holds (all of it, or a fused weight's
`slice`), zero-padded first for a `padded_size` weight. With --full, the
tp-export-weights output must hold every initializer of the manifest,
bit-exact.
"""
import json
import os
import struct
import sys

import numpy as np
import onnx
from onnx import numpy_helper

DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64,
          "I64": np.int64, "I32": np.int32, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_, "BF16": np.uint16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    end = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        b, e = entry["data_offsets"]
        arr = np.frombuffer(body[b:e], dtype=DTYPES[entry["dtype"]])
        tensors[name] = arr.reshape(entry["shape"])
        end = max(end, e)
    assert end == len(body), f"{path}: {len(body) - end} bytes not indexed"
    return header, tensors, 8 + n


def main():
    artifact = sys.argv[1]
    with open(os.path.join(artifact, "manifest.json")) as f:
        manifest = json.load(f)
    model = onnx.load(manifest["model"])  # loads external data as well
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    tp = manifest["grid"]["tp"]
    shards = pieces = 0
    for rank in manifest["ranks"]:
        path = os.path.join(artifact, rank["file"])
        assert os.path.getsize(path) == rank["bytes"], path
        header, tensors, data_start = read_safetensors(path)
        assert header["__metadata__"]["rank"] == str(rank["rank"])
        for w in rank["weights"]:
            name = w["name"]
            assert header[name]["data_offsets"] == w["data_offsets"], name
            assert w["file_offset"] == data_start + w["data_offsets"][0]
            full = inits[w["initializer"]]
            assert list(full.shape) == w["global_shape"], name
            expected = full
            if "slice" in w:
                # A piece of a fused weight: its range of the initializer.
                s = w["slice"]
                index = [slice(None)] * full.ndim
                index[s["dim"]] = slice(s["offset"], s["offset"] + s["size"])
                expected = expected[tuple(index)]
            axis = w["split_dim"]
            if "repeat" in w:
                # Grouped-query K/V heads: each of the range's blocks
                # repeated in place, then split.
                r = w["repeat"]
                blocks = np.split(expected, r["blocks"], axis=r["dim"])
                expected = np.concatenate(
                    [b for b in blocks for _ in range(r["times"])],
                    axis=r["dim"])
            if w.get("padded_size"):
                # A padded weight: zeros past the range, then the rank's
                # rows of the padded dim.
                pad = [(0, 0)] * full.ndim
                pad[axis] = (0, w["padded_size"] - expected.shape[axis])
                expected = np.pad(expected, pad)
            if axis >= 0:
                expected = np.split(expected, tp, axis=axis)[rank["tp_index"]]
            assert tensors[name].tobytes() == np.ascontiguousarray(
                expected).tobytes(), f"{path}: shard of {name} differs"
            shards += 1
            pieces += "slice" in w
    print(f"ranks: {len(manifest['ranks'])} shards: {shards} ok "
          f"({pieces} of fused weights)")

    if len(sys.argv) > 3 and sys.argv[2] == "--full":
        _, tensors, _ = read_safetensors(sys.argv[3])
        names = {w["initializer"] for r in manifest["ranks"]
                 for w in r["weights"]}
        assert set(tensors) == names, set(tensors) ^ names
        for name, arr in tensors.items():
            assert arr.shape == inits[name].shape, name
            assert arr.tobytes() == inits[name].tobytes(), \
                f"{name} is not bit-exact"
        print(f"full: {len(tensors)} weights bit-exact")


if __name__ == "__main__":
    main()
