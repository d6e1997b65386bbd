"""tp-compile --train and tp-run --train against torch's own training loop.

Builds small transformers models as run_zoo_gradients.py does (2 layers,
random O(1) weights, eval mode, untied embeddings; --tied ties them, and
the export then holds the tied parameter twice, which tp-compile --train
imports as one weight), exports each
with its loss, then trains the same initial weights for --steps steps on
four fixed micro-batches taken in turn:

  torch:    AdamW(lr 1e-3, weight_decay 0.01) after clip_grad_norm_(1.0)
            (--optimizer sgd: SGD(lr 0.05, momentum 0.9), no clipping);
            with --accumulate K, the mean of K micro-batches' gradients
            (with --data-parallel D, of K x D: the replicas' micro-batches)
  tp-mlir:  tp-compile --train adamw --clip-norm 1.0 ... --devices N
            [--sequence-parallel] [--data-parallel D], then tp-run --train
            --data DIR --steps S --save CKPT (with --mpirun CMD, under
            CMD -np N*D ... --launcher mpi)

and compares the loss of every step (|got - torch| <= 1e-4 |torch|), and
the weights after the last step, exported unsplit from the checkpoint by
tp-export-weights --checkpoint, against torch's parameters (max |got -
torch| <= 1e-4 max(1, max |torch|)). --resume K also trains K steps, saves,
and resumes from that checkpoint for the rest: the losses after it must be
the ones of the run that did not stop (rel 1e-6). --onnx-python PYTHON
also exports the trained ONNX model (tp-export-weights -o NAME.onnx) and
checks its initializers the same way and its loss on the first micro-batch,
run by onnxruntime, against the trained torch model's (rel 1e-4). One line
per run:

    llama tp=2: 20 steps, loss 5.2687 -> 3.1021, max loss rel diff 3.1e-07,
    weights max abs diff 2.4e-07 ok | 15 all_reduce

(the collectives of a step, from tp-compile --explain).

Run (transformers 4.47 installed with --target, see `make zoo-deps`):
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
  /usr/bin/python3 utils/reference-run/run_training.py \\
      --tp-compile build/bin/tp-compile --tp-run build/bin/tp-run \\
      --tp-export-weights build/bin/tp-export-weights \\
      [--models gpt2 llama bert] [--configs tp=1 tp=2 tp=4 tp=2,sp] \\
      [--steps 20] [--optimizer adamw|sgd] [--accumulate K] [--resume K]
      [--data-parallel D] [--mpirun "mpirun --oversubscribe"]
"""

import argparse
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run_zoo_gradients as zoo  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "cuda-emulation"))

LOSS_RTOL = 1e-4
WEIGHT_TOL = 1e-4
RESUME_RTOL = 1e-6
# Parameters whose gradient never exceeds this are noise (torch_training).
NOISE = 1e-6
MICROBATCHES = 4


def build(name, tied):
    config_cls, model_cls, kind, config = zoo.FAMILIES[name]
    torch.manual_seed(0)
    cfg = config_cls(vocab_size=zoo.VOCAB, tie_word_embeddings=tied,
                     **config)
    cfg._attn_implementation = "eager"
    model = zoo.load_redraw()(model_cls(cfg).eval())
    return zoo.Loss(model, kind), kind


def microbatches(kind, pad_id):
    """MICROBATCHES fixed batches of the export's shapes."""
    out = []
    for k in range(MICROBATCHES):
        gen = torch.Generator().manual_seed(10 + k)
        ids = torch.randint(3, zoo.VOCAB, (zoo.BATCH, zoo.SEQ), generator=gen)
        mask = torch.ones(zoo.BATCH, zoo.SEQ, dtype=torch.int64)
        if kind == "causal":
            labels = ids.clone()
            labels[0, 1 + k] = -100
        else:
            labels = torch.full_like(ids, -100)
            for b, s in [(0, 1 + k), (1, 4), (1, 6 - k % 2)]:
                labels[b, s] = ids[b, s]
                ids[b, s] = 2
        out.append({"input_ids": ids, "attention_mask": mask,
                    "labels": labels})
    return out


