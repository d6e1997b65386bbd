"""One training step of a GPT-2-small-shaped model: torch on one thread
beside tp-compile on 1 and 2 CPU ranks, in one run.

Two tables. The first times the forward pass, the loss and the gradient of
the loss with respect to every weight (tp-compile --gradients, no
optimizer), and checks the gradients against torch's. The second times
whole training steps with the optimizer: torch's zero_grad, forward,
backward, clip_grad_norm_(1.0) and AdamW.step() against tp-compile --train
adamw --clip-norm 1.0 run by tp-run --train (--train-steps steps on the one
batch, the first a warm-up), and checks every step's loss.

The model is transformers' GPT2LMHeadModel built from a config (default 6
layers, hidden 768, 12 heads, vocabulary 50304, 1024 positions, tied LM
head; dropout 0, eval mode, eager attention; no download), its weights
re-drawn as the model zoo's (test/models/hf/generate.py: N(0, 1/fan_in)
matrices, N(0, 1) embeddings, norms 1 + 0.1 N(0, 1), biases 0.1 N(0, 1);
every parameter different, since the ONNX exporter merges equal
initializers), wrapped to return its own loss

    model(input_ids=ids, attention_mask=ones, labels=ids).loss

(run_zoo_gradients.Loss from utils/reference-run/run_zoo_gradients.py) and
exported by torch.onnx.export (opset 14, static shapes, default batch 8 x
sequence 128, f32). The vocabulary is GPT-2's 50257 padded to a multiple
of 64 (as nanoGPT and bench/tensor_parallel_cpu.py do): with 50257, which
2 does not divide, the LM head stays whole on every rank (--vocab 50257
shows it). Then:

  torch x1        the same wrapper under torch.set_num_threads(1) and one
                  OpenBLAS thread: forward + loss.backward(), timed
                  together; zero_grad(set_to_none=True) between steps,
                  outside the timer
  tp-mlir x1      tp-compile --gradients --devices 1 --target cpu, run by
                  tp-run with OPENBLAS_NUM_THREADS=1: the loss and
                  grad.<initializer> of every float initializer
  tp-mlir x2      the same with --devices 2: two ranks as threads of one
                  tp-run, one BLAS thread each (OPENBLAS_NUM_THREADS=1
                  applies per calling thread), so 2 ranks x 1 thread on
                  the 2 cores of this machine

In the second table, tp-mlir DP 2 x TP 1 is the same step on two
data-parallel replicas of one rank (tp-compile --data-parallel 2 of the
model exported at half the batch, each replica on its half): the loss is
the batch's, and the gradients cross the data axis in one all-reduce.

Every time is the median of --repeat steps after one warm-up step; for
tp-mlir of --tp-repeat (default --repeat) tp-run processes of --warmup 1
--repeat 1 each, as bench/cpu_throughput.py, so that the samples are
independent (tp-run times the step only, not loading the weights or
writing the gradients). A rank count whose tp-compile or tp-run fails
gets its first error in place of its figures.
Every process gets the OpenBLAS kernels tp-run would pick (bench/blas.py).
It prints seconds per step, tokens per second, torch / tp-mlir x1 (> 1:
tp-mlir is faster), x1 / x2 (the speed-up of 2 ranks), the compile times,
the per-rank weight and gradient bytes from tp-compile --explain, each
side's peak RSS, tp-mlir's loss against torch's (relative difference,
should be <= 1e-4) and the largest gradient difference (summed over the
exported copies of a tied weight, as run_zoo_gradients.py), and the
machine. It asserts nothing.

Run with Debian's python3 (torch 1.13) and transformers 4.47 from the zoo
site (`make zoo-site`), or `make bench-training`:

  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 bench/training.py --tp-repeat 2   # 7.5 min on 2 cores
  PYTHONPATH=test/models/hf/.cache/site HF_HUB_OFFLINE=1 \\
      /usr/bin/python3 bench/training.py --layers 1 --hidden 64 --heads 4 \\
      --vocab 512 --batch 2 --seq 16                 # smoke, ~15 s

(results/training_gpt2_small.txt.)
"""

import argparse
import datetime
import os
import platform
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import blas  # noqa: E402

