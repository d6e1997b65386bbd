"""Each differentiation rule of tp-compile --gradients against central
finite differences.

One tiny ONNX model per rule (case), built with onnx.helper (opset 14, 17
for LayerNormalization; float32, small static shapes such as [2,3,4]):
a model input X (fixed random data), one to three float initializers (the
weights whose gradient is checked), the op(s) under test giving Y, then

    loss = ReduceSum(Mul(Y, R))          (loss = Mul(Y, R) when Y is a scalar)

with R a fixed random initializer, frozen (tp-compile --freeze '^R$'; a
Constant node when Y is a scalar: a rank-0 initializer is no weight). Float
constants of the ops (GELU's 0.5, RMSNorm's eps, Pow's 2) are Constant
nodes, integer ones (shapes, axes, pads, indices) int64 initializers; neither
is trained. Weights are drawn away from the ops' kinks and ties (Relu,
LeakyRelu, Abs at 0, Max/Min of equal operands, ReduceMax's top two) by at
least 0.05, far more than the step h.

Each case is compiled with `tp-compile --gradients --freeze '^R$' --devices N
--target cpu` for N = 1 and 2 (two compiles at a time), run with tp-run, and:

  * the loss equals onnxruntime's (float64 model) within 1e-4 * (1 + |loss|);
  * exactly one grad.<weight> output per weight;
  * up to 6 entries per weight (chosen with a fixed seed) equal the central
    difference fd = (L(W + h e_i) - L(W - h e_i)) / 2h, L computed by
    onnxruntime (CPU, graph optimizations disabled) on the same model built
    in float64 from the same float32 values, h = 1e-5:
        |grad - fd| <= 1e-3 + 1e-2 * |fd|
    A case whose float64 model onnxruntime cannot run (an op without a
    double kernel) falls back to the float32 model, h = 1e-2, and
        |grad - fd| <= 2e-3 + 2e-2 * |fd|
    (printed as fd32 instead of fd64): onnxruntime 1.32 has no double Erf
    or LeakyRelu, so gelu-erf and leakyrelu use it;
  * with N = 2, every gradient equals N = 1's over all entries within
    1e-5 + 1e-4 * max|grad at N = 1| (splitting must not change them; many
    of these tiny models do not split, which is fine).

Printed per case and N: the number of gradients and checked entries, the
max relative error max |grad - fd| / max(|fd|, 1e-3) and the max absolute
error, for N > 1 the largest difference from N = 1 and tp-explain's
collectives (none: the compiler did not split the model), then ok or FAIL
with the reasons. A case the compiler rejects prints
its first error line; EXPECTED_REJECTIONS lists the cases expected to be
rejected (with why): those pass when rejected and fail if they compile (so
that the list is kept current). Exit status 1 on any mismatch or unexpected
rejection.

Run with the python3 that has numpy, onnx and onnxruntime:
  python3 utils/reference-run/check_finite_differences.py \\
      --tp-compile build/bin/tp-compile --tp-run build/bin/tp-run
Options: --cases NAME..., --ranks N..., -j JOBS (default 2 compiles at once).
86 compiles take 100-170 s on 2 cores; with tp-compile's build cache
(TP_BUILD_CACHE, which lit sets) a rerun takes seconds.
"""

import argparse
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

FD64 = dict(h=1e-5, atol=1e-3, rtol=1e-2)
FD32 = dict(h=1e-2, atol=2e-3, rtol=2e-2)
LOSS_TOL = 1e-4
SPLIT_ATOL, SPLIT_RTOL = 1e-5, 1e-4
ENTRIES = 6
MARGIN = 0.05  # distance of weights from kinks and ties

# Cases the compiler is expected to reject: name -> reason.
EXPECTED_REJECTIONS = {}


