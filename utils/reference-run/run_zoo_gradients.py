"""tp-compile --gradients on transformers models' own loss vs torch.autograd.

Builds small transformers models from configs (2 layers, hidden 32 or 64, 4
heads, vocabulary 128 or $ZOO_VOCAB, no dropout, eval mode, eager attention; no
download),
re-draws their weights as test/models/hf/generate.py does (O(1)
activations; every parameter different, since the ONNX exporter merges
equal initializers), and exports each with its loss as the only output:

    model(input_ids=..., attention_mask=..., labels=labels).loss

Causal LMs get labels = input_ids with two positions set to -100 (ignored),
masked LMs -100 everywhere but three masked positions (their second
sentence ends in padding). torch.onnx.export, opset 14, static shapes
(batch 2, sequence 8), constant folding on, as users export; the loss ops
of each export are printed (SoftmaxCrossEntropyLoss, or LogSoftmax +
NegativeLogLikelihoodLoss).

torch.autograd gives the loss and every parameter's gradient on the same
inputs. Each ONNX float initializer is matched to the torch parameter it
came from by value: it equals the parameter or its transpose exactly
(constant folding transposes MatMul weights under generated names such as
onnx::MatMul_123). A tied parameter may be exported twice (GPT-2's wte as
the embedding table and as a folded transposed copy for the LM head): its
torch gradient is the sum of the ONNX gradients of all its initializers.
Float initializers that are no parameter (causal masks, rotary tables,
position ids folded into constants) are passed to --freeze as one anchored
regex of exactly their names (torch 1.13 exports these models' buffers as
Constant nodes: none so far).

Models: gpt2, llama (GQA: 4 query heads, 2 key/value heads), opt, bert
(BertForMaskedLM), gpt_neox, bloom, gptj, falcon by default; --models all
adds mistral, qwen2, phi and roberta (RobertaForMaskedLM).

For each model and config (tp=1, tp=2, tp=4, tp=2,sp) the export is
compiled with `tp-compile --gradients [--freeze ...] --devices N
[--sequence-parallel] --target cpu --explain`, run with tp-run, and the
loss (|got - torch| <= 1e-4 |torch|) and every gradient (max |got - torch|
<= 1e-5 + 1e-4 max |torch|) are compared; every torch parameter with a
gradient must be covered. One line per run:

    llama tp=2: loss 5.26869, 21 gradients, max abs diff 1.2e-07 ok | \
5 all_gather 15 all_reduce

(the collectives from --explain's `collectives:` line; with sp, how many
row-parallel blocks tp-compile warns keep their all-reduce), after a line
per model on its export (loss ops, initializers, tied parameters), then
'N passed, N failed'; exit status 1 if any failed. A failed compile or run
shows tp-compile's or tp-run's first error.

Debian's python3 has torch 1.13 but no onnx module: the exports are read
with the small protobuf reader below (graph nodes' op types and
initializers only).

Run (transformers 4.47 installed with --target, see `make zoo-deps`):
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
  /usr/bin/python3 utils/reference-run/run_zoo_gradients.py \\
      --tp-compile build/bin/tp-compile --tp-run build/bin/tp-run \\
      [--models gpt2 llama ...] [--configs tp=1 tp=2 tp=4 tp=2,sp] \\
      [--keep DIR] [--loss hf|manual] [--jobs N]

--loss manual writes the cross-entropy by hand from the logits
(log_softmax times a one-hot mask built with Equal, over the labels that
are not -100: the same value as transformers' loss) for a compiler without
the ONNX loss ops. The default run takes about 2.5 minutes on 2 busy cores.
"""

import argparse
import concurrent.futures
import functools
import importlib.util
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import torch
import torch.nn as nn
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "..", "..", "test", "models", "hf")
BATCH, SEQ, VOCAB = 2, 8, int(os.environ.get("ZOO_VOCAB", "128"))
LOSS_RTOL = 1e-4
ATOL, RTOL = 1e-5, 1e-4
CONFIGS = ["tp=1", "tp=2", "tp=4", "tp=2,sp"]
# The default run (about 2 minutes on 2 cores); --models all adds mistral,
# qwen2, phi and roberta.
DEFAULT_MODELS = ["gpt2", "llama", "opt", "bert", "gpt_neox", "bloom",
                  "gptj", "falcon"]
