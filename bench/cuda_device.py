"""tp-mlir's --target cuda artifacts on a real GPU: numerics against the
references, then decode speed and the HBM bandwidth it reaches, beside
PyTorch on the same GPU, in one run.

Two halves, because the machine that builds (MLIR, nvcc) is not the one
with the GPU:

  python3 bench/cuda_device.py prepare DIR     # here: tp-compile, no GPU
  python3 bench/cuda_device.py run DIR         # there: tp-run, the GPU
  python3 bench/cuda_device.py profile DIR     # there: a decode step's kernels

`prepare` writes into DIR a tp-run linked with nothing but libc (LLVM's
Support library and libstdc++ static; no MPI: one process, one GPU), and
1-rank --target cuda artifacts with their inputs and references:

  checks    the bundled GPT-2, Llama, BERT and CNN (f32, and GPT-2 in bf16),
            outputs against the torch references (f32: atol = rtol = 1e-4,
            looser than the CPU's 1e-5 for cuBLAS's own summation order;
            bf16: atol 0.1, rtol 0.02, as test/Numerics/mixed-precision);
            generation with the KV cache (transformers' GPT-2 and Llama
            exported with past; greedy, beams 4, bf16; Llama from NaN
            caches), tokens against transformers' generate(); training
            (transformers' GPT-2 exported with its loss by
            utils/reference-run/run_training.py, 20 AdamW steps in f32,
            bf16 and f16 with loss scaling), every step's loss against
            the same artifact's --target cpu twin trained here (f32: rel
            1e-3, cuBLAS's summation order compounding over the steps;
            bf16/f16: 2e-2);
  speed     the GPT-2-small-shaped decoder of bench/generation.py (12
            layers, hidden 768, vocab 50304), f32 and bf16, --max-batch 8,
            prompt 32, 64 new tokens. Its weights are each tensor's first
            16384 values repeated (the distribution of the real ones, and a
            weight file that compresses to almost nothing, so that 0.7 GB
            travels as a few MB of .xz); speed does not depend on values.
Files of 256 KiB and more travel as .xz.

`run` finds the CUDA libraries, unpacks the weights, runs every check, and
times tp-run --generate (CUDA graphs on, and off for comparison) and
transformers' generate() in PyTorch on the same GPU and shapes (the same
config, random weights, eager attention, default cache), then measures the
GPU's device-to-device copy bandwidth. HBM bandwidth of a decode step is
the bytes of weights it reads (every weight once) over its time. It prints a table and asserts nothing.
"""

import argparse
import glob
import json
import lzma
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
MODELS = os.path.join(REPO, "test", "models")
SPEED = dict(layers=12, hidden=768, heads=12, vocab=50304, prompt=32, new=64,
             batches=[1, 8])


# --- prepare (the build machine) ---

def build_tp_run(out):
    """tp-run with LLVM's Support library, OpenSSL's libcrypto and
    libstdc++ linked in, without MPI: it needs only libc where it runs."""
    llvm = subprocess.check_output(["llvm-config-22", "--libdir"],
                                   text=True).strip()
    includes = subprocess.check_output(["llvm-config-22", "--includedir"],
                                       text=True).strip()
    runtime = os.path.join(REPO, "lib", "Runtime")
    # Every runtime source but MPI's (MpiUnavailable.cpp stands in).
    sources = [os.path.join(REPO, "tools", "tp-run", "tp-run.cpp")] + sorted(
        path for path in glob.glob(os.path.join(runtime, "*.cpp"))
        if os.path.basename(path) != "MpiCommunicator.cpp")
    # -fno-math-errno: Optimizers.cpp's (CMakeLists.txt), harmless to all.
    subprocess.run(["g++", "-std=c++17", "-O2", "-DNDEBUG", "-fno-math-errno",
                    "-I", os.path.join(REPO, "include"), "-I", runtime,
                    "-I", includes] + sources +
                   ["-o", os.path.join(out, "tp-run"),
                    os.path.join(llvm, "libLLVMSupport.a"),
                    os.path.join(llvm, "libLLVMDemangle.a"),
                    # Sha256.cpp's OpenSSL, static (libssl-dev).
                    "/usr/lib/x86_64-linux-gnu/libcrypto.a",
                    "-static-libstdc++", "-static-libgcc", "-lpthread",
                    "-ldl"], check=True)