class Builder:
    """Builds one case's graph for one float type. The random data depend
    only on the case name, so the float32 and float64 builds hold the same
    values (drawn in float32)."""

    def __init__(self, name, dtype):
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))
        self.dtype = dtype
        self.elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.nodes, self.inputs, self.weights, self.consts = [], {}, {}, []
        self.feeds = {}
        self.opset = 14
        self.count = 0

    def rand(self, shape, low=None, high=None):
        if low is None:
            a = self.rng.standard_normal(shape)
        else:
            a = self.rng.uniform(low, high, shape)
        return a.astype(np.float32)

    def x(self, shape=(2, 3, 4), low=None, high=None, name="X"):
        """A float model input with fixed random data."""
        return self.input(name, self.rand(shape, low, high))

    def input(self, name, value):
        self.feeds[name] = value
        self.inputs[name] = value
        return name

    def weight(self, name, value):
        self.weights[name] = np.asarray(value, np.float32)
        return name

    def const_f(self, value):
        """A float scalar as a Constant node (not trained)."""
        out = self.fresh("c")
        self.nodes.append(helper.make_node(
            "Constant", [], [out], value=numpy_helper.from_array(
                np.array(value, self.dtype), out)))
        return out

    def const_i(self, values):
        """An int64 initializer (shapes, axes, indices)."""
        out = self.fresh("i")
        self.consts.append(numpy_helper.from_array(
            np.array(values, np.int64), out))
        return out

    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def op(self, op_type, inputs, out=None, **attrs):
        out = out or self.fresh("t")
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def graph_value(self, name, value):
        elem = self.elem if value.dtype == np.float32 else \
            helper.np_dtype_to_tensor_dtype(value.dtype)
        return helper.make_tensor_value_info(name, elem, list(value.shape))

    def model(self, y, weights_as_inputs):
        """The model with loss = ReduceSum(Mul(y, R)); R is drawn here,
        its shape found by shape inference."""
        probe = helper.make_model(helper.make_graph(
            self.nodes, "probe",
            [self.graph_value(n, v) for n, v in
             list(self.inputs.items()) + list(self.weights.items())],
            [helper.make_tensor_value_info(y, self.elem, None)],
            self.consts), opset_imports=[helper.make_opsetid("", self.opset)])
        probe.ir_version = 8
        inferred = onnx.shape_inference.infer_shapes(probe, strict_mode=True)
        dims = inferred.graph.output[0].type.tensor_type.shape.dim
        shape = [d.dim_value for d in dims]
        assert all(s > 0 for s in shape), f"unknown shape of {y}: {shape}"
        r = self.rand(shape)
        nodes = list(self.nodes)
        r = numpy_helper.from_array(r.astype(self.dtype), "R")
        inits = []
        self.has_r = bool(shape)
        if shape:
            inits.append(r)
            nodes.append(helper.make_node("Mul", [y, "R"], ["yr"]))
            nodes.append(helper.make_node("ReduceSum", ["yr"], ["loss"],
                                          keepdims=0))
        else:
            # A rank-0 initializer is a constant to tp-compile, not a
            # weight (--freeze '^R$' would match nothing): a Constant node.
            nodes.append(helper.make_node("Constant", [], ["R"], value=r))
            nodes.append(helper.make_node("Mul", [y, "R"], ["loss"]))
        cast = {n: v.astype(self.dtype) for n, v in self.weights.items()}
        inputs = [self.graph_value(n, v) for n, v in self.inputs.items()]
        if weights_as_inputs:
            inputs += [self.graph_value(n, v) for n, v in self.weights.items()]
        else:
            inits += [numpy_helper.from_array(v, n) for n, v in cast.items()]
        graph = helper.make_graph(
            nodes, "case", inputs,
            [helper.make_tensor_value_info("loss", self.elem, [])],
            inits + self.consts)
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def away(pre, w, margin=MARGIN):
    """w shifted so that the kink input pre(w) (= p + w) is at least margin
    from 0."""
    p = pre
    shift = np.where(np.abs(p) < margin, np.sign(p + 1e-30) * margin - p, 0)
    return (w + shift).astype(np.float32)


def unary(op_type, low=None, high=None, kink=False, **attrs):
    """op(X + W), W of X's shape [2,3,4]."""
    def build(b):
        x = b.x(low=low, high=high)
        w = b.rand((2, 3, 4), low, high)
        if kink:
            w = away(b.feeds[x] + w, w)
        b.weight("W", w)
        return b.op(op_type, [b.op("Add", [x, "W"])], **attrs)
    return build


