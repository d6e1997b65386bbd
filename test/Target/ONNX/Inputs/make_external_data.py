"""Writes ONNX models whose weights live in external data files.

Usage: make_external_data.py OUT_DIR

OUT_DIR/big/       a two-layer MLP with 1.07 GB of weights in weights.bin, a
                   sparse file (nothing is written, so this is instant); the
                   importer must not read it.
OUT_DIR/missing/   references a data file that does not exist.
OUT_DIR/escape/    references ../secret.bin (outside the model's folder).
OUT_DIR/absolute/  references /etc/passwd.
OUT_DIR/short/     references a file too small for the tensor.
"""
import os
import sys

import onnx
from onnx import TensorProto, helper


def external_tensor(name, dims, location, offset=0):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
    t.data_location = TensorProto.EXTERNAL
    n = 4
    for d in dims:
        n *= d
    for key, value in (("location", location), ("offset", str(offset)),
                       ("length", str(n))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t, n


def mlp(hidden, inner, location, offset=0):
    w1, n1 = external_tensor("fc1.weight", [hidden, inner], location, offset)
    w2, n2 = external_tensor("fc2.weight", [inner, hidden], location,
                             offset + n1)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "fc1.weight"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["a"], name="act"),
         helper.make_node("MatMul", ["a", "fc2.weight"], ["y"], name="fc2")],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", hidden])],
        initializer=[w1, w2])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, offset + n1 + n2


def write(out, name, model):
    os.makedirs(os.path.join(out, name), exist_ok=True)
    # Serialize directly: onnx.save would try to resolve the external data.
    with open(os.path.join(out, name, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())


def sparse_file(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def main():
    out = sys.argv[1]
    model, size = mlp(4096, 32768, "weights.bin")  # 2 x 512 MiB
    write(out, "big", model)
    sparse_file(os.path.join(out, "big", "weights.bin"), size)

    write(out, "missing", mlp(8, 16, "missing.bin")[0])
    write(out, "escape", mlp(8, 16, "../secret.bin")[0])
    sparse_file(os.path.join(out, "secret.bin"), 4096)
    write(out, "absolute", mlp(8, 16, "/etc/passwd")[0])
    model, size = mlp(8, 16, "short.bin")
    write(out, "short", model)
    sparse_file(os.path.join(out, "short", "short.bin"), size - 4)


if __name__ == "__main__":
    main()
