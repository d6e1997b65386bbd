"""Writes the sequence and Loop models that ONNX 1.12's text parser cannot
express (sequence-typed values, absent optional inputs).

Usage: make_sequence_models.py OUT_DIR

repeat.onnx      repeat_interleave the way torch.onnx.export writes it:
                 SplitToSequence, a Loop that reads the outer sequences
                 with SequenceAt and carries a SequenceInsert-built
                 sequence, then ConcatFromSequence.
no-trip.onnx     a Loop without trip count, ended by the condition its
                 body computes (i < 2).
seq-output.onnx  a sequence as a graph output.
no-end.onnx      a Loop with neither a trip count nor a condition.
no-limit.onnx    a Loop whose condition stays true, with no trip count.
"""
import os
import sys

import onnx
from onnx import TensorProto as T
from onnx import helper as h

FLOAT_SEQ = h.make_sequence_type_proto(h.make_tensor_type_proto(T.FLOAT, None))


def const(name, dtype, dims, vals):
    return h.make_node("Constant", [], [name],
                       value=h.make_tensor(name, dtype, dims, vals))


def body(name, nodes, carried_in, outputs):
    inputs = [h.make_tensor_value_info("i", T.INT64, []),
              h.make_tensor_value_info("c", T.BOOL, [])] + carried_in
    return h.make_graph(nodes, name, inputs, outputs)


def save(out, name, nodes, inputs, outputs):
    graph = h.make_graph(nodes, name, inputs, outputs)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 14)])
    onnx.save(model, os.path.join(out, name + ".onnx"))


def main(out):
    os.makedirs(out, exist_ok=True)
    x = h.make_tensor_value_info("x", T.FLOAT, [2, 3])
    acc = h.make_value_info("acc", FLOAT_SEQ)
    acc_out = h.make_value_info("acc_out", FLOAT_SEQ)
    c_out = h.make_tensor_value_info("c_out", T.BOOL, [])
    step = body("step", [
        h.make_node("SequenceAt", ["xs", "i"], ["piece"]),
        h.make_node("SequenceAt", ["rs", "i"], ["r"]),
        const("rows", T.INT64, [1], [2]),
        h.make_node("Concat", ["rows", "r"], ["shape"], axis=0),
        h.make_node("Expand", ["piece", "shape"], ["wide"]),
        h.make_node("SequenceInsert", ["acc", "wide"], ["acc_out"]),
        h.make_node("Identity", ["c"], ["c_out"]),
    ], [acc], [c_out, acc_out])
    save(out, "repeat", [
        const("one", T.INT64, [], [1]),
        const("reps", T.INT64, [3], [1, 2, 1]),
        const("t", T.BOOL, [], [1]),
        h.make_node("SplitToSequence", ["x", "one"], ["xs"], axis=1),
        h.make_node("SplitToSequence", ["reps"], ["rs"]),
        h.make_node("SequenceLength", ["xs"], ["n"]),
        h.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT),
        h.make_node("Loop", ["n", "t", "empty"], ["cols"], body=step),
        h.make_node("ConcatFromSequence", ["cols"], ["y"], axis=1),
    ], [x], [h.make_tensor_value_info("y", T.FLOAT, [2, 4])])

    a = h.make_tensor_value_info("a", T.FLOAT, [2, 3])
    a_out = h.make_tensor_value_info("a_out", T.FLOAT, [2, 3])
    y = h.make_tensor_value_info("y", T.FLOAT, [2, 3])
    add = h.make_node("Add", ["a", "x"], ["a_out"])
    counted = body("counted", [
        const("two", T.INT64, [], [2]),
        h.make_node("Less", ["i", "two"], ["c_out"]), add], [a], [c_out, a_out])
    true = const("t", T.BOOL, [], [1])
    save(out, "no-trip", [true, h.make_node("Loop", ["", "t", "x"], ["y"],
                                            body=counted)], [x], [y])
    save(out, "seq-output", [h.make_node("SequenceConstruct", ["x", "x"], ["s"])],
         [x], [h.make_value_info("s", FLOAT_SEQ)])
    forever = body("forever", [h.make_node("Identity", ["c"], ["c_out"]), add],
                   [a], [c_out, a_out])
    save(out, "no-end", [h.make_node("Loop", ["", "", "x"], ["y"], body=forever)],
         [x], [y])
    save(out, "no-limit", [true, h.make_node("Loop", ["", "t", "x"], ["y"],
                                             body=forever)], [x], [y])


if __name__ == "__main__":
    main(sys.argv[1])