def binary(op_type, w_first=False, w_low=None):
    """X op W, W of shape [4] broadcast against X [2,3,4]."""
    def build(b):
        x = b.x()
        w = b.rand((4,)) if w_low is None else \
            b.rand((4,), w_low, 2 * w_low) * np.array([1, -1, 1, -1],
                                                      np.float32)
        b.weight("W", w)
        return b.op(op_type, ["W", x] if w_first else [x, "W"])
    return build


def case_matmul(b):
    b.weight("W", b.rand((4, 6)))
    return b.op("MatMul", [b.x(), "W"])


def case_gemm(b):
    b.weight("W", b.rand((8, 4)))
    b.weight("C", b.rand((8,)))
    return b.op("Gemm", [b.x((6, 4)), "W", "C"], transB=1)


def case_gemm_scaled(b):
    b.weight("W", b.rand((4, 8)))
    b.weight("C", b.rand((1, 8)))
    return b.op("Gemm", [b.x((4, 6)), "W", "C"], transA=1, alpha=0.5,
                beta=2.0)


def case_pow_xw(b):
    b.weight("W", b.rand((2, 3, 4), -1.5, 1.5))
    return b.op("Pow", [b.x(low=0.5, high=2.0), "W"])


def case_pow_w2(b):
    b.weight("W", b.rand((2, 3, 4)))
    return b.op("Mul", [b.op("Pow", ["W", b.const_f(2.0)]), b.x()])


def case_gelu_erf(b):
    x = b.x()
    b.weight("W", b.rand((2, 3, 4)))
    t = b.op("Add", [x, "W"])
    e = b.op("Erf", [b.op("Div", [t, b.const_f(np.sqrt(2.0))])])
    return b.op("Mul", [b.op("Mul", [t, b.const_f(0.5)]),
                        b.op("Add", [e, b.const_f(1.0)])])


def minmax(op_type):
    """op(X + W1, W2), W1 and W2 [2,3,4], at least MARGIN apart."""
    def build(b):
        x = b.x()
        w1 = b.weight("W1", b.rand((2, 3, 4)))
        w2 = b.rand((2, 3, 4))
        b.weight("W2", away(w2 - b.feeds[x] - b.weights[w1], w2))
        return b.op(op_type, [b.op("Add", [x, w1]), "W2"])
    return build


def case_where(b):
    x = b.x()
    cond = b.op("Greater", [x, b.const_f(0.0)])
    b.weight("W1", b.rand((2, 3, 4)))
    b.weight("W2", b.rand((4,)))
    return b.op("Where", [cond, "W1", "W2"])


def case_layernorm(b):
    b.opset = 17
    x = b.x()
    b.weight("W", b.rand((2, 3, 4)))
    b.weight("scale", b.rand((4,), 0.5, 1.5))
    b.weight("bias", b.rand((4,)))
    return b.op("LayerNormalization", [b.op("Add", [x, "W"]), "scale", "bias"],
                axis=-1, epsilon=1e-5)


def case_rmsnorm(b):
    x = b.x()
    b.weight("W", b.rand((2, 3, 4)))
    b.weight("g", b.rand((4,), 0.5, 1.5))
    t = b.op("Add", [x, "W"])
    ms = b.op("ReduceMean", [b.op("Pow", [t, b.const_f(2.0)])], axes=[-1],
              keepdims=1)
    r = b.op("Sqrt", [b.op("Add", [ms, b.const_f(1e-6)])])
    return b.op("Mul", [b.op("Div", [t, r]), "g"])


def shaped(fn, x_shape=(2, 3, 4)):
    """fn(b, X + W), W of X's shape."""
    def build(b):
        x = b.x(x_shape)
        b.weight("W", b.rand(x_shape))
        return fn(b, b.op("Add", [x, "W"]))
    return build


def case_reducemax(b):
    x = b.x()
    w = b.rand((2, 3, 4))
    # The top entry of each row at least MARGIN above the second.
    t = b.feeds[x] + w
    top = np.argmax(t, -1)
    srt = np.sort(t, -1)
    gap = srt[..., -1] - srt[..., -2]
    bump = np.where(gap < MARGIN, MARGIN - gap + 0.01, 0)
    np.put_along_axis(w, top[..., None],
                      np.take_along_axis(w, top[..., None], -1) +
                      bump[..., None], -1)
    b.weight("W", w.astype(np.float32))
    return b.op("ReduceMax", [b.op("Add", [x, "W"])], axes=[-1], keepdims=0)


