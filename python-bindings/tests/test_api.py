"""tp_mlir's API on the bundled models and on bad input.

Run with the module on the path: PYTHONPATH=build/python pytest
python-bindings/tests (lit's Python/api.test does this). Outputs are compared
with the torch references stored beside each model by test/models/generate.py,
at atol = rtol = 1e-5, the tolerance of the command-line numerical tests.
"""
import json
import os
import struct
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tp_mlir as tp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "test", "models")
TOLERANCE = 1e-5

# (model, input files, input shapes for dynamic dims, output files)
BUNDLED = {
    "gpt2": (["input_ids"], {"input_ids": [2, 16]}, ["logits"]),
    "llama": (["input_ids"], {"input_ids": [2, 16]}, ["logits"]),
    "bert": (["input_ids", "attention_mask"], None,
             ["last_hidden_state", "pooler_output"]),
    "cnn": (["input"], None, ["logits"]),
}


def load(model, name):
    return np.load(os.path.join(MODELS, model, name + ".npy"))


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2 on 2 ranks, compiled once for the tests that only run it."""
    out = tmp_path_factory.mktemp("gpt2") / "model.tpa"
    return tp.compile(os.path.join(MODELS, "gpt2", "model.onnx"), 2,
                      input_shapes={"input_ids": [2, 16]}, output=out)


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("model", sorted(BUNDLED))
def test_bundled_model_matches_reference(model, devices, tmp_path):
    inputs, shapes, outputs = BUNDLED[model]
    artifact = tp.compile(os.path.join(MODELS, model, "model.onnx"), devices,
                          input_shapes=shapes, output=tmp_path / "m.tpa")
    session = tp.Session(artifact)
    assert session.ranks == devices
    got = session.run({name: load(model, name) for name in inputs})
    assert sorted(got) == sorted(outputs)
    for name in outputs:
        np.testing.assert_allclose(got[name], load(model, name),
                                   atol=TOLERANCE, rtol=TOLERANCE)


with open(os.path.join(MODELS, "hf", "zoo.json")) as f:
    ZOO = {name: entry for name, entry in json.load(f).items()
           if isinstance(entry, dict)}


@pytest.mark.parametrize("devices", [1, 2, 4])
@pytest.mark.parametrize("model", sorted(ZOO))
def test_zoo_model_matches_reference(model, devices, tmp_path):
    """transformers' models as torch.onnx.export writes them
    (test/models/hf/generate.py stored torch's outputs beside each), through
    the API, on 1, 2 and 4 ranks; atol = rtol = 1e-5 as run_zoo.py."""
    entry = ZOO[model]
    folder = os.path.join(MODELS, "hf", model)
    artifact = tp.compile(os.path.join(folder, "model.onnx"), devices,
                          input_shapes=entry["inputs"],
                          output=tmp_path / "m.tpa")
    got = tp.Session(artifact).run(
        {name: np.load(os.path.join(folder, name + ".npy"))
         for name in entry["inputs"]})
    assert sorted(got) == sorted(entry["outputs"])
    for name in entry["outputs"]:
        np.testing.assert_allclose(
            got[name], np.load(os.path.join(folder, name + ".npy")),
            atol=TOLERANCE, rtol=TOLERANCE)


def test_pipeline_and_sequence_parallel(tmp_path):
    artifact = tp.compile(os.path.join(MODELS, "gpt2", "model.onnx"), 2,
                          pipeline_stages=2, microbatches=2,
                          input_shapes={"input_ids": [2, 16]},
                          output=tmp_path / "pp.tpa")
    got = tp.Session(artifact).run({"input_ids": load("gpt2", "input_ids")})
    np.testing.assert_allclose(got["logits"], load("gpt2", "logits"),
                               atol=TOLERANCE, rtol=TOLERANCE)
    artifact = tp.compile(os.path.join(MODELS, "bert", "model.onnx"), 2,
                          sequence_parallel=True, output=tmp_path / "sp.tpa")
    got = tp.Session(artifact).run(
        {name: load("bert", name) for name in ("input_ids", "attention_mask")})
    np.testing.assert_allclose(got["last_hidden_state"],
                               load("bert", "last_hidden_state"),
                               atol=TOLERANCE, rtol=TOLERANCE)


def test_model_as_bytes(tmp_path):
    with open(os.path.join(MODELS, "cnn", "model.onnx"), "rb") as f:
        data = f.read()
    artifact = tp.compile(data, 2, output=tmp_path / "cnn.tpa")
    got = tp.Session(artifact).run({"input": load("cnn", "input")})
    np.testing.assert_allclose(got["logits"], load("cnn", "logits"),
                               atol=TOLERANCE, rtol=TOLERANCE)


def test_session_runs_many_times(gpt2):
    session = tp.Session(gpt2)
    assert session.inputs == [("input_ids", "I64", [2, 16])]
    assert session.outputs == [("logits", "F32", [2, 16, 256])]
    ids = load("gpt2", "input_ids")
    first = session.run({"input_ids": ids})["logits"]
    again = session.run({"input_ids": ids}, warmup=1, repeat=3)["logits"]
    assert np.array_equal(first, again)
    assert session.seconds_per_run > 0
    # Non-contiguous input is accepted (copied to C order first).
    flipped = np.asfortranarray(ids)
    assert np.array_equal(session.run({"input_ids": flipped})["logits"],
                          first)
    # Outputs are numpy arrays that own their memory, outliving the session.
    del session
    assert first.shape == (2, 16, 256) and float(np.abs(first).sum()) > 0


def test_trace_records_every_rank(gpt2, tmp_path):
    """Session(trace=True).write_trace: tp-run --trace's timeline, one track
    per rank, a forward interval per pass and the same collectives, with
    their sites, inside each on every rank."""
    session = tp.Session(gpt2, trace=True)
    session.run({"input_ids": load("gpt2", "input_ids")}, warmup=1, repeat=1)
    path = tmp_path / "trace.json"
    session.write_trace(path)
    with open(path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    by_rank = {}
    for e in events:
        by_rank.setdefault(e["tid"], []).append(e)
    assert sorted(by_rank) == list(range(session.ranks))
    calls = []
    for rank, evs in sorted(by_rank.items()):
        assert sum(e["name"] == "forward" for e in evs) == 2
        mine = sorted((e for e in evs if e["name"] != "forward"),
                      key=lambda e: e["ts"])
        assert mine and all(e["args"]["site"] for e in mine)
        calls.append([(e["name"], e["args"]["site"]) for e in mine])
    assert all(c == calls[0] for c in calls)
    with pytest.raises(tp.TPError, match="opened without trace=True"):
        tp.Session(gpt2).write_trace(tmp_path / "none.json")


def test_wrong_inputs_raise(gpt2):
    session = tp.Session(gpt2)
    ids = load("gpt2", "input_ids")
    with pytest.raises(tp.TPError, match=r"unknown input 'ids'; the model's "
                       r"inputs are: input_ids"):
        session.run({"ids": ids})
    with pytest.raises(tp.TPError, match=r"missing input 'input_ids' "
                       r"\(I64 \[2, 16\]\)"):
        session.run({})
    with pytest.raises(tp.TPError, match=r"expected I64 \[2, 16\], got I64 "
                       r"\[2, 8\]"):
        session.run({"input_ids": ids[:, :8]})
    with pytest.raises(tp.TPError, match=r"expected I64 \[2, 16\], got I32"):
        session.run({"input_ids": ids.astype(np.int32)})
    bad = ids.copy()
    bad[1, 3] = 300
    with pytest.raises(tp.TPError, match=r"value 300 at \[1, 3\] is outside "
                       r"the valid range \[-256, 255\]"):
        session.run({"input_ids": bad})
    # Input errors are found before any rank runs: the session still works.
    np.testing.assert_allclose(session.run({"input_ids": ids})["logits"],
                               load("gpt2", "logits"), atol=TOLERANCE,
                               rtol=TOLERANCE)


def test_compile_errors_name_the_node(tmp_path):
    with pytest.raises(tp.CompileError, match="not a valid ONNX model|cannot "
                       "parse"):
        tp.compile(b"\x08\x07\x12\xff\xff\xff\xff", 2,
                   output=tmp_path / "a.tpa")
    graph = helper.make_graph(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(tp.CompileError, match="Frobnicate") as caught:
        tp.compile(model.SerializeToString(), 2, output=tmp_path / "b.tpa")
    assert "frob" in str(caught.value)
    with pytest.raises(tp.CompileError, match="unknown --target 'tpu'"):
        tp.compile(os.path.join(MODELS, "cnn", "model.onnx"), 2,
                   target="tpu", output=tmp_path / "c.tpa")
    with pytest.raises(tp.CompileError, match="does-not-exist.onnx"):
        tp.compile(tmp_path / "does-not-exist.onnx", 2,
                   output=tmp_path / "d.tpa")
    assert not any(p.name.endswith(".tpa") for p in tmp_path.iterdir())


def test_compile_warnings_are_python_warnings(tmp_path):
    # GPT-2's vocabulary of 256 on 3 ranks, without padding: replicated,
    # with a warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tp.compile(os.path.join(MODELS, "gpt2", "model.onnx"), 3,
                   padding=False, target="none",
                   input_shapes={"input_ids": [2, 16]},
                   output=tmp_path / "w.tpa")
    assert any("warning" in str(w.message) for w in caught)


def test_manifest_is_the_runtime_reading(gpt2):
    # The runtime's reader, printed by the writer tp-compile used: the
    # file's own text, parsed.
    with open(os.path.join(gpt2.path, "manifest.json")) as f:
        assert gpt2.manifest == json.load(f)
    assert gpt2.manifest["grid"]["tp"] == 2


def test_corrupted_artifact_raises(gpt2, tmp_path):
    import shutil
    copy = tmp_path / "bad.tpa"
    shutil.copytree(gpt2.path, copy)
    with open(copy / "rank-1.safetensors", "r+b") as f:
        f.seek(-1, 2)
        last = f.read(1)
        f.seek(-1, 2)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(tp.TPError, match="rank 1: checksum mismatch"):
        tp.Session(copy)
    with open(copy / "manifest.json", "a") as f:
        f.write(" ")
    with pytest.raises(tp.TPError, match="manifest.json: checksum mismatch"):
        tp.Session(copy)
    # Artifact.manifest reads through the runtime's checks too.
    with pytest.raises(tp.TPError, match="manifest.json: checksum mismatch"):
        tp.Artifact(copy).manifest
    with pytest.raises(tp.TPError, match="not a tp-mlir artifact"):
        tp.Session(tmp_path / "nothing.tpa")


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    kinds = {"F32": np.float32, "I64": np.int64}
    arrays = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        arrays[name] = np.frombuffer(
            data[8 + n + begin:8 + n + end],
            kinds[entry["dtype"]]).reshape(entry["shape"])
    return arrays


def test_export_weights_is_bit_exact(gpt2, tmp_path):
    out = tmp_path / "weights.safetensors"
    gpt2.export_weights(out)
    exported = read_safetensors(out)
    model = onnx.load(os.path.join(MODELS, "gpt2", "model.onnx"))
    initializers = {i.name: numpy_helper.to_array(i)
                    for i in model.graph.initializer}
    assert exported, "no weights exported"
    for name, array in exported.items():
        assert np.array_equal(array, initializers[name]), name
    with pytest.raises(tp.TPError, match="inside the artifact"):
        gpt2.export_weights(os.path.join(gpt2.path, "rank-0.safetensors"))


def test_explain_and_is_model_supported():
    plan = tp.explain(os.path.join(MODELS, "gpt2", "model.onnx"), 2,
                      input_shapes={"input_ids": [2, 16]})
    # The vocabulary-parallel embedding's all-reduce and two per layer (2
    # layers): Megatron-LM's count. The vocabulary-split logits are not
    # gathered: each rank returns its block (tp-split-outputs).
    kinds = [c["kind"] for c in plan["collectives"]]
    assert kinds == ["all_reduce"] * 5, kinds
    assert plan["split_outputs"] == [{"name": "logits", "dim": 2, "size": 256,
                                      "local_type": "tensor<2x16x128xf32>"}]
    assert plan["collectives"][0]["node"] == "/wte/Gather"
    assert plan["collectives"][0]["bytes_sent_per_rank"] == 2 * 16 * 64 * 4
    assert plan["weight_bytes_per_device"] < plan["model_weight_bytes"]
    assert plan["support"] == {"tensor": True, "sequence": True,
                               "pipeline": True}
    stages = tp.explain(os.path.join(MODELS, "gpt2", "model.onnx"), 2,
                        pipeline_stages=2,
                        input_shapes={"input_ids": [2, 16]})
    assert len(stages) == 2
    assert tp.is_model_supported(os.path.join(MODELS, "bert", "model.onnx")) \
        == (True, True, True)
    # The CNN has no row-parallel block to end in a reduce-scatter, and no
    # residual blocks to cut a pipeline between.
    assert tp.is_model_supported(os.path.join(MODELS, "cnn", "model.onnx")) \
        == (True, False, False)
    with pytest.raises(tp.CompileError, match="input_ids"):
        tp.is_model_supported(os.path.join(MODELS, "gpt2", "model.onnx"))


def test_gradients(tmp_path):
    """compile(gradients=True): the loss sum((x w)^2) and its gradient
    2 x^T (x w), computed on 2 ranks; `freeze` leaves a weight out."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    b = rng.standard_normal((4,)).astype(np.float32)
    x = rng.standard_normal((2, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["p"]),
         helper.make_node("Add", ["p", "b"], ["q"]),
         helper.make_node("Mul", ["q", "q"], ["s"]),
         helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    artifact = tp.compile(model.SerializeToString(), 2, gradients=True,
                          output=tmp_path / "g.tpa")
    got = tp.Session(artifact).run({"x": x})
    q = x @ w + b
    np.testing.assert_allclose(got["loss"], (q * q).sum(), rtol=1e-5)
    np.testing.assert_allclose(got["grad.w"], 2 * x.T @ q, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(got["grad.b"], 2 * q.sum(0), rtol=1e-5,
                               atol=1e-5)
    frozen = tp.compile(model.SerializeToString(), 1, gradients=True,
                        freeze="^b$", output=tmp_path / "f.tpa")
    assert "grad.b" not in tp.Session(frozen).run({"x": x})