def compile_cuda(tp_compile, model, artifact, extra):
    subprocess.run([tp_compile, model, "--target", "cuda", "--devices", "1",
                    "-o", artifact] + extra, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def tiled_copy(src, dst):
    """The ONNX model at src with every large float initializer replaced by
    its first 16384 values repeated to its shape."""
    import onnx
    from onnx import numpy_helper
    model = onnx.load(src)
    for i, init in enumerate(model.graph.initializer):
        array = numpy_helper.to_array(init)
        if array.dtype == np.float32 and array.size > 16384:
            tile = array.reshape(-1)[:16384]
            tiled = np.resize(tile, array.shape).astype(np.float32)
            model.graph.initializer[i].CopyFrom(
                numpy_helper.from_array(tiled, init.name))
    onnx.save(model, dst, save_as_external_data=True,
              all_tensors_to_one_file=True, location="weights.bin")


def pack(out):
    """Every file of 256 KiB or more under `out` -> .xz, so that the folder
    travels within the device tool's 64 MiB (the run unpacks them)."""
    for root, _, files in os.walk(out):
        for name in files:
            path = os.path.join(root, name)
            if name.endswith(".xz") or os.path.getsize(path) < 256 << 10:
                continue
            with open(path, "rb") as src, lzma.open(path + ".xz", "wb",
                                                    preset=6) as dst:
                shutil.copyfileobj(src, dst, 1 << 24)
            os.remove(path)


def unpack(folder):
    for packed in glob.glob(os.path.join(folder, "**", "*.xz"),
                            recursive=True):
        path = packed[:-3]
        with lzma.open(packed) as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 24)
        os.remove(packed)
        if path.endswith(".so") or os.path.basename(path) == "tp-run":
            os.chmod(path, 0o755)