def torch_training(model, batches, args, skip=()):
    """torch's losses of args.steps steps (the steps in `skip`, from 1,
    run the micro-batches but update nothing, as tp-run's steps that loss
    scaling skipped), and the entries not compared."""
    params = [p for p in model.parameters()]
    if args.optimizer == "adamw":
        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)
    else:
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9)
    losses, next_batch = [], 0
    largest = {p: torch.zeros_like(p) for p in params}
    for step in range(1, args.steps + 1):
        opt.zero_grad()
        total = 0.0
        # Data-parallel replicas each run `accumulate` micro-batches of
        # the step: torch runs them all, in the order tp-run hands them out.
        per_step = args.accumulate * args.data_parallel
        for _ in range(per_step):
            batch = batches[next_batch % len(batches)]
            next_batch += 1
            loss = model(*batch.values()) / per_step
            loss.backward()
            total += loss.item()
        losses.append(total)
        if step in skip:
            continue
        for p in params:
            largest[p] = torch.maximum(largest[p], p.grad.abs())
        if args.optimizer == "adamw":
            torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
    names = {p: n[len("model."):] for n, p in model.named_parameters()}
    # A gradient that is 0 in exact arithmetic (an attention key's bias:
    # softmax ignores what it adds to a whole row of scores) is rounding
    # noise in torch and here alike, which Adam scales up to full steps:
    # such entries follow the noise and are not compared.
    # (An entry whose gradient is exactly 0, an embedding row no token
    # reads, only decays: it is compared.)
    masks = {names[p]: ((g > 0) & (g <= NOISE)).numpy()
             for p, g in largest.items()}
    noise = {n: m for n, m in masks.items() if m.any()}
    return losses, noise


def compare_weights(weights, ex, torch_params, problems, what=""):
    """The largest difference of the exported weights from torch's trained
    parameters (noise entries left out); problems appended."""
    wdiff = 0.0
    for init, (param, transposed) in ex["mapping"].items():
        if init not in weights:
            problems.append(f"no {what}exported weight {init}")
            continue
        got_w = weights[init].T if transposed else weights[init]
        want = torch_params[param]
        if got_w.shape != want.shape:
            problems.append(f"{what}weight {param} shape {got_w.shape}")
            continue
        keep = ~ex["noise"].get(param, np.zeros(want.shape, bool))
        diff = float(np.abs(got_w - want)[keep].max(initial=0.0))
        wdiff = max(wdiff, diff)
        if not diff <= WEIGHT_TOL * max(1.0, float(np.abs(want).max())):
            problems.append(f"{what}weight {param} differs by {diff:.2g}")
    return wdiff


# Run by --onnx-python (an interpreter with onnx and onnxruntime): the
# trained model's initializers, read by onnx itself (external data too),
# and its loss on one micro-batch, by onnxruntime.
ONNX_TRAINED = """
import sys, os, numpy as np, onnx, onnxruntime as ort
from onnx import numpy_helper
path, data, out = sys.argv[1:4]
model = onnx.load(path)
np.savez(out, **{t.name: numpy_helper.to_array(t)
                 for t in model.graph.initializer})
session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
feed = {i.name: np.load(os.path.join(data, i.name + ".npy"))
        for i in session.get_inputs()}
print(float(session.run(None, feed)[0]))
"""


def onnx_trained(python, path, data):
    """(initializers, loss on the micro-batch in `data`) of the trained
    ONNX model at `path`."""
    npz = path + ".initializers.npz"
    loss = float(run([python, "-c", ONNX_TRAINED, path, data, npz]).strip())
    with np.load(npz) as f:
        weights = {k: f[k] for k in f.files}
    return weights, loss


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        assert entry["dtype"] == "F32", entry["dtype"]
        out[name] = np.frombuffer(data[8 + length + begin:8 + length + end],
                                  np.float32).reshape(entry["shape"])
    return out


def parse_losses(text):
    return [float(x) for x in re.findall(r"^step \d+: loss (\S+)", text,
                                         re.M)]