# One OpenBLAS thread and tp-run's kernels for torch too: OpenBLAS reads
# these when torch loads it, so before the import below.
os.environ.update(blas.env(1))

sys.path.insert(0, os.path.join(REPO, "utils", "reference-run"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
import run_zoo_gradients as zoo  # noqa: E402


def build(a):
    cfg = transformers.GPT2Config(
        vocab_size=a.vocab, n_embd=a.hidden, n_layer=a.layers, n_head=a.heads,
        n_positions=max(1024, a.seq), resid_pdrop=0, embd_pdrop=0,
        attn_pdrop=0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = zoo.load_redraw()(transformers.GPT2LMHeadModel(cfg).eval())
    return zoo.Loss(model, "causal")


def make_inputs(a):
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), generator=gen)
    return {"input_ids": ids,
            "attention_mask": torch.ones(a.batch, a.seq, dtype=torch.int64),
            "labels": ids.clone()}


def time_torch(wrapper, inputs, a):
    """Seconds per step (median), the first step's loss and gradients."""
    torch.set_num_threads(1)
    args = tuple(inputs.values())
    times, loss, grads = [], None, None
    for i in range(a.repeat + 1):  # the first warms up
        wrapper.zero_grad(set_to_none=True)
        start = time.perf_counter()
        out = wrapper(*args)
        out.backward()
        elapsed = time.perf_counter() - start
        if i == 0:
            loss = out.item()
            grads = {n[len("model."):]: p.grad.numpy().copy()
                     for n, p in wrapper.named_parameters()
                     if p.grad is not None}
        else:
            times.append(elapsed)
    wrapper.zero_grad(set_to_none=True)
    return statistics.median(times), times, loss, grads


def gradient_mapping(wrapper, path):
    """ONNX float initializer -> (parameter, transposed), by value, as
    run_zoo_gradients.export."""
    by_value = {}
    for n, p in wrapper.named_parameters():
        v = p.detach().numpy()
        n = n[len("model."):]
        for transposed, x in [(False, v)] + ([(True, v.T)] if v.ndim == 2
                                             else []):
            key = (x.shape, np.ascontiguousarray(x).tobytes())
            by_value.setdefault(key, (n, transposed))
    _, initializers = zoo.read_onnx(path)
    mapping, other = {}, []
    for init, (dtype, array) in initializers.items():
        if dtype != 1:
            continue
        key = (array.shape, array.tobytes())
        if key in by_value:
            mapping[init] = by_value[key]
        else:
            other.append(init)
    return mapping, other


def run_logged(cmd, env, log):
    """Runs cmd with stdout to the file log and stderr to log.err; returns
    (exit status, stdout then stderr, peak RSS in bytes or None). Apart,
    so that tp-compile's progress on stderr does not cut --explain's lines.
    The RSS is from /usr/bin/time: a child of this process inherits its
    peak RSS (torch's) through fork, a grandchild does not."""
    rss_file = log + ".rss"
    timed = os.path.exists("/usr/bin/time")
    if timed:
        cmd = ["/usr/bin/time", "-o", rss_file, "-f", "%M"] + cmd
    with open(log, "w") as out, open(log + ".err", "w") as err:
        code = subprocess.run(cmd, stdout=out, stderr=err,
                              env=env).returncode
    text = ""
    for name in (log, log + ".err"):
        with open(name, errors="replace") as f:
            text += f.read().rstrip("\n") + "\n"
    rss = None
    if timed and os.path.exists(rss_file):
        with open(rss_file) as f:
            m = re.search(r"^(\d+)$", f.read(), re.M)
        rss = int(m.group(1)) * 1024 if m else None
    return code, text, rss


def copy_tools(a, work):
    """Copies of tp-compile and tp-run, so that a relink of build/bin under
    a run does not change the binaries in the middle of it."""
    for tool in ("tp-compile", "tp-run"):
        src = os.path.join(a.build_bin, tool)
        if not os.path.exists(src):
            raise SystemExit(f"{src} is missing: build it first (make build)")
        shutil.copy2(src, os.path.join(work, tool))


def first_error(text):
    """tp-compile's or tp-run's first error line and its note."""
    return zoo.first_lines(text)


def compile_artifact(a, model, devices, work):
    """(artifact, seconds, peak RSS, output), or (None, seconds, peak RSS,
    first error) if tp-compile fails."""
    artifact = os.path.join(work, f"x{devices}.tpa")
    cmd = [os.path.join(work, "tp-compile"), model, "--gradients",
           "--devices", str(devices), "--target", "cpu", "--explain", "-o",
           artifact]
    for attempt in range(2):
        start = time.perf_counter()
        code, text, rss = run_logged(cmd, dict(os.environ),
                                     os.path.join(work, f"compile{devices}.log"))
        seconds = time.perf_counter() - start
        if code == 0:
            return artifact, seconds, rss, text
        if attempt == 0 and ": error: " not in text:
            # No diagnostic: build/bin may have been relinked under the
            # copy. Once more, from a fresh copy, a minute later.
            print(f"  tp-compile --devices {devices} failed (exit {code}) "
                  f"without an error; retrying in 60 s with a fresh copy",
                  flush=True)
            time.sleep(60)
            copy_tools(a, work)
            continue
        break
    return None, seconds, rss, f"exit {code}: {first_error(text)}"


def explain_lines(text):
    """tp-compile --explain's summary: the bytes per device and the
    collectives, and how many all-gathers sit outside the blocks (those
    that gather split gradients whole)."""
    keep = [line.strip() for line in text.splitlines()
            if line.startswith(("per device:", "collectives:"))]
    outside = re.search(r"^outside blocks:\n((?:  .*\n)*)", text, re.M)
    if outside:
        gathers = outside.group(1).count("all_gather")
        keep.append(f"outside the blocks: {gathers} all_gather (gradients "
                    f"gathered whole, loss)")
    return keep


def time_tp_run(a, artifact, inputs, work, devices):
    out = os.path.join(work, f"out{devices}")
    cmd = [os.path.join(work, "tp-run"), artifact, "--output-dir", out,
           "--warmup", "1", "--repeat", "1", "--quiet"]
    for name in inputs:
        cmd += ["--input", f"{name}={os.path.join(work, name + '.npy')}"]
    env = blas.env(1)
    # One sample per process so that the median is over independent runs.
    times, rss, threads = [], 0, "?"
    for _ in range(a.tp_repeat):
        code, text, peak = run_logged(cmd, env,
                                      os.path.join(work, f"run{devices}.log"))
        if code != 0:
            return None, f"exit {code}: {first_error(text)}", rss, None, None
        m = re.search(r"time per run: ([0-9.]+) ms \((.*)\)", text)
        times.append(float(m.group(1)) / 1e3)
        t = re.search(r"(\d+) OpenBLAS thread", m.group(2))
        threads = f"{t.group(1)} BLAS thread/rank" if t else m.group(2)
        rss = max(rss, peak or 0)
    return statistics.median(times), times, rss, threads, out


def compare(out, mapping, torch_loss, torch_grads):
    """tp-mlir's loss, its relative difference to torch's, and the largest
    gradient difference (absolute, and relative to that parameter's largest
    torch gradient)."""
    loss = float(np.load(os.path.join(out, "loss.npy")))
    summed, missing = {}, []
    for init, (param, transposed) in mapping.items():
        path = os.path.join(out, "grad." + init.replace("::", "__") + ".npy")
        if not os.path.exists(path):
            missing.append(init)
            continue
        g = np.load(path)
        summed[param] = summed.get(param, 0) + (g.T if transposed else g)
    worst_abs = worst_rel = 0.0
    for param, want in torch_grads.items():
        if param not in summed:
            missing.append(param)
            continue
        diff = float(np.abs(summed[param] - want).max())
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(float(np.abs(want).max()),
                                              1e-30))
    rel = abs(loss - torch_loss) / abs(torch_loss)
    return loss, rel, worst_abs, worst_rel, len(summed), missing


