"""tp-mlir from Python: compile an ONNX model for N devices, run it.

    import numpy as np, tp_mlir as tp
    artifact = tp.compile("model.onnx", 2, input_shapes={"input_ids": [2, 16]})
    logits = tp.Session(artifact).run({"input_ids": ids})["logits"]

`compile` is tp-compile (each of its flags a keyword: --max-seq is
max_seq), `Session` is tp-run's runtime (one process, one thread per rank;
`Session.train_step` is tp-run --train, on an artifact compiled with
train=AdamW(...) or SGD(...)) and `Artifact.export_weights` is
tp-export-weights; they
share the C++ code of the command-line tools, so they accept and refuse the
same things with the same messages (docs/python.md).
"""

import inspect
import json
import numbers
import os
import tempfile
import warnings

import numpy as np

from . import _tp_mlir
from ._tp_mlir import CompileError, TPError

__all__ = ["AdamW", "Artifact", "CompileError", "SGD", "Session", "TPError",
           "compile", "explain", "from_torch", "is_model_supported"]


class Artifact:
    """A compiled artifact folder (what tp-compile -o writes)."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(os.path.join(self.path, "manifest.json")):
            raise TPError(f"'{self.path}' is not a tp-mlir artifact "
                          "(no manifest.json)")

    @property
    def manifest(self):
        """manifest.json as a dict, as the runtime reads it: checked against
        the artifact's SHA256SUMS and the manifest schema first (TPError
        otherwise)."""
        return json.loads(_tp_mlir.read_manifest(self.path))

    def export_weights(self, path, checkpoint=None):
        """Writes the unsharded weights to `path` (safetensors), bit-exact
        with the model's initializers, as tp-export-weights does; with
        `checkpoint` (a folder Session.save wrote for this artifact), the
        trained weights it holds (tp-export-weights --checkpoint)."""
        _tp_mlir.export_weights(self.path, os.fspath(path),
                                os.fspath(checkpoint) if checkpoint else "")

    def export_onnx(self, path, checkpoint=None, source=None):
        """Writes the ONNX model the artifact was compiled from (or
        `source`) to `path` with its weight initializers replaced by the
        artifact's unsplit weights, or by the trained ones of `checkpoint`:
        tp-export-weights -o NAME.onnx [--onnx-model SOURCE]. Weights the
        source kept as external data go to `path + ".data"`."""
        _tp_mlir.export_onnx(self.path, os.fspath(path),
                             os.fspath(checkpoint) if checkpoint else "",
                             os.fspath(source) if source else "")

    def __fspath__(self):
        return self.path

    def __repr__(self):
        return f"Artifact({self.path!r})"


def _number(owner, name, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a number, got "
                        f"{type(value).__name__}")
    return float(value)


class _Optimizer:
    """What compile(train=...) fills tp-compile's --train flags from: each
    of _FIELDS is the keyword of the flag of the same name (--weight-decay:
    weight_decay). The compile checks the values' ranges (CompileError)."""

    def __init__(self, lr, weight_decay, clip_norm, accumulate):
        owner = type(self).__name__
        self.lr = _number(owner, "lr", lr)
        self.weight_decay = _number(owner, "weight_decay", weight_decay)
        self.clip_norm = _number(owner, "clip_norm", clip_norm)
        if isinstance(accumulate, bool) or not isinstance(accumulate,
                                                          numbers.Integral):
            raise TypeError(f"{owner}: accumulate must be an int, got "
                            f"{type(accumulate).__name__}")
        self.accumulate = int(accumulate)

    def _keywords(self):
        """compile()'s keywords for this optimizer: train and _FIELDS."""
        keywords = {name: getattr(self, name) for name in self._FIELDS}
        keywords["train"] = type(self).__name__.lower()
        return keywords

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}"
                           for name in self._FIELDS)
        return f"{type(self).__name__}({fields})"


class AdamW(_Optimizer):
    """torch.optim.AdamW for compile(train=...) (tp-compile --train adamw):
    decoupled weight decay; gradients clipped to the global norm
    `clip_norm` first (0: none), as torch.nn.utils.clip_grad_norm_; each
    step averages the gradients of `accumulate` micro-batches."""

    _FIELDS = ("lr", "betas", "eps", "weight_decay", "clip_norm",
               "accumulate")

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                 weight_decay=0.01, clip_norm=0.0, accumulate=1):
        super().__init__(lr, weight_decay, clip_norm, accumulate)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise TypeError(f"AdamW: betas must be (beta1, beta2), got "
                            f"{betas!r}")
        self.betas = tuple(_number("AdamW", "betas", b) for b in betas)
        self.eps = _number("AdamW", "eps", eps)


