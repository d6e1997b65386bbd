"""Session.train_step on an artifact compiled with train=AdamW(...) or
SGD(...): the losses of a small MLP's steps against the same model and
optimizer written in numpy (float64, torch's arithmetic), on 1 and 2 ranks;
save and resume; export_weights(checkpoint=...); and the errors.

Run with the module on the path: PYTHONPATH=build/python pytest
python-bindings/tests (lit's Python/api.test does this).
"""
import numpy as np
import pytest
import onnx
from onnx import TensorProto, helper, numpy_helper

import tp_mlir as tp

from test_api import read_safetensors

TOLERANCE = 1e-4
rng = np.random.default_rng(0)
WEIGHTS = {"w1": (rng.standard_normal((8, 16)) * 0.3).astype(np.float32),
           "w2": (rng.standard_normal((16, 4)) * 0.3).astype(np.float32)}
# One micro-batch per step, each different.
BATCHES = [{"x": rng.standard_normal((4, 8)).astype(np.float32),
            "target": rng.standard_normal((4, 4)).astype(np.float32)}
           for _ in range(6)]


def mlp():
    """loss = mean((relu(x w1) w2 - target)^2), as ONNX."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("Relu", ["h"], ["a"]),
         helper.make_node("MatMul", ["a", "w2"], ["y"]),
         helper.make_node("Sub", ["y", "target"], ["d"]),
         helper.make_node("Mul", ["d", "d"], ["s"]),
         helper.make_node("ReduceMean", ["s"], ["loss"], keepdims=0)],
        "mlp", [helper.make_tensor_value_info("x", f, [4, 8]),
                helper.make_tensor_value_info("target", f, [4, 4])],
        [helper.make_tensor_value_info("loss", f, [])],
        [numpy_helper.from_array(w, name) for name, w in WEIGHTS.items()])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 13)])
    return model.SerializeToString()


def loss_and_grads(w, batch):
    x, target = (batch[k].astype(np.float64) for k in ("x", "target"))
    h = x @ w["w1"]
    a = np.maximum(h, 0)
    d = a @ w["w2"] - target
    dy = 2 * d / d.size
    da = dy @ w["w2"].T
    return (d * d).mean(), {"w1": x.T @ (da * (h > 0)), "w2": a.T @ dy}


class Reference:
    """The optimizers as torch.optim computes them, with
    torch.nn.utils.clip_grad_norm_ first and the micro-batches' gradients
    averaged."""

    def __init__(self, optimizer):
        self.opt = optimizer
        self.w = {k: v.astype(np.float64) for k, v in WEIGHTS.items()}
        self.m = {k: np.zeros_like(v) for k, v in self.w.items()}
        self.v = {k: np.zeros_like(v) for k, v in self.w.items()}
        self.t = 0

    def step(self, batches):
        results = [loss_and_grads(self.w, b) for b in batches]
        loss = np.mean([r[0] for r in results])
        g = {k: np.mean([r[1][k] for r in results], axis=0) for k in self.w}
        norm = np.sqrt(sum((x * x).sum() for x in g.values()))
        if self.opt.clip_norm > 0:
            scale = min(1.0, self.opt.clip_norm / (norm + 1e-6))
            g = {k: x * scale for k, x in g.items()}
        self.t += 1
        lr, wd, t = self.opt.lr, self.opt.weight_decay, self.t
        for k, p in self.w.items():
            if isinstance(self.opt, tp.AdamW):
                b1, b2 = self.opt.betas
                p *= 1 - lr * wd
                self.m[k] = b1 * self.m[k] + (1 - b1) * g[k]
                self.v[k] = b2 * self.v[k] + (1 - b2) * g[k] * g[k]
                p -= lr / (1 - b1 ** t) * self.m[k] / (
                    np.sqrt(self.v[k]) / np.sqrt(1 - b2 ** t) + self.opt.eps)
            else:
                d = g[k] + wd * p
                if self.opt.momentum:
                    d = self.m[k] = d if t == 1 else \
                        self.opt.momentum * self.m[k] + d
                p -= lr * d
        return loss, norm


@pytest.mark.parametrize("devices", [1, 2])
def test_adamw_matches_numpy(devices, tmp_path):
    """5 AdamW steps: every loss and gradient norm within rel 1e-4 of
    numpy's; a checkpoint saved after step 3 resumes in a new session to
    the same step 4, and exports the weights of step 3."""
    optimizer = tp.AdamW(lr=1e-2)
    artifact = tp.compile(mlp(), devices, train=optimizer,
                          output=tmp_path / "m.tpa")
    assert artifact.manifest["training"]["optimizer"] == "adamw"
    session = tp.Session(artifact)
    reference = Reference(optimizer)
    losses = []
    for step, batch in enumerate(BATCHES[:5], 1):
        losses.append(session.train_step(batch))
        want_loss, want_norm = reference.step([batch])
        np.testing.assert_allclose(losses[-1], want_loss, rtol=TOLERANCE)
        figures = session.last_train_step
        assert figures["step"] == session.step == step
        assert figures["loss"] == losses[-1]
        np.testing.assert_allclose(figures["grad_norm"], want_norm,
                                   rtol=TOLERANCE)
        if step == 3:
            session.save(tmp_path / "ckpt")
            trained = {k: v.copy() for k, v in reference.w.items()}

    resumed = tp.Session(artifact)
    resumed.resume(tmp_path / "ckpt")
    assert resumed.step == 3
    assert resumed.train_step(BATCHES[3]) == losses[3]

    artifact.export_weights(tmp_path / "w.safetensors",
                            checkpoint=tmp_path / "ckpt")
    exported = read_safetensors(tmp_path / "w.safetensors")
    assert sorted(exported) == sorted(WEIGHTS)
    for name, weight in exported.items():
        np.testing.assert_allclose(weight, trained[name], rtol=TOLERANCE,
                                   atol=1e-6)
    # The trained ONNX model: the source's initializers, trained.
    # (Compiled from a ModelProto, whose temporary file is gone: the
    # source is given.)
    onnx.save(mlp(), tmp_path / "source.onnx")
    artifact.export_onnx(tmp_path / "trained.onnx",
                         checkpoint=tmp_path / "ckpt",
                         source=tmp_path / "source.onnx")
    model = onnx.load(tmp_path / "trained.onnx")
    initializers = {t.name: numpy_helper.to_array(t)
                    for t in model.graph.initializer}
    for name, weight in trained.items():
        np.testing.assert_allclose(initializers[name], weight,
                                   rtol=TOLERANCE, atol=1e-6)
    # Without the checkpoint: the compiled (initial) weights.
    artifact.export_weights(tmp_path / "w0.safetensors")
    for name, weight in read_safetensors(tmp_path / "w0.safetensors").items():
        assert np.array_equal(weight, WEIGHTS[name]), name


def test_sgd_accumulate_and_clip(tmp_path):
    """SGD with momentum, 2 micro-batches per step (a list), clipped, on 2
    ranks; lr= overrides the compiled rate for one step."""
    optimizer = tp.SGD(0.1, momentum=0.9, weight_decay=0.01, clip_norm=0.5,
                       accumulate=2)
    session = tp.Session(tp.compile(mlp(), 2, train=optimizer,
                                    output=tmp_path / "m.tpa"))
    reference = Reference(optimizer)
    for step in range(3):
        batches = BATCHES[2 * step:2 * step + 2]
        got = session.train_step(batches)
        want_loss, want_norm = reference.step(batches)
        np.testing.assert_allclose(got, want_loss, rtol=TOLERANCE)
        np.testing.assert_allclose(session.last_train_step["grad_norm"],
                                   want_norm, rtol=TOLERANCE)
    session.train_step(BATCHES[:2], lr=0.05)
    assert session.last_train_step["lr"] == 0.05


@pytest.mark.parametrize("zero", [0, 1])
def test_data_parallel(tmp_path, zero):
    """data_parallel=2 on 2 ranks: each replica's micro-batch, the
    gradients averaged over the replicas (zero=1: reduce-scattered, each
    replica updating its half); the step's figures say what the data axis
    moved (each rank's half of w1 and w2, and without ZeRO the loss)."""
    optimizer = tp.AdamW(lr=0.01, clip_norm=0.5)
    session = tp.Session(tp.compile(mlp(), 2, train=optimizer,
                                    data_parallel=2, zero=zero,
                                    output=tmp_path / "dp.tpa"))
    reference = Reference(optimizer)
    for step in range(3):
        batches = BATCHES[2 * step:2 * step + 2]
        got = session.train_step(batches)
        want_loss, want_norm = reference.step(batches)
        np.testing.assert_allclose(got, want_loss, rtol=TOLERANCE)
        np.testing.assert_allclose(session.last_train_step["grad_norm"],
                                   want_norm, rtol=TOLERANCE)
    figures = session.last_train_step
    gradients = 4 * (8 * 16 + 16 * 4) // 2
    if zero:
        # A reduce-scatter, an all-gather, the loss and norm's all-reduce.
        assert (figures["data_collectives"], figures["data_buckets"],
                figures["data_bytes"]) == (3, 1, gradients)
    else:
        assert (figures["data_collectives"], figures["data_buckets"],
                figures["data_bytes"]) == (1, 1, gradients + 4)
    session.save(tmp_path / "ckpt")
    resumed = tp.Session(tmp_path / "dp.tpa")
    resumed.resume(tmp_path / "ckpt")
    batches = BATCHES[:2]
    np.testing.assert_allclose(resumed.train_step(batches),
                               session.train_step(batches), rtol=1e-6)
    with pytest.raises(tp.TPError, match="takes 2 micro-batches.*got 1"):
        session.train_step(BATCHES[0])


def test_training_errors(tmp_path):
    with pytest.raises(TypeError, match="train must be tp_mlir.AdamW"):
        tp.compile(mlp(), 1, train=0.01)
    with pytest.raises(TypeError, match="AdamW: lr must be a number"):
        tp.AdamW(lr="fast")
    with pytest.raises(TypeError, match=r"AdamW: betas must be \(beta1"):
        tp.AdamW(betas=0.9)
    with pytest.raises(TypeError, match="SGD: accumulate must be an int"):
        tp.SGD(0.1, accumulate=1.5)
    # Ranges are the compile's to check, with tp-compile's message.
    with pytest.raises(tp.CompileError, match="--eps positive"):
        tp.compile(mlp(), 1, train=tp.AdamW(eps=0),
                   output=tmp_path / "bad.tpa")

    inference = tp.Session(tp.compile(mlp(), 1, output=tmp_path / "i.tpa"))
    with pytest.raises(tp.TPError, match="was not compiled for training"):
        inference.train_step(BATCHES[0])
    assert inference.step == 0 and inference.last_train_step == {}

    session = tp.Session(tp.compile(mlp(), 2, train=tp.AdamW(),
                                    output=tmp_path / "m.tpa"))
    with pytest.raises(tp.TPError, match="takes 1 micro-batches.*got 2"):
        session.train_step(BATCHES[:2])
    with pytest.raises(tp.TPError, match="input 'x' from train_step()"):
        session.train_step({"x": BATCHES[0]["x"][:2],
                            "target": BATCHES[0]["target"]})
    with pytest.raises(TypeError, match="a dict of arrays or a list"):
        session.train_step(BATCHES[0]["x"])
    nan = dict(BATCHES[0], target=np.full((4, 4), np.nan, np.float32))
    with pytest.raises(tp.TPError, match="step 1: the loss is not finite"):
        session.train_step(nan)
    assert session.step == 0
    with pytest.raises(tp.TPError, match="SHA256SUMS"):
        session.resume(tmp_path / "no-checkpoint")


def test_loss_scaling(tmp_path):
    """loss_scale=1024 (dynamic loss scaling, here in f32, where a power
    of two scales exactly): the same losses and norms as numpy's; a step
    whose gradients are not finite is skipped, changing no weight, and the
    scale halves; the step's figures say so. The trainer feeds the scale:
    a micro-batch may not."""
    optimizer = tp.AdamW(lr=0.01, clip_norm=0.5)
    session = tp.Session(tp.compile(mlp(), 2, train=optimizer,
                                    loss_scale=1024, loss_scale_window=2,
                                    output=tmp_path / "scaled.tpa"))
    reference = Reference(optimizer)
    scales = []
    for step, batch in enumerate(BATCHES[:4]):
        if step == 1:
            nan = dict(batch, target=np.full((4, 4), np.nan, np.float32))
            session.train_step(nan)
            assert session.last_train_step["skipped"]
            scales.append(session.last_train_step["loss_scale"])
        got = session.train_step(batch)
        want_loss, want_norm = reference.step([batch])
        np.testing.assert_allclose(got, want_loss, rtol=TOLERANCE)
        np.testing.assert_allclose(session.last_train_step["grad_norm"],
                                   want_norm, rtol=TOLERANCE)
        assert not session.last_train_step["skipped"]
        scales.append(session.last_train_step["loss_scale"])
    # Halved by the skipped step, doubled after 2 steps without overflow.
    assert scales == [1024, 1024, 512, 512, 1024]
    assert session.step == 5
    with pytest.raises(tp.TPError, match="'loss_scale' is the trainer's own"):
        session.train_step(dict(BATCHES[0],
                                loss_scale=np.array(1, np.float32)))