def prepare(a):
    out = os.path.abspath(a.dir)
    os.makedirs(out, exist_ok=True)
    tp_compile = os.path.join(a.build_bin, "tp-compile")
    build_tp_run(out)
    checks = []

    def forward(name, folder, shapes, inputs, outputs, dtype=None,
                tol=(1e-4, 1e-4)):
        art = os.path.join(out, name + ".tpa")
        extra = sum((["--input-shape", s] for s in shapes), [])
        if dtype:
            extra += ["--dtype", dtype]
        compile_cuda(tp_compile, os.path.join(folder, "model.onnx"), art,
                     extra)
        data = os.path.join(out, name + ".data")
        os.makedirs(data, exist_ok=True)
        for n in inputs + outputs:
            shutil.copy(os.path.join(folder, n + ".npy"), data)
        checks.append(dict(kind="forward", name=name, inputs=inputs,
                           outputs=outputs, atol=tol[0], rtol=tol[1]))

    forward("gpt2", os.path.join(MODELS, "gpt2"), ["input_ids=2x16"],
            ["input_ids"], ["logits"])
    forward("gpt2-bf16", os.path.join(MODELS, "gpt2"), ["input_ids=2x16"],
            ["input_ids"], ["logits"], "bf16", (0.1, 0.02))
    forward("llama", os.path.join(MODELS, "llama"), ["input_ids=2x16"],
            ["input_ids"], ["logits"])
    forward("bert", os.path.join(MODELS, "bert"), [],
            ["input_ids", "attention_mask"],
            ["last_hidden_state", "pooler_output"])
    forward("cnn", os.path.join(MODELS, "cnn"), [], ["input"], ["logits"])

    def generation(name, folder, beams=1, dtype=None, prefill=None,
                   poison=False):
        art = os.path.join(out, name + ".tpa")
        extra = ["--max-seq", "24", "--max-batch", str(2 * beams)]
        if dtype:
            extra += ["--dtype", dtype]
        if prefill:
            extra += ["--prefill-len", str(prefill)]
        compile_cuda(tp_compile, os.path.join(folder, "model.onnx"), art,
                     extra)
        data = os.path.join(out, name + ".data")
        os.makedirs(data, exist_ok=True)
        reference = "greedy" if beams == 1 else f"beam{beams}"
        for n in ("input_ids", "attention_mask", reference):
            shutil.copy(os.path.join(folder, n + ".npy"), data)
        checks.append(dict(kind="generate", name=name, beams=beams,
                           reference=reference, poison=poison))

    # Training: GPT-2 with its loss, as training.test exports it; the
    # reference losses are the CPU target's, trained here.
    keep = os.path.join(a.work, "training")
    site = os.path.join(MODELS, "hf", ".cache", "site")
    subprocess.run(
        ["/usr/bin/python3", os.path.join(REPO, "utils", "reference-run",
                                          "run_training.py"),
         "--models", "gpt2", "--configs", "tp=1", "--steps", "2", "--keep",
         keep, "--tp-compile", tp_compile,
         "--tp-run", os.path.join(a.build_bin, "tp-run"),
         "--tp-export-weights", os.path.join(a.build_bin,
                                             "tp-export-weights")],
        check=True, stdout=subprocess.DEVNULL,
        env=dict(os.environ, PYTHONPATH=site, HF_HUB_OFFLINE="1"))
    train_model = os.path.join(keep, "gpt2", "model.onnx")
    train_data = os.path.join(out, "train.data")
    shutil.copytree(os.path.join(keep, "gpt2", "data"), train_data,
                    dirs_exist_ok=True)
    for dtype in ("f32", "bf16", "f16"):
        flags = ["--train", "adamw", "--lr", "1e-3", "--clip-norm", "1.0"] + (
            ["--dtype", dtype] if dtype != "f32" else [])
        name = f"train-{dtype}"
        cpu = os.path.join(a.work, name + "-cpu.tpa")
        subprocess.run([tp_compile, train_model, "--devices", "1",
                        "--target", "cpu", "-o", cpu] + flags, check=True,
                       stderr=subprocess.DEVNULL)
        trained = subprocess.run(
            [os.path.join(a.build_bin, "tp-run"), cpu, "--train", "--data",
             train_data, "--steps", "20"], check=True, capture_output=True,
            text=True).stdout
        losses = [float(x) for x in re.findall(r"^step \d+: loss (\S+)",
                                               trained, re.M)]
        compile_cuda(tp_compile, train_model,
                     os.path.join(out, name + ".tpa"), flags)
        checks.append(dict(kind="train", name=name, data="train.data",
                           losses=losses,
                           rtol=1e-3 if dtype == "f32" else 2e-2))

    past = os.path.join(MODELS, "hf", "with-past")
    generation("gen-gpt2", os.path.join(past, "gpt2"))
    generation("gen-gpt2-beams", os.path.join(past, "gpt2"), beams=4,
               prefill=4, poison=True)
    generation("gen-gpt2-bf16", os.path.join(past, "gpt2"), dtype="bf16")
    generation("gen-llama", os.path.join(past, "llama"), prefill=4,
               poison=True)

    # The speed decoder: bench/generation.py's export, weights tiled.
    key = "gen_L{layers}_h{hidden}_a{heads}_v{vocab}".format(**SPEED)
    source = os.path.join(HERE, ".cache", key, "model.onnx")
    if not os.path.exists(source):
        sys.exit(f"{source} is missing: run bench/generation.py once (it "
                 "exports the decoder)")
    tiled = os.path.join(a.work, "tiled")
    os.makedirs(tiled, exist_ok=True)
    tiled_model = os.path.join(tiled, "model.onnx")
    if not os.path.exists(tiled_model):
        tiled_copy(source, tiled_model)
    speed = []
    for dtype in ("f32", "bf16"):
        art = os.path.join(out, f"speed-{dtype}.tpa")
        compile_cuda(tp_compile, tiled_model, art,
                     ["--max-seq", str(SPEED["prompt"] + SPEED["new"]),
                      "--max-batch", str(max(SPEED["batches"])),
                      "--prefill-len", str(SPEED["prompt"])] +
                     (["--dtype", dtype] if dtype != "f32" else []))
        weights = sum(os.path.getsize(p) for p in glob.glob(
            os.path.join(art, "rank-*.safetensors")))
        speed.append(dict(dtype=dtype, artifact=os.path.basename(art),
                          weight_bytes=weights))
    for batch in SPEED["batches"]:
        rng = np.random.default_rng(batch)
        np.save(os.path.join(out, f"ids{batch}.npy"),
                rng.integers(3, SPEED["vocab"], size=(batch, SPEED["prompt"]),
                             dtype=np.int64))
    with open(os.path.join(out, "plan.json"), "w") as f:
        json.dump(dict(checks=checks, speed=speed, shape=SPEED), f, indent=1)
    pack(out)
    size = sum(os.path.getsize(p) for p in glob.glob(
        os.path.join(out, "**", "*"), recursive=True) if os.path.isfile(p))
    print(f"prepared {out}: {len(checks)} checks, {len(speed)} speed "
          f"artifacts, {size / 2**20:.1f} MiB")