# The ops a cross-entropy exports to (Softmax is the attention's).
LOSS_OPS = ("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
            "LogSoftmax", "OneHot")

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()


@functools.lru_cache(None)
def load_redraw():
    """generate.py's redraw(): N(0, 1/fan_in) matrices, N(0, 1)
    embeddings, norms 1 + 0.1 N(0, 1), biases 0.1 N(0, 1)."""
    spec = importlib.util.spec_from_file_location(
        "hf_zoo_generate", os.path.join(ZOO, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.redraw


T = transformers
# name -> (config class, model class, kind, config)
FAMILIES = {
    "gpt2": (T.GPT2Config, T.GPT2LMHeadModel, "causal", dict(
        n_embd=32, n_layer=2, n_head=4, n_positions=32, resid_pdrop=0,
        embd_pdrop=0, attn_pdrop=0)),
    "llama": (T.LlamaConfig, T.LlamaForCausalLM, "causal", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128,
        max_position_embeddings=32)),
    "opt": (T.OPTConfig, T.OPTForCausalLM, "causal", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=32,
        dropout=0, attention_dropout=0, activation_dropout=0, layerdrop=0)),
    "bert": (T.BertConfig, T.BertForMaskedLM, "masked", dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=32,
        hidden_dropout_prob=0, attention_probs_dropout_prob=0)),
    "gpt_neox": (T.GPTNeoXConfig, T.GPTNeoXForCausalLM, "causal", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32, rotary_pct=0.5,
        use_parallel_residual=True, hidden_dropout=0, attention_dropout=0)),
    "bloom": (T.BloomConfig, T.BloomForCausalLM, "causal", dict(
        hidden_size=32, n_layer=2, n_head=4, hidden_dropout=0,
        attention_dropout=0)),
    "mistral": (T.MistralConfig, T.MistralForCausalLM, "causal", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
        max_position_embeddings=32, sliding_window=None)),
    "gptj": (T.GPTJConfig, T.GPTJForCausalLM, "causal", dict(
        n_embd=32, n_layer=2, n_head=4, n_positions=32, rotary_dim=4,
        resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)),
    "qwen2": (T.Qwen2Config, T.Qwen2ForCausalLM, "causal", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64,
        max_position_embeddings=32, attention_dropout=0)),
    "phi": (T.PhiConfig, T.PhiForCausalLM, "causal", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=32,
        partial_rotary_factor=0.5, resid_pdrop=0, embd_pdrop=0,
        attention_dropout=0)),
    "falcon": (T.FalconConfig, T.FalconForCausalLM, "causal", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        hidden_dropout=0, attention_dropout=0)),
    "roberta": (T.RobertaConfig, T.RobertaForMaskedLM, "masked", dict(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=34, pad_token_id=1,
        hidden_dropout_prob=0, attention_probs_dropout_prob=0)),
}


class Loss(nn.Module):
    """The wrapper users export for training: the loss only."""

    def __init__(self, model, kind, manual=False):
        super().__init__()
        self.model, self.kind, self.manual = model, kind, manual

    def forward(self, input_ids, attention_mask, labels):
        extra = {"use_cache": False} if self.kind == "causal" else {}
        if not self.manual:
            return self.model(input_ids=input_ids,
                              attention_mask=attention_mask, labels=labels,
                              **extra).loss
        logits = self.model(input_ids=input_ids,
                            attention_mask=attention_mask, **extra).logits
        if self.kind == "causal":
            logits, labels = logits[:, :-1], labels[:, 1:]
        logp = torch.log_softmax(logits.float(), -1)
        vocab = torch.arange(logp.shape[-1])
        one_hot = (labels.unsqueeze(-1) == vocab).to(logp.dtype)
        return -(logp * one_hot).sum() / (labels != -100).sum()


def build(name, manual):
    config_cls, model_cls, kind, config = FAMILIES[name]
    torch.manual_seed(0)
    cfg = config_cls(vocab_size=VOCAB, **config)
    cfg._attn_implementation = "eager"
    model = load_redraw()(model_cls(cfg).eval())
    return Loss(model, kind, manual), kind