def case_concat(b):
    b.weight("W", b.rand((2, 3, 2)))
    return b.op("Concat", ["W", b.x()], axis=2)


def case_gather_const(b):
    b.weight("W", b.rand((5, 4)))
    g = b.op("Gather", ["W", b.const_i([[0, 2], [4, 2], [1, 0]])], axis=0)
    return b.op("Add", [g, b.x((3, 2, 4))])


def case_embedding(b):
    b.weight("W", b.rand((5, 4)))
    ids = b.input("ids", np.array([[1, 3, 1], [4, 0, 3]], np.int64))
    return b.op("Add", [b.op("Gather", ["W", ids], axis=0), b.x()])


def case_expand(b):
    b.weight("W", b.rand((3, 1)))
    e = b.op("Expand", ["W", b.const_i([2, 3, 4])])
    return b.op("Add", [e, b.x()])


def case_softmax_ce(b):
    b.weight("W", b.rand((4, 6)))
    scores = b.op("MatMul", [b.x((6, 4)), "W"])
    labels = b.input("labels", np.array([2, 0, -100, 5, 1, 2], np.int64))
    return b.op("SoftmaxCrossEntropyLoss", [scores, labels],
                ignore_index=-100, reduction="mean")


def case_nll(b):
    b.weight("W", b.rand((4, 6)))
    scores = b.op("MatMul", [b.x((6, 4)), "W"])
    logp = b.op("LogSoftmax", [scores], axis=1)
    labels = b.input("labels", np.array([2, 0, 3, 5, 1, 2], np.int64))
    return b.op("NegativeLogLikelihoodLoss", [logp, labels], reduction="sum")


def case_einsum(b):
    b.weight("W", b.rand((4, 6)))
    return b.op("Einsum", [b.x(), "W"], equation="bij,jk->bik")


CASES = {
    "matmul": case_matmul,
    "gemm": case_gemm,
    "gemm-scaled": case_gemm_scaled,
    "add": binary("Add"),
    "sub": binary("Sub", w_first=True),
    "mul": binary("Mul", w_first=True),
    "div": binary("Div", w_low=0.5),
    "pow-xw": case_pow_xw,
    "pow-w2": case_pow_w2,
    "sqrt": unary("Sqrt", 0.5, 2.0),
    "exp": unary("Exp"),
    "log": unary("Log", 0.5, 2.0),
    "tanh": unary("Tanh"),
    "gelu-erf": case_gelu_erf,
    "sigmoid": unary("Sigmoid"),
    "relu": unary("Relu", kink=True),
    "leakyrelu": unary("LeakyRelu", kink=True, alpha=0.1),
    "abs": unary("Abs", kink=True),
    "max": minmax("Max"),
    "min": minmax("Min"),
    "where": case_where,
    "softmax": unary("Softmax", axis=-1),
    "logsoftmax": unary("LogSoftmax", axis=-1),
    "layernorm": case_layernorm,
    "rmsnorm": case_rmsnorm,
    "reducesum": shaped(lambda b, t: b.op(
        "ReduceSum", [t, b.const_i([1])], keepdims=0)),
    "reducemean": shaped(lambda b, t: b.op(
        "ReduceMean", [t], axes=[1], keepdims=1)),
    "reducemax": case_reducemax,
    "transpose": shaped(lambda b, t: b.op("Transpose", [t], perm=[2, 0, 1])),
    "reshape": shaped(lambda b, t: b.op("Reshape", [t, b.const_i([3, 8])])),
    "flatten": shaped(lambda b, t: b.op("Flatten", [t], axis=2)),
    "squeeze": shaped(lambda b, t: b.op("Squeeze", [t, b.const_i([1])]),
                      (2, 1, 3, 4)),
    "unsqueeze": shaped(lambda b, t: b.op("Unsqueeze", [t, b.const_i([1])])),
    "slice": shaped(lambda b, t: b.op(
        "Slice", [t, b.const_i([1, 1]), b.const_i([3, 3]),
                  b.const_i([1, 2])])),
    "slice-step2": shaped(lambda b, t: b.op(
        "Slice", [t, b.const_i([0]), b.const_i([4]), b.const_i([2]),
                  b.const_i([2])])),
    "concat": case_concat,
    "pad": shaped(lambda b, t: b.op(
        "Pad", [t, b.const_i([0, 1, 0, 0, 0, 2]), b.const_f(0.5)],
        mode="constant")),
    "gather-const": case_gather_const,
    "embedding": case_embedding,
    "expand": case_expand,
    "softmax-ce": case_softmax_ce,
    "nll": case_nll,
    "einsum": case_einsum,
}