# --- run (the GPU machine) ---

def find_cuda_libraries():
    """Folders holding libcudart.so.13, libcublas.so.13 and libnccl.so.2:
    the toolkit's, or the nvidia-* Python packages'."""
    wanted = ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
              "libnccl.so.2"]
    roots = ["/usr/local/cuda/lib64", "/usr/local/cuda/targets",
             "/usr/local/cuda", "/usr/local/lib", "/usr/lib/x86_64-linux-gnu",
             "/opt", "/usr/local"]
    found = {}
    for root in roots:
        for name in wanted:
            if name in found:
                continue
            hits = glob.glob(os.path.join(root, "**", name), recursive=True)
            if hits:
                found[name] = os.path.dirname(hits[0])
    missing = [n for n in wanted if n not in found]
    return sorted(set(found.values())), missing


def tp_run(a, args, env=None, timeout=90):
    command = [os.path.join(a.dir, "tp-run")] + args
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              timeout=timeout,
                              env=dict(os.environ, **(env or {})))
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 124, "",
                                           f"timed out after {timeout} s")


def run_checks(a, plan, log):
    failures = 0
    for check in plan["checks"]:
        name = check["name"]
        art = os.path.join(a.dir, name + ".tpa")
        data = os.path.join(a.dir, name + ".data")
        out = os.path.join(a.dir, name + ".out")
        if check["kind"] == "train":
            steps = len(check["losses"])
            p = tp_run(a, [art, "--train", "--data",
                           os.path.join(a.dir, check["data"]), "--steps",
                           str(steps)])
            if p.returncode:
                log(f"{name}: tp-run --train failed: "
                    f"{p.stderr.strip()[-400:]}")
                failures += 1
                continue
            got = [float(x) for x in re.findall(r"^step \d+: loss (\S+)",
                                                p.stdout, re.M)]
            rel = [abs(g - w) / abs(w) for g, w in zip(got, check["losses"])]
            ok = len(got) == steps and max(rel) <= check["rtol"]
            failures += not ok
            log(f"{name}: {len(got)} steps, loss {got[0]:.5g} -> "
                f"{got[-1]:.5g}, max rel diff to the CPU target's "
                f"{max(rel):.2g} {'ok' if ok else 'FAIL'}"
                if got else f"{name}: no step printed FAIL")
            continue
        if check["kind"] == "forward":
            args = [art, "--output-dir", out, "--quiet", "--repeat", "3"]
            for n in check["inputs"]:
                args += ["--input", f"{n}={os.path.join(data, n + '.npy')}"]
            p = tp_run(a, args)
            if p.returncode:
                log(f"{name}: tp-run failed: {p.stderr.strip()[-400:]}")
                failures += 1
                continue
            for n in check["outputs"]:
                got = np.load(os.path.join(out, n + ".npy"))
                want = np.load(os.path.join(data, n + ".npy"))
                diff = float(np.abs(got - want).max())
                ok = bool(np.all(np.abs(got - want) <= check["atol"] +
                                 check["rtol"] * np.abs(want)))
                failures += not ok
                log(f"{name} {n}: max abs diff {diff:.3g} "
                    f"{'ok' if ok else 'FAIL'}")
        else:
            args = [art, "--generate", "10", "--output-dir", out, "--quiet",
                    "--num-beams", str(check["beams"])]
            for n in ("input_ids", "attention_mask"):
                args += ["--input", f"{n}={os.path.join(data, n + '.npy')}"]
            p = tp_run(a, args, {"TP_POISON_CACHES": "1"}
                       if check["poison"] else None)
            if p.returncode:
                log(f"{name}: tp-run failed: {p.stderr.strip()[-400:]}")
                failures += 1
                continue
            tokens = np.load(os.path.join(out, "tokens.npy"))
            want = np.load(os.path.join(data, check["reference"] + ".npy"))
            same = np.array_equal(tokens, want[:, :tokens.shape[1]])
            failures += not same
            log(f"{name}: 10 new tokens {'equal' if same else 'DIFFER'} to "
                f"transformers' {check['reference']}")
    return failures