def make_inputs(kind, pad_id):
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(3, VOCAB, (BATCH, SEQ), generator=gen)
    mask = torch.ones(BATCH, SEQ, dtype=torch.int64)
    if kind == "causal":
        labels = ids.clone()
        labels[0, 3] = labels[1, 6] = -100
    else:
        # Three masked tokens to predict; the second sentence's last two
        # tokens are padding.
        labels = torch.full_like(ids, -100)
        for b, s in [(0, 2), (0, 5), (1, 3)]:
            labels[b, s] = ids[b, s]
            ids[b, s] = 2
        mask[1, SEQ - 2:] = 0
        ids[1, SEQ - 2:] = pad_id
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# A protobuf reader for what is needed of an ONNX file: the op types of the
# graph's nodes and its initializers.

def _varint(buf, pos):
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of a message's fields: an int for a
    varint, bytes for the others."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ValueError(f"protobuf wire type {wire}")
        yield field, wire, value


def _ints(wire, value, signed=True):
    values = [value] if wire == 0 else []
    pos = 0
    while wire == 2 and pos < len(value):
        v, pos = _varint(value, pos)
        values.append(v)
    return [v - (1 << 64) if signed and v >= 1 << 63 else v for v in values]


ONNX_TYPES = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_,
              11: np.float64}


def _tensor(buf):
    """TensorProto -> (name, ONNX data type, array or None)."""
    dims, dtype, name, raw, values = [], 0, "", None, []
    for field, wire, value in _fields(buf):
        if field == 1:
            dims += _ints(wire, value)
        elif field == 2:
            dtype = value
        elif field == 8:
            name = bytes(value).decode()
        elif field == 9:
            raw = bytes(value)
        elif field == 4:  # float_data
            values += struct.unpack(f"<{len(value) // 4}f", value)
        elif field in (5, 7):  # int32_data, int64_data
            values += _ints(wire, value)
    if dtype not in ONNX_TYPES:
        return name, dtype, None
    array = (np.frombuffer(raw, ONNX_TYPES[dtype]).copy() if raw is not None
             else np.array(values, ONNX_TYPES[dtype]))
    return name, dtype, array.reshape(dims)


def read_onnx(path):
    """The op types of the graph's nodes, in order, and its initializers:
    name -> (ONNX data type, array)."""
    with open(path, "rb") as f:
        buf = memoryview(f.read())
    graph = next(value for field, _, value in _fields(buf) if field == 7)
    ops, initializers = [], {}
    for field, _, value in _fields(graph):
        if field == 1:
            ops += [bytes(v).decode() for f, _, v in _fields(value) if f == 4]
        elif field == 5:
            name, dtype, array = _tensor(value)
            initializers[name] = (dtype, array)
    return ops, initializers


def export(name, folder, manual):
    """Exports the model, stores its inputs, and returns torch's loss and
    gradients and the ONNX initializers' mapping to parameters."""
    model, kind = build(name, manual)
    cfg = model.model.config
    pad_id = cfg.pad_token_id if cfg.pad_token_id is not None else 0
    inputs = make_inputs(kind, pad_id)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(model, tuple(inputs.values()), path,
                      input_names=list(inputs), output_names=["loss"],
                      opset_version=14)
    for key, value in inputs.items():
        np.save(os.path.join(folder, f"{key}.npy"), value.numpy())
    loss = model(*inputs.values())
    loss.backward()
    params = {n[len("model."):]: p.detach().numpy()
              for n, p in model.named_parameters()}
    grads = {n[len("model."):]: p.grad.numpy()
             for n, p in model.named_parameters() if p.grad is not None}

    # Every parameter (and its transpose) by value.
    by_value = {}
    for n, p in params.items():
        for transposed, v in [(False, p)] + ([(True, p.T)] if p.ndim == 2
                                             else []):
            key = (v.shape, np.ascontiguousarray(v).tobytes())
            if key in by_value and by_value[key][0] != n:
                sys.exit(f"{name}: parameters {by_value[key][0]} and {n} "
                         f"are equal: the export would merge them")
            by_value.setdefault(key, (n, transposed))
    ops, initializers = read_onnx(path)
    mapping, frozen = {}, []
    for init, (dtype, array) in initializers.items():
        if dtype != 1:
            continue
        key = (array.shape, array.tobytes())
        if key in by_value:
            mapping[init] = by_value[key]
        else:
            frozen.append(init)
    return {"loss": loss.item(), "grads": grads, "params": params,
            "mapping": mapping, "frozen": frozen, "ops": ops,
            "initializers": initializers, "inputs": list(inputs)}


