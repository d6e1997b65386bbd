"""Checks a tp-compile artifact against the ONNX model it came from.

Usage: check_artifact.py ARTIFACT [--full FULL.safetensors]

Every rank file must be valid safetensors whose header agrees with the
manifest, and each shard must equal the t-th chunk of its initializer along
the split dim (of the zero-padded initializer for a `padded_size` weight). With --full, the tp-export-weights output must hold every
weight of the manifest, bit-exact with the initializer.
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
    shards = 0
    for rank in manifest["ranks"]:
        path = os.path.join(artifact, rank["file"])
        assert os.path.getsize(path) == rank["bytes"], path
        header, tensors, data_start = read_safetensors(path)
        assert header["__metadata__"]["rank"] == str(rank["rank"])
        for w in rank["weights"]:
            name = w["name"]
            assert header[name]["data_offsets"] == w["data_offsets"], name
            assert w["file_offset"] == data_start + w["data_offsets"][0]
            full = inits[name]
            assert list(full.shape) == w["global_shape"], name
            expected = full
            if w.get("padded_size"):
                # A padded weight: zeros past the initializer, then the
                # rank's rows of the padded dim.
                axis = w["split_dim"]
                pad = [(0, 0)] * full.ndim
                pad[axis] = (0, w["padded_size"] - full.shape[axis])
                expected = np.split(np.pad(full, pad), tp,
                                    axis=axis)[rank["tp_index"]]
            elif w["split_dim"] >= 0:
                # A fused weight: the rank's share of each piece, in order.
                axis = w["split_dim"]
                bounds = np.cumsum(w.get("pieces", [full.shape[axis]]))[:-1]
                expected = np.concatenate(
                    [np.split(piece, tp, axis=axis)[rank["tp_index"]]
                     for piece in np.split(full, bounds, axis=axis)], axis=axis)
            assert tensors[name].tobytes() == np.ascontiguousarray(
                expected).tobytes(), f"{path}: shard of {name} differs"
            shards += 1
    print(f"ranks: {len(manifest['ranks'])} shards: {shards} ok")

    if len(sys.argv) > 3 and sys.argv[2] == "--full":
        _, tensors, _ = read_safetensors(sys.argv[3])
        names = {w["name"] for r in manifest["ranks"] for w in r["weights"]}
        assert set(tensors) == names, set(tensors) ^ names
        for name, arr in tensors.items():
            assert arr.shape == inits[name].shape, name
            assert arr.tobytes() == inits[name].tobytes(), \
                f"{name} is not bit-exact"
        print(f"full: {len(tensors)} weights bit-exact")


if __name__ == "__main__":
    main()