def run(command, env=None):
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode:
        raise RuntimeError(f"{os.path.basename(command[0])}: " +
                           zoo.first_lines(done.stderr or done.stdout))
    return done.stdout


def skipped_steps(text):
    """The steps tp-run says loss scaling skipped."""
    return {int(n) for n in re.findall(
        r"^step (\d+): .*the gradients overflowed, step skipped", text, re.M)}


def check(name, config, folder, ex, reference, args):
    """`reference(skip)`: torch's losses, trained parameters and final
    loss when the steps in `skip` update nothing."""
    ranks = int(re.search(r"tp=(\d+)", config).group(1))
    tag = config.replace("=", "").replace(",", "-")
    artifact = os.path.join(folder, f"{tag}.tpa")
    command = [args.tp_compile, os.path.join(folder, "model.onnx"),
               "--train", args.optimizer, "--devices", str(ranks),
               "--target", args.target, "--explain", "-o", artifact,
               "--accumulate", str(args.accumulate)]
    if args.data_parallel > 1:
        command += ["--data-parallel", str(args.data_parallel)]
    if args.zero:
        command += ["--zero", str(args.zero)]
    if args.recompute:
        command += ["--recompute", "layers"]
    if args.dtype:
        command += ["--dtype", args.dtype]
    if args.loss_scale is not None:
        command += ["--loss-scale", str(args.loss_scale)]
    if args.loss_scale_window:
        command += ["--loss-scale-window", str(args.loss_scale_window)]
    if args.optimizer == "adamw":
        command += ["--lr", "1e-3", "--weight-decay", "0.01",
                    "--clip-norm", "1.0"]
    else:
        command += ["--lr", "0.05", "--momentum", "0.9"]
    if ex["frozen"]:
        command += ["--freeze", zoo.freeze_regex(ex["frozen"])]
    if "sp" in config.split(","):
        command.append("--sequence-parallel")
    env = dict(os.environ)
    if args.target == "cuda" and args.nvcc:
        env["NVCC"] = shutil.which(args.nvcc) or args.nvcc
    head = f"{name} {config}:"
    data = os.path.join(folder, "data")
    ckpt = os.path.join(folder, f"{tag}.ckpt")
    try:
        explained = run(command, env)
        if args.target == "cuda":
            # model.cu rebuilt against the CPU stand-ins of CUDA, cuBLAS
            # and NCCL: tp-run --train runs the CUDA path on the host.
            from run_emulated import emulate
            emulate(artifact, args.cxx)
        collectives = zoo.parse_collectives(explained)
        train = [args.tp_run, artifact, "--train", "--data", data]
        if args.mpirun:
            train = shlex.split(args.mpirun) + [
                "-np", str(ranks * args.data_parallel)] + train + [
                "--launcher", "mpi"]
        trained = run(train + ["--steps", str(args.steps), "--save", ckpt])
        got = parse_losses(trained)
        skipped = skipped_steps(trained)
        torch_losses, torch_params, final_loss = reference(skipped)
        full = os.path.join(folder, f"{tag}.safetensors")
        run([args.tp_export_weights, artifact, "--checkpoint", ckpt, "-o",
             full, "--quiet"])
        resumed = None
        if args.resume:
            part = os.path.join(folder, f"{tag}-part.ckpt")
            first = parse_losses(run(train + ["--steps", str(args.resume),
                                              "--save", part]))
            rest = parse_losses(run(train + [
                "--steps", str(args.steps - args.resume), "--resume", part]))
            resumed = first + rest
    except RuntimeError as e:
        return False, f"{head} FAIL: {e}"
    problems = []
    if len(got) != args.steps:
        problems.append(f"{len(got)} steps printed")
    worst = 0.0
    for step, (g, w) in enumerate(zip(got, torch_losses), 1):
        rel = abs(g - w) / abs(w)
        worst = max(worst, rel)
        if not rel <= LOSS_RTOL:
            problems.append(f"step {step}: loss {g:.7g} != torch's {w:.7g}")
            break
    wdiff = compare_weights(read_safetensors(full), ex, torch_params,
                            problems)
    onnx_note = ""
    if args.onnx_python:
        trained = os.path.join(folder, f"{tag}-trained.onnx")
        try:
            run([args.tp_export_weights, artifact, "--checkpoint", ckpt,
                 "-o", trained, "--quiet"])
            weights, loss = onnx_trained(args.onnx_python, trained,
                                         os.path.join(data, "0"))
        except RuntimeError as e:
            return False, f"{head} FAIL: ONNX export: {e}"
        odiff = compare_weights(weights, ex, torch_params, problems, "ONNX ")
        rel = abs(loss - final_loss) / abs(final_loss)
        if not rel <= LOSS_RTOL:
            problems.append(f"the trained ONNX model's loss {loss:.7g} != "
                            f"torch's {final_loss:.7g}")
        onnx_note = (f", trained ONNX: weights max abs diff {odiff:.2g}, "
                     f"onnxruntime loss rel diff {rel:.2g}")
    if resumed is not None:
        if len(resumed) != len(got) or any(
                abs(a - b) > RESUME_RTOL * abs(b)
                for a, b in zip(resumed, got)):
            problems.append(f"resumed at step {args.resume}: losses "
                            f"{resumed[args.resume:args.resume + 2]} != "
                            f"{got[args.resume:args.resume + 2]}")
    data_note = ""
    if args.recompute:
        m = re.search(r"recomputation: stash (\d+) B, (\d+) B without; "
                      r"(\d+) forward ops", explained)
        if not m or not int(m.group(1)) < int(m.group(2)):
            problems.append("--recompute left the stash as it was")
        else:
            data_note = (f" | stash {int(m.group(2))} -> {int(m.group(1))} B"
                         f", {m.group(3)} ops recomputed")
    if args.data_parallel > 1:
        data_note = " | data axis: " + check_data_axis(
            artifact, explained, trained, skipped, args, problems)
    if args.loss_scale is not None or args.dtype == "f16":
        scales = re.findall(r"; loss scale (\S+?)[:)]", trained)
        if len(scales) != args.steps:
            problems.append("tp-run printed no loss scale")
        data_note += (f" | loss scale {scales[0] if scales else '?'} -> "
                      f"{scales[-1] if scales else '?'}, {len(skipped)} "
                      f"step(s) skipped: {sorted(skipped)}")
    status = "ok" if not problems else "FAIL: " + "; ".join(problems[:3])
    resume_note = f", resumed at {args.resume}" if args.resume else ""
    return not problems, (
        f"{head} {len(got)} steps, loss {got[0] if got else 0:.5g} -> "
        f"{got[-1] if got else 0:.5g}, max loss rel diff {worst:.2g}, "
        f"weights max abs diff {wdiff:.2g}{onnx_note}{resume_note} "
        f"{status} | "
        f"{collectives}{data_note}")