def freeze_regex(names):
    """An anchored POSIX extended regex (llvm::Regex) of exactly `names`."""
    def escape(text):
        return re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)
    return "^(" + "|".join(escape(n) for n in sorted(names)) + ")$"


def describe_export(name, ex):
    ops = ex["ops"]
    loss_ops = [op for op in LOSS_OPS if op in ops]
    mapping = ex["mapping"]
    transposed = sum(1 for _, t in mapping.values() if t)
    uses = {}
    for init, (param, t) in mapping.items():
        uses.setdefault(param, []).append(init + (" (transposed)" if t
                                                  else ""))
    tied = {p: inits for p, inits in uses.items() if len(inits) > 1}
    unused = sorted(set(ex["params"]) - set(uses))
    others = sum(1 for d, _ in ex["initializers"].values() if d != 1)
    print(f"{name}: export: {len(ops)} nodes, loss ops "
          f"{' + '.join(loss_ops) or 'none'}; {len(mapping)} float "
          f"initializers are {len(uses)} of {len(ex['params'])} parameters "
          f"({transposed} transposed), {len(ex['frozen'])} frozen, "
          f"{others} not float; torch loss {ex['loss']:.6g}, "
          f"{len(ex['grads'])} gradients")
    for param, inits in sorted(tied.items()):
        print(f"  {param} exported {len(inits)} times: {', '.join(inits)}")
    for init in ex["frozen"]:
        array = ex["initializers"][init][1]
        print(f"  frozen {init} {list(array.shape)}")
    if unused:
        print(f"  parameters not in the export: {', '.join(unused)}")


def parse_collectives(text):
    m = re.search(r"^collectives: (.*?);", text, re.M)
    return m.group(1) if m else "no collectives line"


def first_lines(text, count=2):
    """The first error and its note (warnings skipped), else the last
    lines."""
    lines = [line for line in text.splitlines() if line.strip() and
             not line.startswith("writing weight") and
             ": warning: " not in line]
    errors = [i for i, line in enumerate(lines) if "error" in line]
    first = errors[0] if errors else max(0, len(lines) - count)
    return " / ".join(line[:400] for line in lines[first:first + count])