class SGD(_Optimizer):
    """torch.optim.SGD for compile(train=...) (tp-compile --train sgd):
    `momentum` without dampening, weight decay added to the gradient;
    `clip_norm` and `accumulate` as AdamW's."""

    _FIELDS = ("lr", "momentum", "weight_decay", "clip_norm", "accumulate")

    def __init__(self, lr, momentum=0.0, weight_decay=0.0, clip_norm=0.0,
                 accumulate=1):
        super().__init__(lr, weight_decay, clip_norm, accumulate)
        self.momentum = _number("SGD", "momentum", momentum)


def _shape_text(dims):
    """[2, 16] -> "2x16"; ([2, 16], "i64") -> "2x16:i64" (an input's type,
    which a TorchScript module does not record); a string as tp-compile
    --input-shape takes it ("2x16:i64") passes as it is."""
    if isinstance(dims, str):
        return dims
    if (isinstance(dims, tuple) and len(dims) == 2
            and isinstance(dims[1], str)):
        return _shape_text(dims[0]) + ":" + dims[1]
    return "x".join(str(int(d)) for d in dims)


# tp-compile's options (include/tp/Driver/CompileOptions.def), one dict
# each: flag, keyword, kind, help, default and choices. Every flag is a
# keyword of compile; the table is the one tp-compile's flags are made from.
_OPTIONS = tuple(_tp_mlir.compile_options())
_KEYWORDS = {option["keyword"]: option for option in _OPTIONS}
# compile's arguments, not keywords of **options.
_ARGUMENTS = ("model", "devices", "output")
# Where compile's default is not tp-compile's.
_DEFAULTS = {"target": "cpu"}


def _compile_options(model, devices, output, scratch, keywords):
    """The _tp_mlir.CompileOptions of compile(model, devices, output=output,
    **keywords). Each keyword is the flag of its name, as tp-compile takes
    it (None: not given); the Python forms are turned into the flag's value
    here: model bytes and a config dict into files in `scratch`,
    input_shapes {name: dims} into name=DIMS, an optimizer into --train and
    its flags."""
    for keyword in keywords:
        if keyword not in _KEYWORDS or keyword in _ARGUMENTS:
            raise TypeError(f"compile() got an unexpected keyword argument "
                            f"'{keyword}'")
    keywords = dict(keywords)
    train = keywords.get("train")
    if isinstance(train, _Optimizer):
        for name, value in train._keywords().items():
            if name != "train" and keywords.get(name) is not None:
                raise TypeError(f"{name} is given by train="
                                f"{type(train).__name__}(...); give it there")
            keywords[name] = value
    elif train is not None and not isinstance(train, str):
        raise TypeError(f"train must be tp_mlir.AdamW(...) or "
                        f"tp_mlir.SGD(...) (or 'adamw' or 'sgd', with "
                        f"lr=... as keywords), got {type(train).__name__}")
    config = keywords.get("config")
    if isinstance(config, dict):
        keywords["config"] = os.path.join(scratch, "config.json")
        with open(keywords["config"], "w") as f:
            json.dump(config, f)
    if config not in (None, "") and keywords.get("strategy") in (None,
                                                                 "auto"):
        keywords["strategy"] = "config"
    shapes = keywords.get("input_shapes")
    if isinstance(shapes, dict):
        keywords["input_shapes"] = [f"{name}={_shape_text(dims)}"
                                    for name, dims in shapes.items()]

    options = _tp_mlir.CompileOptions()
    if isinstance(model, (bytes, bytearray, memoryview)):
        path = os.path.join(scratch, "model.onnx")
        with open(path, "wb") as f:
            f.write(model)
        model = path
    options.model = model
    options.devices = devices
    options.write_artifact = output is not None
    options.output = output
    for keyword, value in keywords.items():
        setattr(options, keyword, value)
    return options