def parse_generation(text):
    prefill = float(re.search(r"prefill: ([0-9.e+-]+) ms", text).group(1))
    per_token = float(re.search(r"decode: ([0-9.e+-]+) ms per token",
                                text).group(1))
    return prefill, per_token


def torch_generate(shape, dtype, batch):
    """transformers' generate() on the GPU, the same shapes; ms/token."""
    import torch
    import transformers
    cfg = transformers.GPT2Config(
        vocab_size=shape["vocab"], n_positions=1024, n_embd=shape["hidden"],
        n_layer=shape["layers"], n_head=shape["heads"], resid_pdrop=0,
        embd_pdrop=0, attn_pdrop=0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval().to(
        "cuda", dtype=torch.float32 if dtype == "f32" else torch.bfloat16)
    ids = torch.randint(3, shape["vocab"], (batch, shape["prompt"]),
                        device="cuda")
    kwargs = dict(attention_mask=torch.ones_like(ids), do_sample=False,
                  pad_token_id=0)

    def timed(new):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kwargs)
        torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        timed(4)
        prefill = timed(1)
        total = timed(shape["new"])
    return prefill * 1e3, (total - prefill) / (shape["new"] - 1) * 1e3


def copy_bandwidth():
    """Device-to-device copy of 2 GiB: bytes read + written per second."""
    import torch
    x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        y.copy_(x)
    end.record()
    torch.cuda.synchronize()
    return 2 * 10 * x.numel() / (start.elapsed_time(end) / 1e3)