def check(name, config, ex, folder, args):
    ranks = int(re.search(r"tp=(\d+)", config).group(1))
    sp = "sp" in config.split(",")
    tag = config.replace("=", "").replace(",", "-")
    artifact = os.path.join(folder, f"{tag}.tpa")
    out = os.path.join(folder, f"{tag}-out")
    command = [args.tp_compile, os.path.join(folder, "model.onnx"),
               "--gradients", "--devices", str(ranks), "--target", "cpu",
               "--explain", "-o", artifact]
    if ex["frozen"]:
        command[3:3] = ["--freeze", freeze_regex(ex["frozen"])]
    if sp:
        command.append("--sequence-parallel")
    head = f"{name} {config}:"
    compiled = subprocess.run(command, capture_output=True, text=True)
    if compiled.returncode:
        return False, f"{head} FAIL: tp-compile: " + first_lines(
            compiled.stderr or compiled.stdout)
    collectives = parse_collectives(compiled.stdout)
    # --sequence-parallel warns of each row-parallel block it leaves as
    # without it (no residual add after it).
    kept = set(re.findall(r"at '([^']*)': tp-plan-sequence-parallel: no "
                          r"residual add", compiled.stderr))
    if sp and kept:
        collectives += (f" | sp: {len(kept)} row-parallel blocks keep "
                        f"their all-reduce")
    inputs = [a for n in ex["inputs"]
              for a in ("--input", f"{n}={os.path.join(folder, n + '.npy')}")]
    ran = subprocess.run([args.tp_run, artifact, *inputs, "--output-dir",
                          out], capture_output=True, text=True)
    if ran.returncode:
        return False, f"{head} FAIL: tp-run: " + first_lines(
            ran.stderr or ran.stdout) + f" | {collectives}"
    # tp-run prints 'output NAME F32 [dims] -> FILE' per output; the file
    # is NAME.npy with '::' written '__'.
    files = dict(re.findall(r"^output (\S+) \S+ \[.*?\] -> (.*)$",
                            ran.stdout + ran.stderr, re.M))
    for init in ["loss"] + ["grad." + i for i in ex["mapping"]]:
        path = os.path.join(out, init.replace("::", "__") + ".npy")
        if init not in files and os.path.exists(path):
            files[init] = path
    problems = []
    got_loss = float(np.load(files["loss"])) if "loss" in files else \
        float("nan")
    if not abs(got_loss - ex["loss"]) <= LOSS_RTOL * abs(ex["loss"]):
        problems.append(f"loss {got_loss:.7g} != torch's {ex['loss']:.7g}")
    summed = {}
    for init, (param, transposed) in ex["mapping"].items():
        key = "grad." + init
        if key not in files:
            problems.append(f"no output {key}")
            continue
        got = np.load(files[key])
        summed[param] = summed.get(param, 0) + (got.T if transposed else got)
    extra = [k for k in files if k.startswith("grad.") and
             k[len("grad."):] not in ex["mapping"]]
    if extra:
        problems.append("gradients of no parameter: " + ", ".join(extra))
    worst, bad = 0.0, []
    for param, want in ex["grads"].items():
        if param not in summed:
            continue
        got = summed[param]
        if got.shape != want.shape:
            bad.append(f"{param} shape {got.shape} != {want.shape}")
            continue
        diff = float(np.abs(got - want).max())
        worst = max(worst, diff)
        if not diff <= ATOL + RTOL * float(np.abs(want).max()):
            bad.append(f"{param} {diff:.2g}")
    if bad:
        problems.append(f"{len(bad)} gradients differ: " + ", ".join(
            bad[:4]) + (", ..." if len(bad) > 4 else ""))
    missing = sorted(set(ex["grads"]) - set(summed))
    if missing:
        problems.append(f"no gradient for {len(missing)} parameters: " +
                        ", ".join(missing[:4]) +
                        (", ..." if len(missing) > 4 else ""))
    covered = len(set(ex["grads"]) & set(summed))
    status = "ok" if not problems else "FAIL: " + "; ".join(problems)
    return not problems, (f"{head} loss {got_loss:.6g}, {covered} gradients, "
                          f"max abs diff {worst:.2g} {status} | "
                          f"{collectives}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    parser.add_argument("--models", nargs="*", default=DEFAULT_MODELS,
                        choices=list(FAMILIES) + ["all"], metavar="NAME",
                        help=f"of {', '.join(FAMILIES)}, or all (default: "
                             f"{' '.join(DEFAULT_MODELS)})")
    parser.add_argument("--configs", nargs="*", default=CONFIGS,
                        metavar="CONFIG", help="tp=N or tp=N,sp (default: "
                        f"{' '.join(CONFIGS)})")
    parser.add_argument("--keep", metavar="DIR",
                        help="work in DIR and keep it (one folder per model)")
    parser.add_argument("--loss", choices=["hf", "manual"], default="hf",
                        help="manual: the cross-entropy written by hand "
                             "from the logits")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="configs compiled and run at once (default: "
                             "the CPU count)")
    args = parser.parse_args()
    models = list(FAMILIES) if "all" in args.models else args.models
    for config in args.configs:
        if not re.fullmatch(r"tp=\d+(,sp)?", config):
            parser.error(f"bad config '{config}' (tp=N or tp=N,sp)")
    start = time.time()
    work = args.keep or tempfile.mkdtemp(prefix="zoo-gradients-")
    os.makedirs(work, exist_ok=True)
    passed = failed = 0
    try:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            # Every model's runs are queued as soon as it is exported; the
            # lines come out in order.
            queued = []
            for name in models:
                folder = os.path.join(work, name)
                os.makedirs(folder, exist_ok=True)
                ex = export(name, folder, args.loss == "manual")
                queued.append((name, ex, [
                    pool.submit(check, name, c, ex, folder, args)
                    for c in args.configs]))
            for name, ex, runs in queued:
                describe_export(name, ex)
                for run in runs:
                    ok, line = run.result()
                    print(line, flush=True)
                    passed += ok
                    failed += not ok
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print(f"{passed} passed, {failed} failed ({time.time() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