def _run_compile(model, devices, output, progress=None, explain_json="",
                 **keywords):
    with tempfile.TemporaryDirectory(prefix="tp_mlir-") as scratch:
        options = _compile_options(model, devices, output, scratch, keywords)
        options.explain_json = explain_json
        for line in _tp_mlir.compile(options, progress):
            warnings.warn(line, stacklevel=3)


def compile(model, devices, *, target="cpu", output=None, progress=None,
            **options):
    """Compiles `model` (a path, or the bytes of an ONNX model) for
    `devices` tensor-parallel ranks per pipeline stage, as tp-compile does.
    Every flag of tp-compile is a keyword, its name with '-' as '_'
    (--max-seq: max_seq; -o is output, --pp pipeline_stages and
    --input-shape input_shapes); None leaves one at its default. They are
    listed below.

    target: "cpu" by default (tp-compile's default is "none").
    output: the artifact folder to write; by default a new temporary
    folder.
    input_shapes: {"input_ids": [2, 16]} for inputs with dynamic dims (every
        input of a TorchScript module); ([2, 16], "i64") also gives the
        type where the model does not record it (TorchScript). A list of
        "name=DIMS" strings, as --input-shape takes them, also does.
    config: the --strategy=config rules, a path or a dict (implies
    strategy="config").
    train: AdamW(...) or SGD(...): an artifact for Session.train_step, whose
    steps update the weights in place with that optimizer (tp-compile
    --train and the optimizer's flags; implies gradients; target "cpu",
    f32). "adamw" or "sgd" with lr=, betas=, ... as keywords is the same.
    Warnings (weights left whole, padding) are issued with `warnings.warn`;
    errors raise CompileError with every diagnostic, naming the model's
    nodes.
    progress: called as progress(done, total), in bytes, while the weight
    shards are written (the long part of a big model's compile). Ctrl-C
    interrupts the compile between its stages and between chunks of
    weights: KeyboardInterrupt is raised, as is any exception progress
    raises, and no artifact is left at `output` (one already there stays as
    it was).
    """
    if output is None:
        output = os.path.join(tempfile.mkdtemp(prefix="tp_mlir-"), "model.tpa")
    _run_compile(model, devices, output, progress, target=target, **options)
    return Artifact(output)


def _describe_options():
    """compile's signature and the list of its keywords in its docstring,
    from the option table."""
    def default(option):
        value = _DEFAULTS.get(option["keyword"], option["default"])
        return None if value in ("", []) else value

    kinds = inspect.Parameter
    parameters = [kinds("model", kinds.POSITIONAL_OR_KEYWORD),
                  kinds("devices", kinds.POSITIONAL_OR_KEYWORD)]
    lines = ["", "    Options (tp-compile's flags):"]
    for option in _OPTIONS:
        keyword = option["keyword"]
        if keyword not in ("model", "devices"):
            parameters.append(kinds(keyword, kinds.KEYWORD_ONLY,
                                    default=default(option)))
        flag = option["flag"]
        flag = ("-" if len(flag) == 1 else "--") + flag if flag else "model"
        lines.append(f"      {keyword} ({flag}): {option['help']}")
    parameters.append(kinds("progress", kinds.KEYWORD_ONLY, default=None))
    compile.__signature__ = inspect.Signature(parameters)
    compile.__doc__ += "\n".join(lines) + "\n"


_describe_options()


def explain(model, devices, *, pipeline_stages=1, sequence_parallel=False,
            strategy="auto", config=None, input_shapes=None, padding=True):
    """The plan tp-compile would make, as data (tp-explain's JSON): per
    weight its role, block, local type and bytes (and slice and padding);
    per collective its kind, node, block and the bytes each rank sends; the
    contractions left replicated and why; weight and activation bytes per
    device; and the (tensor, sequence, pipeline) support triple. A dict; a
    list of one dict per stage function when pipeline_stages > 1. Nothing is
    written."""
    with tempfile.TemporaryDirectory(prefix="tp_mlir-") as scratch:
        report = os.path.join(scratch, "explain.json")
        _run_compile(model, devices, None, explain_json=report,
                     target="none", pipeline_stages=pipeline_stages,
                     sequence_parallel=sequence_parallel, strategy=strategy,
                     config=config, input_shapes=input_shapes,
                     padding=padding)
        with open(report) as f:
            text = f.read()
    decoder, plans, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        plan, end = decoder.raw_decode(text, at)
        plans.append(plan)
        at = end
        while at < len(text) and text[at].isspace():
            at += 1
    return plans if int(pipeline_stages) > 1 else plans[0]