def run(a):
    a.dir = os.path.abspath(a.dir)
    os.makedirs(a.out, exist_ok=True)
    lines = []

    def log(text):
        print(text, flush=True)
        lines.append(text)

    folders, missing = find_cuda_libraries()
    if missing:
        log(f"CUDA libraries not found: {', '.join(missing)}")
    os.environ["LD_LIBRARY_PATH"] = ":".join(
        folders + [os.environ.get("LD_LIBRARY_PATH", "")])
    smi = "no nvidia-smi"
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,"
                              "memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip()
    log(f"# cuda_device.py run {time.strftime('%Y-%m-%d %H:%M')}: {smi}")
    with open(os.path.join(a.dir, "plan.json")) as f:
        plan = json.load(f)
    unpack(a.dir)

    log("## numerics (1 rank, --target cuda)")
    failures = run_checks(a, plan, log)
    log(f"{'PASS' if not failures else 'FAIL'}: {failures} failures")

    shape = plan["shape"]
    log(f"## decode: GPT-2-small-shaped decoder ({shape['layers']} layers, "
        f"hidden {shape['hidden']}, vocab {shape['vocab']}), prompt "
        f"{shape['prompt']}, {shape['new']} new tokens, greedy")
    bandwidth = None
    try:
        bandwidth = copy_bandwidth()
        log(f"device-to-device copy: {bandwidth / 1e12:.2f} TB/s "
            "(read + written)")
    except Exception as e:  # noqa: BLE001 - report and go on
        log(f"copy bandwidth: not measured ({e})")
    log(f"{'dtype':<5} {'batch':>5} {'what':<22} {'prefill ms':>10} "
        f"{'ms/token':>9} {'tokens/s':>9} {'weights GB/s':>12}")
    for entry in plan["speed"]:
        art = os.path.join(a.dir, entry["artifact"])
        # A decode step reads every weight once (the tied embedding: all of
        # it by the LM head, a few rows by the gather).
        step_bytes = entry["weight_bytes"]
        for batch in shape["batches"]:
            ids = os.path.join(a.dir, f"ids{batch}.npy")
            for label, env in (("tp-mlir (graphs)", None),
                               ("tp-mlir (no graphs)",
                                {"TP_CUDA_GRAPHS": "0"})):
                p = tp_run(a, [art, "--generate", str(shape["new"]),
                               "--input", f"input_ids={ids}", "--output-dir",
                               os.path.join(a.dir, "speed.out"), "--quiet"],
                           env)
                if p.returncode:
                    log(f"{entry['dtype']:<5} {batch:>5} {label:<22} failed: "
                        f"{p.stderr.strip()[-300:]}")
                    continue
                prefill, per_token = parse_generation(p.stdout)
                log(f"{entry['dtype']:<5} {batch:>5} {label:<22} "
                    f"{prefill:>10.2f} {per_token:>9.3f} "
                    f"{batch / per_token * 1e3:>9.0f} "
                    f"{step_bytes / per_token / 1e6:>12.0f}")
            try:
                prefill, per_token = torch_generate(shape, entry["dtype"],
                                                    batch)
                log(f"{entry['dtype']:<5} {batch:>5} {'torch generate()':<22} "
                    f"{prefill:>10.2f} {per_token:>9.3f} "
                    f"{batch / per_token * 1e3:>9.0f} "
                    f"{step_bytes / per_token / 1e6:>12.0f}")
            except Exception as e:  # noqa: BLE001 - report and go on
                log(f"{entry['dtype']:<5} {batch:>5} torch generate(): "
                    f"not run ({e})")
    with open(os.path.join(a.out, "cuda_device.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def kernel_times(a, artifact, ids, new):
    """Per kernel name: (launches, total GPU microseconds) of one tp-run
    --generate NEW, measured by Nsight Compute (graphs off, so that each
    kernel is its own launch)."""
    report = os.path.join(a.dir, "ncu.csv")
    env = dict(os.environ, TP_CUDA_GRAPHS="0")
    with open(report, "w") as f:
        subprocess.run(["ncu", "--metrics", "gpu__time_duration.sum", "--csv",
                        "--print-units", "base", "--clock-control", "none",
                        os.path.join(a.dir, "tp-run"), artifact, "--generate",
                        str(new), "--input", f"input_ids={ids}",
                        "--output-dir", os.path.join(a.dir, "ncu.out"),
                        "--quiet"], stdout=f, stderr=subprocess.DEVNULL,
                       env=env, timeout=240, check=True)
    import csv
    times = {}
    with open(report) as f:
        rows = [line for line in f if line.startswith('"')]
    for row in csv.DictReader(rows):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0][:60]
        count, total = times.get(name, (0, 0.0))
        value = float(row["Metric Value"].replace(",", ""))
        times[name] = (count + 1, total + value / 1e3)
    return times


def profile(a):
    """Where a decode step's GPU time goes: the kernels of --generate 5
    minus those of --generate 1 (the prefill and first token), over the 4
    steps between."""
    a.dir = os.path.abspath(a.dir)
    folders, _ = find_cuda_libraries()
    os.environ["LD_LIBRARY_PATH"] = ":".join(
        folders + [os.environ.get("LD_LIBRARY_PATH", "")])
    unpack(a.dir)
    with open(os.path.join(a.dir, "plan.json")) as f:
        plan = json.load(f)
    for entry in plan["speed"]:
        if entry["dtype"] not in a.dtype:
            continue
        art = os.path.join(a.dir, entry["artifact"])
        ids = os.path.join(a.dir, "ids1.npy")
        p = tp_run(a, [art, "--generate", "64", "--input", f"input_ids={ids}",
                       "--output-dir", os.path.join(a.dir, "p.out")])
        print(f"## {entry['dtype']} batch 1, tp-run --generate 64:")
        print(p.stdout.strip() or p.stderr.strip()[-300:])
        first = kernel_times(a, art, ids, 1)
        more = kernel_times(a, art, ids, 5)
        steps = {name: ((count - first.get(name, (0, 0))[0]) / 4,
                        (total - first.get(name, (0, 0.0))[1]) / 4)
                 for name, (count, total) in more.items()}
        total = sum(t for _, t in steps.values())
        print(f"## {entry['dtype']}: GPU time of a decode step, by kernel "
              f"(Nsight Compute, graphs off): {total:.1f} us")
        for name, (count, micros) in sorted(steps.items(),
                                            key=lambda kv: -kv[1][1])[:15]:
            print(f"{micros:9.1f} us {count:6.1f} launches  {name}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["prepare", "run", "profile"])
    ap.add_argument("dir")
    ap.add_argument("--build-bin", default=os.path.join(REPO, "build", "bin"))
    ap.add_argument("--work", default=os.path.join(HERE, ".cache", "cuda"),
                    help="prepare: where the tiled model is kept")
    ap.add_argument("--out", default=os.environ.get("OUT", "."),
                    help="run: where cuda_device.txt goes")
    ap.add_argument("--dtype", nargs="+", default=["f32"],
                    help="profile: which speed artifacts")
    a = ap.parse_args()
    return {"prepare": prepare, "run": run, "profile": profile}[a.mode](a)


if __name__ == "__main__":
    sys.exit(main())
