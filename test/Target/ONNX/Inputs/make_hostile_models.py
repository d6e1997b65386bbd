#!/usr/bin/env python3
"""Writes malformed and hostile ONNX models into DIR (argv[1]), one per
defect that crashed the importer or passed silently: each must now be a
clear error. Built with onnx's protobuf classes, below its checker, since
the point is models the checker would refuse or never sees."""
import os
import sys

import onnx
from onnx import TensorProto as T
from onnx import helper as h

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def save(graph, name, opset=17):
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, os.path.join(out, name))


def matmul(weight):
    return h.make_graph(
        [h.make_node("MatMul", ["x", "w"], ["y"], name="proj")], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
        [h.make_tensor_value_info("y", T.FLOAT, [1, 4])],
        initializer=[weight])


def relu():
    return h.make_graph(
        [h.make_node("Relu", ["x"], ["y"], name="act")], "g",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info("y", T.FLOAT, [2])])


# Concat with an empty (left-out) input: only optional inputs may be.
save(h.make_graph([h.make_node("Concat", ["x", ""], ["y"], axis=0,
                               name="cat")], "g",
                  [h.make_tensor_value_info("x", T.FLOAT, [2])],
                  [h.make_tensor_value_info("y", T.FLOAT, [4])]),
     "concat-empty-input.onnx")

# Two nodes writing the same value.
save(h.make_graph([h.make_node("Relu", ["x"], ["y"], name="first"),
                   h.make_node("Neg", ["x"], ["y"], name="second")], "g",
                  [h.make_tensor_value_info("x", T.FLOAT, [2])],
                  [h.make_tensor_value_info("y", T.FLOAT, [2])]),
     "duplicate-output.onnx")

save(relu(), "opset-99.onnx", opset=99)
save(relu(), "opset-negative.onnx", opset=-1)

# An int64 initializer whose element count overflows.
huge = T(name="w", data_type=T.INT64, dims=[2**63 - 1, 16], raw_data=b"\0" * 16)
save(h.make_graph([h.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                  [h.make_tensor_value_info("x", T.INT64, [16])],
                  [h.make_tensor_value_info("y", T.INT64, [16])],
                  initializer=[huge]), "huge-dims.onnx")

# A weight whose float_data holds 3 of its 16 values, and one that declares
# 10^9 elements and holds none.
save(matmul(T(name="w", data_type=T.FLOAT, dims=[4, 4],
              float_data=[1.0, 2.0, 3.0])), "short-float-data.onnx")
save(h.make_graph([h.make_node("Add", ["x", "w"], ["y"], name="add")], "g",
                  [h.make_tensor_value_info("x", T.FLOAT, [10**9])],
                  [h.make_tensor_value_info("y", T.FLOAT, [10**9])],
                  initializer=[T(name="w", data_type=T.FLOAT, dims=[10**9])]),
     "no-data.onnx")


def external(location, offset=None):
    t = T(name="w", data_type=T.FLOAT, dims=[4, 4],
          data_location=T.EXTERNAL)
    entry = t.external_data.add()
    entry.key, entry.value = "location", location
    if offset is not None:
        entry = t.external_data.add()
        entry.key, entry.value = "offset", str(offset)
    return matmul(t)


# External data through a symlink to a file outside the model's folder, and
# an offset that wraps past the end of the file.
os.makedirs(os.path.join(out, "symlink"), exist_ok=True)
save(external("w.bin"), os.path.join("symlink", "model.onnx"))
link = os.path.join(out, "symlink", "w.bin")
if not os.path.lexists(link):
    os.symlink("/etc/passwd", link)
with open(os.path.join(out, "w.bin"), "wb") as f:
    f.write(b"\0" * 64)
save(external("w.bin", offset=2**64 - 1), "wrapping-offset.onnx")

# AveragePool over a huge input: it folded a divisor constant per output
# position (3·10^13 of them) and ran out of memory.
save(h.make_graph([h.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2],
                               name="pool")], "g",
                  [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 2**40, 32])],
                  [h.make_tensor_value_info("y", T.FLOAT, None)]),
     "avgpool-huge.onnx")
