"""tp_mlir.compile on TorchScript files (test/models/*/model.pt, traced by
test/models/export_torchscript.py from the weights of model.onnx): the same
torch references as the ONNX versions, at atol = rtol = 1e-5; a TorchScript
input's type given in input_shapes; a refused module raises with the op."""
import os
import shutil

import numpy as np
import pytest

import tp_mlir as tp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "test", "models")
BAD = os.path.join(ROOT, "test", "Target", "TorchScript", "Inputs")
TOLERANCE = 1e-5

# The frontend builds where libtorch is; CI installs it (make deps).
pytestmark = pytest.mark.skipif(
    not (shutil.which("tp-import-torchscript") or os.path.exists(
        os.path.join(ROOT, "build", "bin", "tp-import-torchscript"))),
    reason="tp-mlir built without the TorchScript frontend")


def load(model, name):
    return np.load(os.path.join(MODELS, model, name + ".npy"))


@pytest.mark.parametrize("devices", [1, 2])
def test_bert_from_torchscript(devices, tmp_path):
    artifact = tp.compile(
        os.path.join(MODELS, "bert", "model.pt"), devices,
        input_shapes={"input_ids": [2, 16],
                      "attention_mask": ([2, 16], "i64")},
        output=tmp_path / "m.tpa")
    got = tp.Session(artifact).run({"input_ids": load("bert", "input_ids"),
                                    "attention_mask":
                                        load("bert", "attention_mask")})
    assert sorted(got) == ["output_0", "output_1"]
    np.testing.assert_allclose(got["output_0"],
                               load("bert", "last_hidden_state"),
                               atol=TOLERANCE, rtol=TOLERANCE)
    np.testing.assert_allclose(got["output_1"], load("bert", "pooler_output"),
                               atol=TOLERANCE, rtol=TOLERANCE)


def test_unsupported_op_names_it(tmp_path):
    with pytest.raises(RuntimeError, match=r"aten::sort at .*generate.py:78"):
        tp.compile(os.path.join(BAD, "unsupported.pt"), 2,
                   input_shapes={"x": [2, 4]}, output=tmp_path / "m.tpa")