def check_data_axis(artifact, explained, trained, skipped, args, problems):
    """What each step moved over the data axis (tp-run's step lines)
    against rank 0's gradients in the manifest: without ZeRO, they and the
    loss (4 bytes) all-reduced in ceil(bytes / bucket) collectives; with
    ZeRO-1, they alone reduce-scattered and all-gathered, bucket by bucket
    (D chunks each), and one all-reduce of the loss and norm. And against
    --explain."""
    with open(os.path.join(artifact, "manifest.json")) as f:
        manifest = json.load(f)
    grads = {o["name"] for o in manifest["outputs"]}
    rank = next(r for r in manifest["ranks"] if r["rank"] == 0)
    gradients = sum(4 * int(np.prod(w["shape"])) for w in rank["weights"]
                    if "grad." + w["name"] in grads)
    bucket = manifest["training"]["bucket_bytes"]
    d = args.data_parallel
    if args.zero:
        total = gradients // 4
        chunk = max(1, min(bucket // 4 // d, -(-total // d)))
        buckets = -(-total // (chunk * d))
        expected = gradients
        pattern = (r"data axis \(ZeRO-1\): (\d+) reduce-scatter\(s\) and "
                   r"\1 all-gather\(s\) of (\d+) B per rank, 1 all-reduce")
        explain = (r"reduce-scatters its gradients \((\d+) B\) over the "
                   r"\d+ replicas, .* in (\d+) bucket")
        what = "reduce-scatter(s) and all-gather(s)"
    else:
        expected = gradients + 4
        buckets = -(-expected // bucket)
        pattern = r"data axis: (\d+) all-reduce\(s\), (\d+) B per rank"
        explain = (r"\((\d+) B\) over the \d+ replicas once per step, in "
                   r"(\d+) bucket")
        what = "all-reduce(s)"
    steps = re.findall(pattern, trained)
    # A step that loss scaling skipped gathers no weights under ZeRO-1
    # (tp-run says so instead).
    expected_steps = args.steps - (len(skipped) if args.zero else 0)
    if len(steps) != expected_steps or any(
            (int(n), int(b)) != (buckets, expected) for n, b in steps):
        problems.append(f"data axis moved {steps[:1]} per step, not "
                        f"{buckets} {what} of {expected} B")
    m = re.search(explain, explained)
    if not m or (int(m.group(1)), int(m.group(2))) != (expected, buckets):
        problems.append("--explain's data axis is not "
                        f"{expected} B in {buckets} bucket(s)")
    return f"{buckets} {what} of {expected} B per rank per step"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    parser.add_argument("--tp-export-weights", default="tp-export-weights")
    parser.add_argument("--models", nargs="*",
                        default=["gpt2", "llama", "bert"])
    parser.add_argument("--configs", nargs="*",
                        default=["tp=1", "tp=2", "tp=4", "tp=2,sp"])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--optimizer", choices=["adamw", "sgd"],
                        default="adamw")
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--resume", type=int, default=0)
    parser.add_argument("--data-parallel", type=int, default=1,
                        help="tp-compile --data-parallel D for every config; "
                             "torch averages the D replicas' micro-batches")
    parser.add_argument("--zero", type=int, default=0,
                        help="tp-compile --zero 1 (with --data-parallel)")
    parser.add_argument("--dtype", choices=["bf16", "f16"],
                        help="tp-compile --dtype bf16 or f16 (f32 master "
                             "weights, bf16/f16 compute; f16 with dynamic "
                             "loss scaling) against torch in f32: losses "
                             "within 2%%, weights within 2e-2")
    parser.add_argument("--loss-scale", type=float,
                        help="tp-compile --loss-scale S; the steps tp-run "
                             "skips on overflow update nothing in torch "
                             "either (their micro-batches still pass)")
    parser.add_argument("--loss-scale-window", type=int,
                        help="tp-compile --loss-scale-window N")
    parser.add_argument("--recompute", action="store_true",
                        help="tp-compile --recompute layers; the line also "
                             "gives the stash with and without")
    parser.add_argument("--mpirun", metavar="CMD",
                        help="train under CMD -np RANKS (one process per "
                             "rank, tp-run --launcher mpi)")
    parser.add_argument("--tied", action="store_true",
                        help="tie the embeddings (transformers' default): "
                             "the export holds the parameter twice")
    parser.add_argument("--external-data", metavar="PYTHON",
                        help="after exporting, move the initializers to "
                             "model.onnx.data beside the model (ONNX "
                             "external data), with this interpreter's onnx")
    parser.add_argument("--onnx-python", metavar="PYTHON",
                        help="also export the trained model as ONNX "
                             "(tp-export-weights -o NAME.onnx) and check it "
                             "with this interpreter's onnx and onnxruntime: "
                             "its weights against torch's, its loss on the "
                             "first micro-batch against torch's trained "
                             "model's (rel 1e-4)")
    parser.add_argument("--target", choices=["cpu", "cuda"], default="cpu",
                        help="cuda: tp-compile --target cuda, its model.cu "
                             "rebuilt against utils/cuda-emulation and run "
                             "by tp-run's CUDA path on the CPU")
    parser.add_argument("--nvcc", help="with --target cuda: nvcc for "
                                       "tp-compile (NVCC; true skips it)")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"),
                        help="with --target cuda: the emulation's compiler")
    parser.add_argument("--keep", metavar="DIR")
    args = parser.parse_args()
    if args.dtype:
        global LOSS_RTOL, WEIGHT_TOL
        LOSS_RTOL, WEIGHT_TOL = 2e-2, 2e-2
    torch.set_num_threads(1)
    root = args.keep or tempfile.mkdtemp(prefix="tp-training-")
    passed = failed = 0
    for name in args.models:
        folder = os.path.join(root, name)
        os.makedirs(folder, exist_ok=True)
        model, kind = build(name, args.tied)
        cfg = model.model.config
        pad_id = cfg.pad_token_id if cfg.pad_token_id is not None else 0
        batches = microbatches(kind, pad_id)
        path = os.path.join(folder, "model.onnx")
        torch.onnx.export(model, tuple(batches[0].values()), path,
                          input_names=list(batches[0]), output_names=["loss"],
                          opset_version=14)
        for k, batch in enumerate(batches):
            os.makedirs(os.path.join(folder, "data", str(k)), exist_ok=True)
            for key, value in batch.items():
                np.save(os.path.join(folder, "data", str(k), f"{key}.npy"),
                        value.numpy())
        # The initializers' parameters, by value, before training.
        params = {n[len("model."):]: p.detach().numpy().copy()
                  for n, p in model.named_parameters()}
        by_value = {}
        for n, p in params.items():
            for transposed, v in [(False, p)] + ([(True, p.T)]
                                                 if p.ndim == 2 else []):
                by_value.setdefault(
                    (v.shape, np.ascontiguousarray(v).tobytes()),
                    (n, transposed))
        _, initializers = zoo.read_onnx(path)
        ex = {"mapping": {}, "frozen": []}
        for init, (dtype, array) in initializers.items():
            if dtype != 1:
                continue
            key = (array.shape, array.tobytes())
            if key in by_value:
                ex["mapping"][init] = by_value[key]
            else:
                ex["frozen"].append(init)
        uses = {}
        for init, (param, _) in ex["mapping"].items():
            uses.setdefault(param, []).append(init)
        tied = [f"{p} ({' and '.join(inits)})" for p, inits in uses.items()
                if len(inits) > 1]
        if args.external_data:
            subprocess.run(
                [args.external_data, "-c",
                 "import onnx, sys; m = onnx.load(sys.argv[1]); "
                 "onnx.save_model(m, sys.argv[1], save_as_external_data=True, "
                 "all_tensors_to_one_file=True, location='model.onnx.data', "
                 "size_threshold=0)", path], check=True)
        torch_losses, ex["noise"] = torch_training(model, batches, args)
        torch_params = {n[len("model."):]: p.detach().numpy()
                        for n, p in model.named_parameters()}
        with torch.no_grad():
            final_loss = float(model(*batches[0].values()))
        references = {(): (torch_losses, torch_params, final_loss)}

        def reference(skip, name=name, batches=batches,
                      references=references):
            key = tuple(sorted(skip))
            if key not in references:
                again, _ = build(name, args.tied)
                losses, _ = torch_training(again, batches, args, key)
                with torch.no_grad():
                    loss = float(again(*batches[0].values()))
                references[key] = (losses, {
                    n[len("model."):]: p.detach().numpy()
                    for n, p in again.named_parameters()}, loss)
            return references[key]
        print(f"{name}: {len(ex['mapping'])} trainable initializers, "
              f"{len(ex['frozen'])} frozen, tied: {', '.join(tied) or 'none'}"
              f"; torch loss "
              f"{torch_losses[0]:.6g} -> {torch_losses[-1]:.6g} in "
              f"{args.steps} {args.optimizer} steps; not compared "
              f"(gradient 0 but for rounding): " + (", ".join(
                  f"{int(m.sum())} of {n}" for n, m in
                  sorted(ex["noise"].items())) or "none"), flush=True)
        for config in args.configs:
            ok, line = check(name, config, folder, ex, reference, args)
            print(line, flush=True)
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
