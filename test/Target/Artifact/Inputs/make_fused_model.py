"""Writes a fused-QKV block for the artifact writer: x @ Wqkv + bqkv split
into q, k and v (ONNX Split), q + k + v @ Wo. Wqkv is external data (at a
non-zero offset), bqkv raw_data, Wo typed float_data. Values are random
(fixed seed).

Usage: make_fused_model.py OUT_DIR
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(1)
    hidden, head = 12, 6
    wqkv = rng.standard_normal((hidden, 3 * head), dtype=np.float32)
    bqkv = rng.standard_normal((3 * head,), dtype=np.float32)
    wo = rng.standard_normal((head, hidden), dtype=np.float32)

    pad = b"\x7f" * 32  # the tensor does not start at offset 0
    with open(os.path.join(out, "weights.bin"), "wb") as f:
        f.write(pad + wqkv.tobytes())
    t1 = TensorProto(name="qkv.weight", data_type=TensorProto.FLOAT,
                     dims=wqkv.shape, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", "weights.bin"), ("offset", str(len(pad))),
                       ("length", str(wqkv.nbytes))):
        entry = t1.external_data.add()
        entry.key, entry.value = key, value
    tb = helper.make_tensor("qkv.bias", TensorProto.FLOAT, bqkv.shape,
                            bqkv.tobytes(), raw=True)
    to = helper.make_tensor("o.weight", TensorProto.FLOAT, wo.shape,
                            wo.flatten().tolist())
    split = helper.make_tensor("split", TensorProto.INT64, [3],
                               [head, head, head])
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "qkv.weight"], ["h"], name="qkv"),
         helper.make_node("Add", ["h", "qkv.bias"], ["hb"], name="qkv_bias"),
         helper.make_node("Split", ["hb", "split"], ["q", "k", "v"], axis=1,
                          name="split_qkv"),
         helper.make_node("Add", ["q", "k"], ["qk"], name="add_qk"),
         helper.make_node("Add", ["qk", "v"], ["s"], name="add_v"),
         helper.make_node("MatMul", ["s", "o.weight"], ["y"], name="o")],
        "fused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, hidden])],
        initializer=[t1, tb, to, split])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    with open(os.path.join(out, "model.onnx"), "wb") as f:
        f.write(model.SerializeToString())


if __name__ == "__main__":
    main()