def is_model_supported(model, input_shapes=None):
    """(tensor, sequence, pipeline): whether tensor, sequence and pipeline
    parallelism apply to `model`, as optimum-neuron's is_model_supported
    answers, found by planning it for 2 devices (explain's "support")."""
    support = explain(model, 2, input_shapes=input_shapes)["support"]
    return (support["tensor"], support["sequence"], support["pipeline"])


def from_torch(module, example_inputs, devices, *, input_names=None,
               output_names=None, opset=17, **compile_options):
    """Exports `module` (a torch.nn.Module, in eval mode) with
    torch.onnx.export on `example_inputs` (a tensor or a tuple of them) and
    compiles the export for `devices` ranks with `compile(...,
    **compile_options)`. Input names default to input_0, input_1, ... and
    output names to output_0, ...; the export's shapes are those of the
    example inputs, so no input_shapes are needed. Needs torch."""
    import torch

    if module.training:
        raise TPError("from_torch: the module is in training mode; call "
                      ".eval() first (dropout and batch norm would be "
                      "exported as training ops)")
    if not isinstance(example_inputs, (tuple, list)):
        example_inputs = (example_inputs,)
    example_inputs = tuple(example_inputs)
    input_names = list(input_names or
                       [f"input_{i}" for i in range(len(example_inputs))])
    with tempfile.TemporaryDirectory(prefix="tp_mlir-") as scratch:
        path = os.path.join(scratch, "model.onnx")
        with torch.no_grad():
            outputs = module(*example_inputs)
        count = len(outputs) if isinstance(outputs, (tuple, list)) else 1
        output_names = list(output_names or
                            [f"output_{i}" for i in range(count)])
        with torch.no_grad():
            torch.onnx.export(module, example_inputs, path,
                              input_names=input_names,
                              output_names=output_names,
                              opset_version=opset,
                              do_constant_folding=True)
        return compile(path, devices, **compile_options)