def time_torch_adamw(wrapper, inputs, a):
    """A whole training step of torch: zero_grad, forward, backward,
    clip_grad_norm_(1.0), AdamW(lr 1e-4, weight decay 0.01).step(). Seconds
    per step (median of steps 2..), and every step's loss."""
    torch.set_num_threads(1)
    args = tuple(inputs.values())
    params = list(wrapper.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    times, losses = [], []
    for _ in range(a.train_steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = wrapper(*args)
        out.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(out.item())
    return statistics.median(times[1:]), times, losses


def tensor_parallel_child(a):
    """Run in a child process (--tensor-parallel-child): the same model
    and batch under tensor_parallel.tensor_parallel(model, ["cpu", "cpu"])
    (its defaults: sharded=True, each shard in a Python thread, one torch
    and one BLAS thread each), trained as time_torch_adamw does; prints
    RESULT and the step times and losses as JSON."""
    import json
    import tensor_parallel
    torch.set_num_threads(1)
    wrapper = build(a)
    inputs = make_inputs(a)
    model = tensor_parallel.tensor_parallel(wrapper.model, ["cpu"] * 2)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
    times, losses = [], []
    for _ in range(a.train_steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        out = model(**inputs, use_cache=False).loss
        out.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(out.item())
    print("RESULT " + json.dumps({"times": times, "losses": losses}))


def time_tensor_parallel_adamw(a, work):
    """tensor_parallel's 2 CPU shards training the same model (a child
    process with --tensor-parallel-site on its path): (seconds per step,
    median of steps 2.., every step's seconds and loss, peak RSS) or
    (None, why not)."""
    import json
    env = dict(os.environ, **blas.env(1))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (env.get("PYTHONPATH"), a.tensor_parallel_site) if p)
    cmd = [sys.executable, os.path.abspath(__file__),
           "--tensor-parallel-child"] + [
        arg for arg in sys.argv[1:] if arg != "--tensor-parallel-child"]
    code, text, rss = run_logged(cmd, env,
                                 os.path.join(work, "tensor-parallel.log"))
    m = re.search(r"^RESULT (.*)$", text, re.M)
    if code != 0 or not m:
        if "No module named 'tensor_parallel'" in text:
            return None, (f"tensor_parallel is not in "
                          f"{a.tensor_parallel_site} (make bench-deps)")
        return None, f"exit {code}: {first_error(text)}"
    result = json.loads(m.group(1))
    return (statistics.median(result["times"][1:]), result["times"],
            result["losses"], rss)


def train_tp_mlir(a, model, devices, work, data_parallel=1, data="data"):
    """tp-compile --train adamw and tp-run --train for --train-steps steps
    on the one batch (--data-parallel D: `model` is exported at 1/D of the
    batch, and `data` holds the batch's D parts, one per replica):
    (seconds per step, median of steps 2.., every step's seconds and loss,
    peak RSS) or (None, error)."""
    tag = f"{devices}" + (f"-dp{data_parallel}" if data_parallel > 1 else "")
    artifact = os.path.join(work, f"train{tag}.tpa")
    code, text, _ = run_logged(
        [os.path.join(work, "tp-compile"), model, "--train", "adamw", "--lr",
         "1e-4", "--weight-decay", "0.01", "--clip-norm", "1.0", "--devices",
         str(devices), "--data-parallel", str(data_parallel), "--target",
         "cpu", "-o", artifact],
        dict(os.environ), os.path.join(work, f"train-compile{tag}.log"))
    if code != 0:
        return None, f"tp-compile --train: exit {code}: {first_error(text)}"
    code, text, rss = run_logged(
        [os.path.join(work, "tp-run"), artifact, "--train", "--data",
         os.path.join(work, data), "--steps", str(a.train_steps)],
        blas.env(1), os.path.join(work, f"train-run{tag}.log"))
    if code != 0:
        return None, f"tp-run --train: exit {code}: {first_error(text)}"
    steps = re.findall(r"^step \d+: loss (\S+) .*\(([0-9.]+) ms", text, re.M)
    times = [float(ms) / 1e3 for _, ms in steps]
    return (statistics.median(times[1:]), times, [float(l) for l, _ in steps],
            rss)


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def mib(n):
    return f"{n / 2**20:.0f} MiB" if n else "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304,
                    help="default 50304: GPT-2's 50257 padded to a multiple "
                         "of 64, as nanoGPT does; 2 ranks need it even")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3,
                    help="timed steps per side (default 3)")
    ap.add_argument("--tp-repeat", type=int,
                    help="tp-run samples, each a process with its own "
                         "warm-up step (default: --repeat)")
    ap.add_argument("--ranks", type=lambda t: [int(x) for x in t.split(",")],
                    default=[1, 2], help="tp-mlir rank counts (default 1,2)")
    ap.add_argument("--train-steps", type=int, default=3,
                    help="AdamW steps of the optimizer comparison (the "
                         "first warms up; 0: none)")
    ap.add_argument("--build-bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--keep", metavar="DIR",
                    help="work in DIR and keep the export and artifacts")
    ap.add_argument("--tensor-parallel-site",
                    default=os.path.join(HERE, ".cache", "site"),
                    help="where tensor_parallel 2.0.0 is installed (make "
                         "bench-deps: bench/.cache/site), added after "
                         "PYTHONPATH for its training row")
    ap.add_argument("--tensor-parallel-child", action="store_true",
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.tensor_parallel_child:
        return tensor_parallel_child(a)
    a.tp_repeat = a.tp_repeat or a.repeat

    tokens = a.batch * a.seq
    print(f"# training.py {datetime.datetime.now():%Y-%m-%d %H:%M}: "
          f"python3 bench/training.py {shlex.join(sys.argv[1:])}".rstrip())
    print(f"# machine: {cpu_model()}, {os.cpu_count()} cores "
          f"({len(os.sched_getaffinity(0))} usable), "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f}"
          f" GiB; load average {os.getloadavg()[0]:.2f} at start; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')}")
    print(f"# torch {torch.__version__}, transformers "
          f"{transformers.__version__}; tp-compile built "
          f"{datetime.datetime.fromtimestamp(os.path.getmtime(os.path.join(a.build_bin, 'tp-compile'))):%Y-%m-%d %H:%M}")
    print(f"# GPT2LMHeadModel: {a.layers} layers, hidden {a.hidden}, "
          f"{a.heads} heads, vocab {a.vocab}, f32; batch {a.batch} x seq "
          f"{a.seq} ({tokens} tokens), labels = input_ids, its own loss")
    print(f"# first table: a step = forward + loss + all gradients, no "
          f"optimizer; median of {a.repeat} torch "
          f"steps after 1 warm-up, of {a.tp_repeat} tp-run processes of 1 "
          f"warm-up + 1 timed step each", flush=True)

    begin = time.perf_counter()

    def progress(what):
        print(f"[{time.perf_counter() - begin:4.0f} s] {what}", flush=True)

    work = a.keep or tempfile.mkdtemp(prefix="tp-training-")
    os.makedirs(work, exist_ok=True)
    try:
        copy_tools(a, work)
        wrapper = build(a)
        params = sum(p.numel() for p in wrapper.parameters())
        inputs = make_inputs(a)
        for name, value in inputs.items():
            np.save(os.path.join(work, name + ".npy"), value.numpy())
        model = os.path.join(work, "model.onnx")
        start = time.perf_counter()
        torch.onnx.export(wrapper, tuple(inputs.values()), model,
                          input_names=list(inputs), output_names=["loss"],
                          opset_version=14)
        export_s = time.perf_counter() - start
        mapping, other = gradient_mapping(wrapper, model)
        print(f"exported {params / 1e6:.1f}M parameters in "
              f"{export_s:.0f} s: {mib(os.path.getsize(model))}, "
              f"{len(mapping)} float initializers from parameters"
              + (f", {len(other)} others ({', '.join(other[:3])})"
                 if other else ""), flush=True)

        progress("torch x1")
        torch_s, torch_times, torch_loss, torch_grads = time_torch(
            wrapper, inputs, a)
        import resource
        torch_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

        rows = {}
        for ranks in a.ranks:
            progress(f"tp-compile --gradients --devices {ranks}")
            artifact, compile_s, compile_rss, text = compile_artifact(
                a, model, ranks, work)
            row = rows[ranks] = dict(compile_s=compile_s,
                                     compile_rss=compile_rss)
            if artifact is None:
                row["error"] = f"tp-compile {text}"
                progress(f"tp-compile --devices {ranks} FAILED: {text}")
                continue
            row["explain"] = explain_lines(text)
            progress(f"tp-run x{ranks}")
            run_s, run_times, run_rss, threads, out = time_tp_run(
                a, artifact, inputs, work, ranks)
            if run_s is None:
                row["error"] = f"tp-run {run_times}"
                progress(f"tp-run x{ranks} FAILED: {run_times}")
                continue
            row.update(s=run_s, times=run_times, rss=run_rss,
                       threads=threads,
                       check=compare(out, mapping, torch_loss, torch_grads),
                       grad_bytes=sum(os.path.getsize(os.path.join(out, f))
                                      for f in os.listdir(out)
                                      if f.startswith("grad.")))
        # Whole steps with the optimizer, on the same batch: torch's loop
        # and tp-run --train (the gradient timings above are done with the
        # initial weights).
        trained = {}
        if a.train_steps > 1:
            os.makedirs(os.path.join(work, "data", "0"), exist_ok=True)
            for name in inputs:
                shutil.copy(os.path.join(work, name + ".npy"),
                            os.path.join(work, "data", "0", name + ".npy"))
            for ranks in a.ranks:
                progress(f"tp-compile --train adamw, tp-run --train x{ranks}")
                trained[ranks] = train_tp_mlir(a, model, ranks, work)
            # Data parallelism: 2 replicas of 1 rank, each on half the
            # batch (exported at that batch), the same step as above.
            if a.batch % 2 == 0:
                progress("tp-compile --train --data-parallel 2, tp-run "
                         "--train")
                half = {k: v[:a.batch // 2] for k, v in inputs.items()}
                half_model = os.path.join(work, "model-half.onnx")
                torch.onnx.export(wrapper, tuple(half.values()), half_model,
                                  input_names=list(half),
                                  output_names=["loss"], opset_version=14)
                for d in range(2):
                    part = os.path.join(work, "data-dp", str(d))
                    os.makedirs(part, exist_ok=True)
                    for name, value in inputs.items():
                        rows_ = value[d * a.batch // 2:(d + 1) * a.batch // 2]
                        np.save(os.path.join(part, name + ".npy"),
                                rows_.numpy())
                trained["dp2"] = train_tp_mlir(a, half_model, 1, work,
                                               data_parallel=2,
                                               data="data-dp")
            progress("torch AdamW steps")
            trained["torch"] = time_torch_adamw(wrapper, inputs, a)
            progress("tensor_parallel 2 CPU shards, AdamW steps")
            trained["tensor_parallel"] = time_tensor_parallel_adamw(a, work)
        progress("done")
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)

    ok = {n: r for n, r in rows.items() if "error" not in r}
    print(f"\none training step (forward + loss + all gradients; no "
          f"optimizer), batch {a.batch} x seq {a.seq}, f32; median "
          f"of {a.repeat} (torch) / {a.tp_repeat} (tp-mlir) after 1 warm-up")
    print(f"  {'':18} {'s/step':>8} {'tokens/s':>9} {'peak RSS':>9}  "
          f"samples (s)")
    print(f"  {'torch 1 thread':18} {torch_s:8.4f} {tokens / torch_s:9.0f} "
          f"{mib(torch_rss):>9}  " + " ".join(f"{t:.4f}"
                                              for t in torch_times))
    for ranks, r in rows.items():
        label = f"tp-mlir {ranks} rank{'s' if ranks > 1 else ''}"
        if "error" in r:
            print(f"  {label:18} FAILED: {r['error']}")
            continue
        print(f"  {label:18} {r['s']:8.4f} {tokens / r['s']:9.0f} "
              f"{mib(r['rss']):>9}  " + " ".join(f"{t:.4f}"
                                                 for t in r['times'])
              + f"  ({r['threads']})")
    if 1 in ok:
        print(f"  torch 1 thread / tp-mlir 1 rank: "
              f"{torch_s / ok[1]['s']:.2f}x (speed-up; > 1: tp-mlir faster)")
    if 1 in ok and 2 in ok:
        print(f"  tp-mlir 1 rank / 2 ranks: {ok[1]['s'] / ok[2]['s']:.2f}x"
              f" (speed-up of 2 ranks x 1 BLAS thread on "
              f"{os.cpu_count()} cores)")
    if 2 in ok:
        print(f"  torch 1 thread / tp-mlir 2 ranks: "
              f"{torch_s / ok[2]['s']:.2f}x")
    print(f"  export {export_s:.1f} s")
    for ranks, r in rows.items():
        print(f"  tp-compile --gradients --devices {ranks}: "
              f"{r['compile_s']:.1f} s, peak RSS {mib(r['compile_rss'])}"
              + (" (failed)" if "error" in r else ""))
        for line in r.get("explain", []):
            print(f"    explain: {line}")
        if "grad_bytes" in r:
            print(f"    gradients: each rank computes those of its weights "
                  f"(as 'weights' per device above); tp-run returns them "
                  f"whole: {mib(r['grad_bytes'])} of grad.*.npy")
    print(f"  torch loss {torch_loss:.7g}")
    for ranks, r in ok.items():
        loss, rel, g_abs, g_rel, covered, missing = r["check"]
        print(f"  tp-mlir x{ranks} loss {loss:.7g}: rel diff {rel:.1e} "
              f"({'within' if rel <= 1e-4 else 'NOT within'} 1e-4); "
              f"{covered} of {len(torch_grads)} gradients, max abs diff "
              f"{g_abs:.2e} ({g_rel:.1e} of that parameter's max |grad|)"
              + (f"; missing {', '.join(missing[:4])}" if missing else ""))
    if "torch" in trained:
        torch_step, torch_times, torch_losses = trained["torch"]
        print(f"\nwhole training steps with the optimizer: AdamW (lr 1e-4, "
              f"weight decay 0.01) after clipping to global norm 1.0, "
              f"{a.train_steps} steps on the batch above, median of steps "
              f"2..{a.train_steps}")
        print(f"  {'':18} {'s/step':>8} {'tokens/s':>9}  losses")
        print(f"  {'torch 1 thread':18} {torch_step:8.4f} "
              f"{tokens / torch_step:9.0f}  "
              + " ".join(f"{l:.7g}" for l in torch_losses))
        steps = {}
        for ranks in list(a.ranks) + ["dp2"]:
            label = (f"tp-mlir {ranks} rank{'s' if ranks > 1 else ''}"
                     if ranks != "dp2" else "tp-mlir DP 2 x TP 1")
            r = trained.get(ranks)
            if ranks == "dp2" and r is None:
                continue
            if r is None or r[0] is None:
                print(f"  {label:18} FAILED: {r[1] if r else '?'}")
                continue
            step_s, times, losses, _ = r
            steps[ranks] = step_s
            worst = max(abs(x - y) / abs(y)
                        for x, y in zip(losses, torch_losses))
            print(f"  {label:18} {step_s:8.4f} {tokens / step_s:9.0f}  "
                  + " ".join(f"{l:.7g}" for l in losses)
                  + f"  (loss rel diff to torch at most {worst:.1e})")
            print(f"  torch / {label[8:]}: {torch_step / step_s:.2f}x")
        r = trained.get("tensor_parallel")
        label = "tensor_parallel x2"
        if r is not None and r[0] is None:
            print(f"  {label:18} not run: {r[1]}")
        elif r is not None:
            step_s, times, losses, _ = r
            worst = max(abs(x - y) / abs(y)
                        for x, y in zip(losses, torch_losses))
            print(f"  {label:18} {step_s:8.4f} {tokens / step_s:9.0f}  "
                  + " ".join(f"{l:.7g}" for l in losses)
                  + f"  (loss rel diff to torch at most {worst:.1e}; 2 "
                    f"shards as Python threads, sharded=True)")
            for ours in (2, "dp2"):
                if ours in steps:
                    name = "2 ranks" if ours == 2 else "DP 2 x TP 1"
                    print(f"  tensor_parallel x2 / tp-mlir {name}: "
                          f"{step_s / steps[ours]:.2f}x (> 1: tp-mlir "
                          f"faster)")
        for other in (2, "dp2"):
            if 1 in steps and other in steps:
                label = "2 ranks (TP 2)" if other == 2 else "DP 2 x TP 1"
                print(f"  1 rank / {label}: {steps[1] / steps[other]:.2f}x "
                      f"(speed-up of 2 ranks on {os.cpu_count()} cores)")
    print(f"  load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
