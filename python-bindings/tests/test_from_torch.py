"""tp_mlir.from_torch on a transformers model, where torch is installed.

torch lives in Debian's python3 here (python3-torch 1.13), which shares
CPython 3.11's ABI with the interpreter the module is built for; lit's
Python/from-torch.test runs this file with it, transformers from the zoo's
site folder (test/models/hf/.cache/site). The model is a 2-layer GPT-2 from
a config with random weights; the reference is the same module in torch,
at atol = rtol = 1e-5, as for the bundled models.
"""
import numpy as np
import pytest

import tp_mlir as tp

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5


class Logits(torch.nn.Module):
    """GPT-2's logits alone, without the cache it would return."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids, use_cache=False).logits


@pytest.mark.parametrize("devices", [1, 2])
def test_gpt2_from_config(devices, tmp_path):
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4,
                                     vocab_size=128, n_positions=32)
    model = Logits(transformers.GPT2LMHeadModel(config)).eval()
    ids = torch.randint(0, 128, (2, 8))
    with torch.no_grad():
        expected = model(ids).numpy()
    artifact = tp.from_torch(model, ids, devices, input_names=["input_ids"],
                             output_names=["logits"],
                             output=tmp_path / "gpt2.tpa")
    session = tp.Session(artifact)
    assert session.ranks == devices
    assert session.inputs == [("input_ids", "I64", [2, 8])]
    got = session.run({"input_ids": ids.numpy()})["logits"]
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=TOLERANCE)


def test_training_mode_is_refused():
    model = torch.nn.Linear(4, 4).train()
    with pytest.raises(tp.TPError, match="training mode"):
        tp.from_torch(model, torch.zeros(1, 4), 2)