class Session:
    """An artifact opened once: verified (checksums, schema, the library's
    signature), every rank's weights loaded, one thread per rank. `run`
    then executes the forward pass as often as wanted, and `train_step`
    the training step of an artifact compiled with train=."""

    def __init__(self, artifact, launcher="threads", timeout=60.0,
                 trace=False):
        """`trace`: record every rank's forward passes and collectives, for
        write_trace (as tp-run --trace; --target cpu artifacts)."""
        self.artifact = artifact if isinstance(artifact, Artifact) \
            else Artifact(artifact)
        self._session = _tp_mlir.Session(self.artifact.path, launcher,
                                         float(timeout), bool(trace))

    def write_trace(self, path):
        """Writes what a Session(trace=True) recorded so far, one track per
        rank, in Chrome's trace event format (open it in Perfetto)."""
        self._session.write_trace(os.fspath(path))

    @property
    def inputs(self):
        """[(name, dtype, shape)] of the model's inputs."""
        return self._session.inputs

    @property
    def outputs(self):
        """[(name, dtype, shape)] of the model's outputs."""
        return self._session.outputs

    @property
    def ranks(self):
        return self._session.ranks

    @property
    def seconds_per_run(self):
        """Seconds per timed forward pass of the last `run`."""
        return self._session.seconds_per_run

    def run(self, inputs, warmup=0, repeat=1):
        """Runs the model on `inputs` ({name: array}); returns {name:
        numpy array} of its outputs. Arrays are read in place when they are
        C-contiguous; their dtype and shape must be the model's (TPError
        names the input otherwise)."""
        # np.asarray keeps 0-d inputs 0-d (ascontiguousarray makes them 1-d).
        arrays = {name: np.asarray(value, order="C")
                  for name, value in inputs.items()}
        return self._session.run(arrays, int(warmup), int(repeat))

    def generate(self, input_ids, max_new_tokens, attention_mask=None,
                 eos_token_id=None, do_sample=False, top_k=0, top_p=1.0,
                 temperature=1.0, seed=0, num_beams=1):
        """Generation, as tp-run --generate: `input_ids` int64 [batch,
        prompt] (batch up to the artifact's max_batch; shorter prompts
        left-padded, with `attention_mask` 0 there), then `max_new_tokens`
        new tokens; returns int64 [batch, prompt + max_new_tokens]. Greedy,
        or with `do_sample` drawn from the softmax of the logits over
        `temperature`, cut to the `top_k` largest (0: all) and then to the
        smallest set of them reaching probability `top_p`, reproducibly
        from `seed` on any number of ranks; or beam search over
        `num_beams` beams per prompt (batch x num_beams must fit
        max_batch), as transformers' with length_penalty 1. A sequence that
        produces
        `eos_token_id` stops and is padded with it. The artifact must be
        compiled with max_seq (TPError otherwise, and for a prompt that
        does not fit)."""
        ids = np.ascontiguousarray(input_ids, dtype=np.int64)
        if ids.ndim != 2:
            raise TPError(f"input_ids must be [batch, length], got shape "
                          f"{list(ids.shape)}")
        mask = (np.ascontiguousarray(attention_mask, dtype=np.int64)
                if attention_mask is not None else None)
        if mask is not None and mask.shape != ids.shape:
            raise TPError(f"attention_mask has shape {list(mask.shape)}, "
                          f"input_ids {list(ids.shape)}")
        eos = -1 if eos_token_id is None else int(eos_token_id)
        return self._session.generate(ids, mask, int(max_new_tokens), eos,
                                      bool(do_sample), int(top_k),
                                      float(top_p), float(temperature),
                                      int(seed), int(num_beams))

    @property
    def generation_timings(self):
        """The last generate()'s timings, in seconds: prefill_seconds (with
        prefill_chunks, how many chunks the prompt ran in), decode_steps,
        seconds_per_token, and a decode step split into
        compute_seconds_per_token (in the stage function),
        communication_seconds_per_token (collectives inside it, waiting for
        peers included) and runtime_seconds_per_token (around it); empty
        before the first generate()."""
        return dict(self._session.generation_timings)

    def train_step(self, inputs, lr=None):
        """One optimizer step, as tp-run --train takes it, on an artifact
        compiled with train=: `inputs` is one micro-batch ({name: array},
        as run takes) or a list of the optimizer's `accumulate` of them
        (times data_parallel: replica d takes the d-th `accumulate`).
        Runs each, averages their gradients, clips them, and updates every
        rank's weights in place; `lr` overrides the compiled learning rate
        for this step. Returns the loss (the mean over the micro-batches);
        last_train_step has the step's other figures. TPError for an
        artifact compiled without train=, a wrong number of micro-batches,
        a bad input (named as run names it) or a loss or gradient that is
        not finite (no weight is changed then)."""
        if isinstance(inputs, dict):
            inputs = [inputs]
        if not (isinstance(inputs, (list, tuple))
                and all(isinstance(b, dict) for b in inputs)):
            raise TypeError("train_step: inputs must be a dict of arrays or "
                            f"a list of them, got {type(inputs).__name__}")
        if lr is not None and not _number("train_step", "lr", lr) >= 0:
            raise TPError(f"train_step: lr must be 0 or more, got {lr}")
        batches = [{name: np.asarray(value, order="C")
                    for name, value in batch.items()} for batch in inputs]
        return self._session.train_step(
            batches, -1.0 if lr is None else float(lr))

    @property
    def step(self):
        """Optimizer steps taken (restored by resume); 0 before the
        first."""
        return self._session.steps

    @property
    def last_train_step(self):
        """The last train_step's figures: step (from 1), loss, grad_norm
        (the global norm before clipping), lr and seconds, and with
        data_parallel, data_collectives and data_bytes (what one rank
        all-reduced over the data axis); empty before the first."""
        return dict(self._session.last_train_step)

    def save(self, path):
        """Writes a checkpoint folder (tp-run --save): every rank's weights
        as they now are, the optimizer's states and the step. It replaces
        an older checkpoint at `path` only once it is whole."""
        self._session.save(os.fspath(path))

    def resume(self, path):
        """Restores the weights, optimizer states and step from a
        checkpoint that save wrote for this artifact (tp-run --resume),
        after checking its checksums (TPError otherwise)."""
        self._session.resume(os.fspath(path))

    def __repr__(self):
        return f"Session({self.artifact.path!r}, ranks={self.ranks})"