def build(name, dtype, weights_as_inputs):
    b = Builder(name, dtype)
    y = CASES[name](b)
    return b, b.model(y, weights_as_inputs)


def session(model):
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def reference(name):
    """The loss at W and the central differences of up to ENTRIES entries
    of each weight: (loss, {weight: [(flat index, fd)]}, fd params, label)."""
    for dtype, params, label in ((np.float64, FD64, "fd64"),
                                 (np.float32, FD32, "fd32")):
        b, model = build(name, dtype, weights_as_inputs=True)
        try:
            sess = session(model)
            feeds = {n: (v.astype(dtype) if v.dtype == np.float32 else v)
                     for n, v in b.feeds.items()}
            weights = {n: v.astype(dtype) for n, v in b.weights.items()}

            def loss(ws):
                return float(sess.run(["loss"], {**feeds, **ws})[0])
            base = loss(weights)
            break
        except (ort.capi.onnxruntime_pybind11_state.NotImplemented,
                ort.capi.onnxruntime_pybind11_state.Fail) as e:
            if dtype != np.float64:
                raise
            fallback = str(e).splitlines()[0]
    else:
        raise AssertionError("unreachable")
    pick = np.random.default_rng(zlib.crc32(name.encode()) + 1)
    h = params["h"]
    fds = {}
    for wname, w in weights.items():
        idx = pick.choice(w.size, min(ENTRIES, w.size), replace=False)
        fds[wname] = []
        for i in sorted(idx):
            plus, minus = w.copy(), w.copy()
            plus.flat[i] += h
            minus.flat[i] -= h
            fd = (loss({**weights, wname: plus}) -
                  loss({**weights, wname: minus})) / (2 * h)
            fds[wname].append((int(i), fd))
    return base, fds, params, label


