"""tp_mlir.compile's keywords are tp-compile's flags: both are made from one
table (include/tp/Driver/CompileOptions.def), which
_tp_mlir.compile_options() returns. Every flag of the table is a keyword of
compile, named as the flag with '-' as '_', and compiles; a bad choice is
refused with tp-compile's message. (That tp-compile --help lists the same
table is test/Target/Artifact/tp-compile-help.test.)

Run with the module on the path: PYTHONPATH=build/python pytest
python-bindings/tests (lit's Python/api.test does this).
"""
import inspect
import os
import re

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tp_mlir as tp
from tp_mlir import _tp_mlir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
OPTIONS = _tp_mlir.compile_options()
# The arguments of compile, not keywords of the table's defaults below.
ARGUMENTS = ("model", "devices", "output")
# The flags whose keyword Python named before the table.
RENAMED = {"o": "output", "pp": "pipeline_stages",
           "input-shape": "input_shapes"}


def mlp():
    """loss = mean((x w)^2), as ONNX: small enough to compile 30 times."""
    f = TensorProto.FLOAT
    w = np.arange(16, dtype=np.float32).reshape(4, 4) / 16
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Mul", ["y", "y"], ["s"]),
         helper.make_node("ReduceMean", ["s"], ["loss"], keepdims=0)],
        "mlp", [helper.make_tensor_value_info("x", f, [2, 4])],
        [helper.make_tensor_value_info("loss", f, [])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def test_every_flag_is_a_keyword():
    flags = [option["flag"] for option in OPTIONS if option["flag"]]
    # tp-compile's 31 flags when the table was made; there may be more.
    for flag in ("o", "devices", "pp", "cuda-arch", "prefill-chunks",
                 "train", "lr", "betas", "chunk-bytes", "build-cache"):
        assert flag in flags
    assert len(flags) >= 31 and len(set(flags)) == len(flags)
    parameters = inspect.signature(tp.compile).parameters
    for option in OPTIONS:
        flag = option["flag"]
        keyword = RENAMED.get(flag, flag.replace("-", "_")) if flag \
            else "model"
        assert option["keyword"] == keyword, flag
        assert keyword in parameters, keyword
        assert f"{keyword} (" in tp.compile.__doc__, keyword


def test_user_guide_lists_every_option():
    """The user guide's table of tp-compile's options has a row for each,
    naming its flag and keyword."""
    with open(os.path.join(ROOT, "docs", "user-guide.md")) as f:
        rows = [line for line in f if line.startswith("| `")]
    for option in OPTIONS:
        flag = option["flag"]
        flag = ("-" if len(flag) == 1 else "--") + flag if flag else "MODEL"
        row = re.compile(rf"^\| `{re.escape(flag)}[ `].*\| "
                         rf"`{option['keyword']}` \|")
        assert any(row.match(line) for line in rows), flag


@pytest.mark.parametrize(
    "option", [o for o in OPTIONS if o["keyword"] not in ARGUMENTS],
    ids=lambda option: option["keyword"])
def test_compile_takes_every_flag(option, tmp_path):
    """compile(..., keyword=<tp-compile's default>) compiles, as tp-compile
    does without the flag."""
    keywords = {"target": "none", option["keyword"]: option["default"]}
    tp.compile(mlp(), 1, output=tmp_path / "m.tpa", **keywords)
    assert (tmp_path / "m.tpa" / "manifest.json").exists()


def test_choices_are_parsed_once(tmp_path):
    choices = {o["keyword"]: o["choices"] for o in OPTIONS if o["choices"]}
    assert choices == {"strategy": ["auto", "config"],
                       "train": ["adamw", "sgd"],
                       "target": ["none", "cpu", "cuda"],
                       "dtype": ["bf16", "f16", "f32"]}
    for keyword, value, message in [
            ("target", "tpu", "unknown --target 'tpu'; expected none, cpu "
                              "or cuda"),
            ("dtype", "fp8", "unknown --dtype 'fp8'; expected bf16, f16 or "
                             "f32"),
            ("strategy", "greedy", "unknown --strategy 'greedy'; expected "
                                   "auto or config"),
            ("train", "adam", "unknown --train 'adam'; expected adamw or "
                              "sgd")]:
        with pytest.raises(tp.CompileError, match=message):
            tp.compile(mlp(), 1, output=tmp_path / "a.tpa",
                       **{keyword: value})
    with pytest.raises(TypeError, match="dtype must be a str, got int"):
        tp.compile(mlp(), 1, dtype=16)
    options = _tp_mlir.CompileOptions()
    options.dtype = "bf16"
    assert options.dtype == "bf16"
    options.dtype = None
    assert options.dtype is None and options.target == "none"


def test_flags_python_had_lost(tmp_path, capfd):
    """cuda_arch, chunk_bytes and explain, which compile did not take
    before the table."""
    tp.compile(mlp(), 1, target="none", cuda_arch="sm_80", chunk_bytes=8,
               explain=True, output=tmp_path / "m.tpa")
    assert "support (tensor, sequence, pipeline)" in capfd.readouterr().out
    with pytest.raises(TypeError, match="unexpected keyword argument "
                                        "'cuda_archs'"):
        tp.compile(mlp(), 1, cuda_archs="sm_80")


def test_train_flags_are_keywords(tmp_path):
    """train="adamw" with --lr, --betas, ... as keywords is train=AdamW(...);
    they need train, as tp-compile's flags need --train."""
    flat = tp.compile(mlp(), 1, train="adamw", lr=0.01, betas=(0.8, 0.99),
                      eps=1e-7, weight_decay=0.1, clip_norm=1.0,
                      accumulate=2, output=tmp_path / "flat.tpa")
    optimizer = tp.compile(
        mlp(), 1, train=tp.AdamW(lr=0.01, betas=(0.8, 0.99), eps=1e-7,
                                 weight_decay=0.1, clip_norm=1.0,
                                 accumulate=2),
        output=tmp_path / "object.tpa")
    training = flat.manifest["training"]
    assert training == optimizer.manifest["training"]
    assert training["optimizer"] == "adamw" and training["beta1"] == 0.8
    sgd = tp.compile(mlp(), 1, train="sgd", momentum=0.9,
                     output=tmp_path / "sgd.tpa").manifest["training"]
    assert sgd["momentum"] == 0.9 and sgd["weight_decay"] == 0
    with pytest.raises(tp.CompileError, match="--lr, --betas, --eps, "
                       "--weight-decay, --momentum, --clip-norm and "
                       "--accumulate need --train"):
        tp.compile(mlp(), 1, lr=0.1, output=tmp_path / "a.tpa")
    with pytest.raises(tp.CompileError, match="--betas takes two values"):
        tp.compile(mlp(), 1, train="adamw", betas=[0.9],
                   output=tmp_path / "a.tpa")
    with pytest.raises(TypeError, match="lr is given by train=AdamW"):
        tp.compile(mlp(), 1, train=tp.AdamW(), lr=0.1)
