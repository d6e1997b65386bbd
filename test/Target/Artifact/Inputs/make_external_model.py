"""Writes a small MLP whose weights are stored three ways, for the artifact
writer: fc1.weight as external data (at a non-zero offset), fc2.weight as
typed float_data, fc1.bias as raw_data. Values are random (fixed seed).

Usage: make_external_model.py OUT_DIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    hidden, inner = 12, 40
    w1 = rng.standard_normal((hidden, inner), dtype=np.float32)
    w2 = rng.standard_normal((inner, hidden), dtype=np.float32)
    b1 = rng.standard_normal((inner,), dtype=np.float32)

    pad = b"\x7f" * 64  # the tensor does not start at offset 0
    with open(os.path.join(out, "weights.bin"), "wb") as f:
        f.write(pad + w1.tobytes())
    t1 = TensorProto(name="fc1.weight", data_type=TensorProto.FLOAT,
                     dims=w1.shape, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "weights.bin"), ("offset", str(len(pad))),
                       ("length", str(w1.nbytes))):
        entry = t1.external_data.add()
        entry.key, entry.value = key, value
    t2 = helper.make_tensor("fc2.weight", TensorProto.FLOAT, w2.shape,
                            w2.flatten().tolist())
    tb = helper.make_tensor("fc1.bias", TensorProto.FLOAT, b1.shape,
                            b1.tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "fc1.weight"], ["h"], name="fc1"),
         helper.make_node("Add", ["h", "fc1.bias"], ["hb"], name="fc1_bias"),
         helper.make_node("Relu", ["hb"], ["a"], name="act"),
         helper.make_node("MatMul", ["a", "fc2.weight"], ["y"], name="fc2")],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden])],
        initializer=[t1, t2, tb])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
