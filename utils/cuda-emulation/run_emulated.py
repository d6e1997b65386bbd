#!/usr/bin/env python3
"""Run a bundled model's --target cuda code on the CPU and compare outputs.

    run_emulated.py test/models/gpt2 --input-shape input_ids=2x16 \\
        --config tp=2 --config tp=2,pp=2 --config tp=2,sp

For machines without a GPU: tp-compile --target cuda writes model.cu (nvcc
builds the real library as usual; --nvcc true skips that), then model.cu is
rebuilt with the host C++ compiler against include/tp_cuda_emulation.h, a
CPU stand-in for the CUDA runtime, cuBLAS and NCCL, and run by tp-run's CUDA
path on thread ranks. Kernel launches are rewritten to tp_emu::launch, or
tp_emu::launchWarps for kernels whose lanes shuffle values or wait for
each other (__syncwarp). Each
artifact runs three forward passes (tp-run --repeat 3): a stage's first call
runs it as it is, its second captures it as a CUDA graph and replays it, the
later ones replay it; every call but the first must have been a replay, and
the outputs (the last pass's) must match the references.
A config is a comma-separated list of tp=N, pp=P, mb=M (micro-batches), sp;
a run passes when
|out - ref| <= atol + rtol * |ref| everywhere (references beside the model).
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "reference-run"))
from run_artifact import mpirun_prefix, parse_config, read_manifest  # noqa: E402
LAUNCH = re.compile(r"(\w+(?:<\w+>)?)\s*<<<(.*?)>>>\(", re.DOTALL)
KERNEL = re.compile(r"__global__\s+void\s+(\w+)\s*\(")


def warp_kernels(text):
    """Names of the kernels whose lanes shuffle values or wait for each
    other (launchWarps)."""
    starts = [(m.start(), m.group(1)) for m in KERNEL.finditer(text)]
    ends = [start for start, _ in starts[1:]] + [len(text)]
    return {name for (start, name), end in zip(starts, ends)
            if "__shfl" in text[start:end] or "__syncwarp" in text[start:end]}


CXX_FLAGS = ["-std=c++17", "-O1", "-fPIC", "-shared", "-w"]


def cached_library(artifact, cxx):
    """Where the emulated library of this artifact's sources is kept when
    TP_BUILD_CACHE names a build cache (lit sets it, so that the sanitized
    suite reuses the plain one's builds): keyed by the compiler's identity,
    the flags and every source the build reads; None without a cache."""
    cache = os.environ.get("TP_BUILD_CACHE")
    if not cache:
        return None
    key = hashlib.sha256()
    version = subprocess.run([cxx, "--version"], capture_output=True,
                             check=True).stdout
    key.update(version + "\0".join(CXX_FLAGS).encode())
    include = os.path.join(HERE, "include")
    sources = [os.path.join(artifact, n) for n in sorted(os.listdir(artifact))
               if n == "model.cu" or n.endswith(".h")]
    sources += [os.path.join(include, n) for n in sorted(os.listdir(include))]
    for path in sources:
        with open(path, "rb") as f:
            key.update(os.path.basename(path).encode() + b"\0" + f.read())
    return os.path.join(cache, "cuda-emulation", key.hexdigest() + ".so")


def emulate(artifact, cxx):
    """Rebuilds artifact/libmodel.so from model.cu with the emulation."""
    for name in ("model.cu", "tp_cuda_runtime.h"):
        path = os.path.join(artifact, name)
        with open(path) as f:
            text = f.read()
        warps = warp_kernels(text)

        def rewrite(m):
            name = m.group(1).split("<")[0]
            launch = "launchWarps" if name in warps else "launch"
            return "tp_emu::%s(%s, %s, " % (launch, m.group(1), m.group(2))
        with open(path, "w") as f:
            f.write(LAUNCH.sub(rewrite, text))
    library = os.path.join(artifact, "libmodel.so")
    cached = cached_library(artifact, cxx)
    if cached and os.path.exists(cached):
        shutil.copyfile(cached, library)
    else:
        subprocess.run([cxx] + CXX_FLAGS + [
                        "-I", os.path.join(HERE, "include"), "-I", artifact,
                        "-x", "c++", os.path.join(artifact, "model.cu"),
                        "-o", library, "-lpthread"], check=True)
        if cached:
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=os.path.dirname(cached))
            os.close(fd)
            shutil.copyfile(library, temp)
            os.replace(temp, cached)
    # The emulation rebuilt these files: record their new checksums, as
    # tp-compile would have, so that tp-run's verification accepts them.
    record_checksums(artifact, ("model.cu", "tp_cuda_runtime.h", "libmodel.so"))


def record_checksums(artifact, names):
    path = os.path.join(artifact, "SHA256SUMS")
    sums = {}
    with open(path) as f:
        for line in f:
            digest, _, name = line.rstrip("\n").partition("  ")
            sums[name] = digest
    for name in names:
        with open(os.path.join(artifact, name), "rb") as f:
            sums[name] = hashlib.sha256(f.read()).hexdigest()
    with open(path, "w") as f:
        for name in sorted(sums):
            f.write("%s  %s\n" % (sums[name], name))


def count_replays(log):
    if not os.path.exists(log):
        return 0
    with open(log) as f:
        return sum(1 for line in f if line.startswith("launch"))


def generate_one(args, model_dir, name, text, work, env, dtype=None,
                 label=None):
    """One config of generation on the emulated GPU, greedy or with
    args.num_beams K (the KV caches' rows moved on the device between
    steps): each decode step's stage is a replay of its graph, with the
    step's own token, mask and position. Prints one line; True if the
    tokens equal transformers' and the steps replayed graphs."""
    model = os.path.join(model_dir, "model.onnx")
    beams = args.num_beams
    greedy = np.load(os.path.join(model_dir, "greedy.npy" if beams == 1
                                  else "beam%d.npy" % beams))
    config = parse_config(text)
    artifact = os.path.join(work, text.replace(",", "_") + ".tpa")
    subprocess.run([args.tp_compile, model, "--target", "cuda",
                    "-o", artifact, "--devices", str(config["tp"]),
                    "--pp", str(config["pp"]), "--max-seq", "24",
                    "--max-batch", str(2 * beams)] +
                   (["--dtype", dtype] if dtype else []) +
                   (["--prefill-len", str(args.prefill_len)]
                    if args.prefill_len is not None else []),
                   check=True,
                   env=env,
                   stderr=subprocess.DEVNULL)
    emulate(artifact, args.cxx)
    out_dir = os.path.join(work, "out")
    log = os.path.join(work, text + ".graphs.log")
    if os.path.exists(log):
        os.remove(log)
    subprocess.run(
        [args.tp_run, artifact, "--generate", str(args.generate),
         "--input", "input_ids=" + os.path.join(model_dir, "input_ids.npy"),
         "--input", "attention_mask=" + os.path.join(
             model_dir, "attention_mask.npy"),
         "--num-beams", str(beams), "--output-dir", out_dir,
         "--quiet"], check=True,
        env=dict(env, TP_EMU_GRAPH_LOG=log), stdout=subprocess.DEVNULL)
    tokens = np.load(os.path.join(out_dir, "tokens.npy"))
    reference = greedy[:, :tokens.shape[1]]
    same = np.array_equal(tokens, reference)
    replays = count_replays(log)
    ok = same and replays > 0
    print("%s [%s] emulated cuda generate %d%s: tokens %s, %d graph "
          "replays %s" % (name, label or text, args.generate,
                          " beams %d" % beams if beams > 1 else "",
                          "equal" if same else "DIFFER", replays,
                          "ok" if ok else "FAIL"), flush=True)
    return ok


def generate(args):
    """Generation for every config (see generate_one)."""
    name = os.path.basename(os.path.normpath(args.model_dir))
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        for text in args.config:
            failures += not generate_one(args, args.model_dir, name, text,
                                         work, nvcc_env(args), args.dtype)
    print(("FAIL %s" if failures else "PASS %s") % name)
    return 1 if failures else 0


def nvcc_env(args):
    """The environment tp-compile runs in: NVCC from --nvcc."""
    env = dict(os.environ)
    if args.nvcc:
        env["NVCC"] = shutil.which(args.nvcc) or args.nvcc
    return env


def forward_one(args, model_dir, name, text, work, env, dtype=None,
                input_shapes=(), atol=1e-5, rtol=1e-5, label=None):
    """One config of a forward pass on the emulated GPU (see the module's
    description). Prints a line for the graph replays and one per output;
    returns the number of failed checks."""
    model = os.path.join(model_dir, "model.onnx")
    label = label or text
    config = parse_config(text)
    artifact = os.path.join(work, text.replace(",", "_") + ".tpa")
    cmd = [args.tp_compile, model, "--target", "cuda", "-o", artifact,
           "--devices", str(config["tp"]), "--pp", str(config["pp"]),
           "--microbatches", str(config["mb"])]
    if config["sp"]:
        cmd.append("--sequence-parallel")
    if dtype:
        cmd += ["--dtype", dtype]
    for shape in input_shapes:
        cmd += ["--input-shape", shape]
    subprocess.run(cmd, check=True, env=env, stderr=subprocess.DEVNULL)
    emulate(artifact, args.cxx)
    if getattr(args, "keep", None):
        shutil.copytree(artifact, os.path.join(
            args.keep, name + "-" + os.path.basename(artifact)),
            dirs_exist_ok=True)
    manifest = read_manifest(args.tp_run, artifact)
    inputs = []
    for spec in manifest["inputs"]:
        inputs += ["--input", "%s=%s" % (
            spec["name"], os.path.join(model_dir, spec["name"] + ".npy"))]
    out_dir = os.path.join(work, "out")
    # Three forward passes: the first runs each stage as it is, the
    # second captures it as a CUDA graph and replays it, the third
    # replays it; the outputs are the last pass's.
    graph_log = os.path.join(work, "graphs.log")
    if os.path.exists(graph_log):
        os.remove(graph_log)
    run = [args.tp_run, artifact, "--output-dir", out_dir, "--quiet",
           "--repeat", "3"] + inputs
    launcher = getattr(args, "launcher", "threads")
    if launcher == "mpi":
        # One process per rank: rank 0's NCCL id reaches the others
        # over MPI. The emulated NCCL lives in one process, so only
        # a one-rank world can run here.
        run = mpirun_prefix(manifest["grid"]["ranks"]) + run + [
            "--launcher", "mpi"]
    subprocess.run(run, check=True,
                   env=dict(env, TP_EMU_GRAPH_LOG=graph_log))
    failures = 0
    replays = count_replays(graph_log)
    # Every call of every rank's stage (one per micro-batch in each
    # pass) but its first.
    expected = manifest["grid"]["ranks"] * (3 * config["mb"] - 1)
    graphs_ok = replays == expected
    failures += not graphs_ok
    print("%s [%s] emulated cuda x%d%s: %d graph replays of %d %s" % (
        name, label, manifest["grid"]["ranks"],
        " mpi" if launcher == "mpi" else "", replays, expected,
        "ok" if graphs_ok else "FAIL"), flush=True)
    for spec in manifest["outputs"]:
        ref = np.load(os.path.join(model_dir, spec["name"] + ".npy"))
        out = np.load(os.path.join(out_dir, spec["name"] + ".npy"))
        diff = (float(np.max(np.abs(out.astype(np.float64) - ref)))
                if out.shape == ref.shape else float("inf"))
        ok = out.shape == ref.shape and np.allclose(
            out, ref, atol=atol, rtol=rtol)
        failures += not ok
        print("%s [%s] emulated cuda x%d %s: max abs diff %.3g %s" % (
            name, label, manifest["grid"]["ranks"], spec["name"], diff,
            "ok" if ok else "FAIL"), flush=True)
    return failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--input-shape", action="append", default=[])
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--dtype", help="tp-compile --dtype (bf16, f16)")
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    parser.add_argument("--nvcc", help="nvcc for tp-compile (NVCC)")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    parser.add_argument("--keep", help="copy the artifacts here")
    parser.add_argument("--launcher", choices=["threads", "mpi"],
                        default="threads", help="tp-run --launcher (mpi: "
                        "one-rank configs only, see above)")
    parser.add_argument("--generate", type=int, metavar="T",
                        help="a decoder exported with its KV cache "
                        "(test/models/hf/with-past/<name>): tp-compile "
                        "--max-seq 24 --max-batch 2, tp-run --generate T, "
                        "and the tokens must equal greedy.npy")
    parser.add_argument("--prefill-len", type=int, metavar="N",
                        help="tp-compile --prefill-len for --generate")
    parser.add_argument("--num-beams", type=int, default=1, metavar="K",
                        help="with --generate: beam search (--max-batch "
                        "2K), against beam<K>.npy")
    args = parser.parse_args()
    if args.generate:
        return generate(args)
    name = os.path.basename(os.path.normpath(args.model_dir))
    failures = 0
    with tempfile.TemporaryDirectory() as work:
        for text in args.config:
            failures += forward_one(args, args.model_dir, name, text, work,
                                    nvcc_env(args), args.dtype,
                                    args.input_shape, args.atol, args.rtol)
    if failures:
        print("FAIL %s: %d output(s) differ" % (name, failures))
        return 1
    print("PASS %s" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