def first_error(text, folder):
    lines = [l.replace(folder + os.sep, "") for l in text.splitlines()
             if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l.strip()
    return lines[0].strip() if lines else "(no output)"


def compile_and_run(name, ranks, args, folder):
    try:
        return compile_and_run_or_raise(name, ranks, args, folder)
    except OSError as e:  # a tool missing or not executable
        return "could not run", str(e)


def compile_and_run_or_raise(name, ranks, args, folder):
    """Compiles and runs one case: ('ok', ({output: array}, tp-explain's
    collectives line)) or ('rejected' | 'run failed', first error line)."""
    b, model = build(name, np.float32, weights_as_inputs=False)
    base = os.path.join(folder, f"{name}-{ranks}")
    os.makedirs(base)
    path = os.path.join(base, "model.onnx")
    onnx.save(model, path)
    artifact = os.path.join(base, "model.tpa")
    proc = subprocess.run(
        [args.tp_compile, path, "--gradients", "--devices", str(ranks),
         "--target", "cpu", "-o", artifact, "--explain"] +
        (["--freeze", "^R$"] if b.has_r else []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        return "rejected", first_error(proc.stdout, base)
    # tp-explain's summary: "collectives: none; ..." when nothing is split.
    plan = next((l.split(";")[0] for l in proc.stdout.splitlines()
                 if l.startswith("collectives:")), "collectives: ?")
    inputs = []
    for n, v in b.feeds.items():
        f = os.path.join(base, f"{n}.npy")
        np.save(f, v)
        inputs += ["--input", f"{n}={f}"]
    out = os.path.join(base, "out")
    proc = subprocess.run([args.tp_run, artifact, *inputs,
                           "--output-dir", out],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    if proc.returncode != 0:
        return "run failed", first_error(proc.stdout, base)
    return "ok", ({f[:-4]: np.load(os.path.join(out, f))
                   for f in os.listdir(out) if f.endswith(".npy")}, plan)


def check(name, ranks, result, ref, tp1):
    """One line for the case at `ranks`; returns (line, passed, grads)."""
    status, payload = result
    head = f"{name} tp={ranks}:"
    if status != "ok":
        if status == "rejected" and name in EXPECTED_REJECTIONS:
            return (f"{head} rejected as expected "
                    f"({EXPECTED_REJECTIONS[name]}): {payload}", True, None)
        return f"{head} {status}: {payload} FAIL", False, None
    loss, fds, params, label = ref
    payload, plan = payload
    problems = []
    if name in EXPECTED_REJECTIONS:
        # Fails, so that EXPECTED_REJECTIONS stays current.
        problems.append("compiles now: remove it from EXPECTED_REJECTIONS")
    got_loss = float(payload["loss"])
    if abs(got_loss - loss) > LOSS_TOL * (1 + abs(loss)):
        problems.append(f"loss {got_loss:.7g} != onnxruntime's {loss:.7g}")
    grads = {k[len("grad."):]: v for k, v in payload.items()
             if k.startswith("grad.")}
    if sorted(grads) != sorted(fds):
        problems.append(f"gradients {sorted(grads)}, want {sorted(fds)}")
    worst_rel = worst_abs = 0.0
    entries = 0
    for wname, pairs in fds.items():
        if wname not in grads:
            continue
        g = grads[wname]
        for i, fd in pairs:
            got = float(g.flat[i])
            diff = abs(got - fd)
            entries += 1
            worst_abs = max(worst_abs, diff)
            worst_rel = max(worst_rel, diff / max(abs(fd), 1e-3))
            if not np.isfinite(got) or \
                    diff > params["atol"] + params["rtol"] * abs(fd):
                problems.append(f"grad.{wname}[{i}] {got:.6g} != fd "
                                f"{fd:.6g}")
    split = ""
    if tp1 is not None:
        worst_split = 0.0
        for wname, g in grads.items():
            if wname not in tp1:
                continue
            g1 = tp1[wname]
            if g.shape != g1.shape:
                problems.append(f"grad.{wname} shape {g.shape} at tp=1 "
                                f"{g1.shape}")
                continue
            d = float(np.abs(g - g1).max()) if g.size else 0.0
            worst_split = max(worst_split, d)
            if not d <= SPLIT_ATOL + SPLIT_RTOL * float(np.abs(g1).max()):
                problems.append(f"grad.{wname} differs from tp=1 by {d:.3g}")
        split = f", vs tp=1 {worst_split:.2g} ({plan})"
    line = (f"{head} {len(grads)} gradients, {entries} entries vs {label}, "
            f"max rel err {worst_rel:.2g}, max abs err {worst_abs:.2g}{split}")
    line += " ok" if not problems else " FAIL: " + "; ".join(problems[:4])
    return line, not problems, grads


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--ranks", nargs="*", type=int, default=[1, 2])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    args = parser.parse_args()
    start = time.time()
    refs = {name: reference(name) for name in args.cases}
    passed = expected = 0
    with tempfile.TemporaryDirectory() as folder, \
            concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {(name, ranks): pool.submit(compile_and_run, name, ranks,
                                              args, folder)
                   for name in args.cases for ranks in args.ranks}
        failed = 0
        for name in args.cases:
            tp1 = None
            for ranks in args.ranks:
                line, good, grads = check(name, ranks,
                                          futures[(name, ranks)].result(),
                                          refs[name], tp1)
                print(line, flush=True)
                if ranks == args.ranks[0]:
                    tp1 = grads
                if not good:
                    failed += 1
                elif grads is None:
                    expected += 1
                else:
                    passed += 1
    total = len(args.cases) * len(args.ranks)
    print(f"finite differences: {total} checks, {passed} ok, {expected} "
          f"rejected as expected, {failed} failed "
          f"({time.time() - start:.0f} s)")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
