#!/usr/bin/env python3
"""The model zoo (test/models/hf) through --target cuda, without a GPU.

    run_zoo_cuda.py compile [name ...] [--dtype D ...] [--config tp=N ...]
                    [--nvcc NVCC]
    run_zoo_cuda.py run [name ...] [--dtype D ...] [--config tp=N ...]
                    [--generate T]

A name is a zoo model (zoo.json) or `with-past/<name>` (a decoder exported
with its KV cache, with-past/index.json); none: every one of both.

`compile`: tp-compile --target cuda for every name x dtype x config, with
nvcc standing aside (NVCC=true: the emission alone, the compiler's own
code; a with-past export is its decode step, --max-seq 24 --max-batch 2).
With --nvcc, every variant's model.cu then goes through nvcc's front end
and device code generation (nvcc -ptx, sm_90): types, overloads, cuBLAS
and NCCL signatures, what device code may call. One nvcc run per name
compiles all its variants, each in a namespace of its own: a run's second
of parsing the CUDA, cuBLAS and NCCL headers is paid once, not once per
variant (6 variants: 3.1 s of CPU instead of 6.1). ptxas, the host
compiler and the link are left to the bundled models' full builds
(test/Target/Emit/cuda-models.test). With TP_BUILD_CACHE set (lit sets it)
a passed nvcc check is remembered by the hash of what nvcc read, so the
sanitized suite, whose tp-compile emits the same text, reruns only the
emission. One line per variant and one per nvcc run:

    llama bf16 tp=2: emitted, 35 kernels
    llama: nvcc -ptx of 6 variants ok

`run`: each variant's model.cu rebuilt against the CUDA emulation and run
by tp-run's CUDA path (run_emulated.py: three forward passes, every call
but the first a CUDA graph replay), outputs against torch's outputs stored
beside the model, |out - ref| <= atol + rtol * |ref|, with the tolerance
of the dtype: f32 atol = rtol = 1e-5 (fp32 against fp32; the measured
errors are at most 2.2e-6), bf16 atol 0.1, rtol 0.02 and f16 atol 0.012,
rtol 0.004 (their rounding's, as test/Numerics/mixed-precision.test
states them; measured 0.011-0.077 and 0.0009-0.0066). A with-past name
generates --generate T tokens (default 10) through the decode step's CUDA
graph, which must equal transformers' greedy tokens (those before a
near-tie of the dtype: TOKENS_BEFORE_NEAR_TIE). Closing line: 'N passed,
N failed'; exit status 1 if any failed.
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

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_emulated  # noqa: E402

ZOO = os.path.join(HERE, "..", "..", "test", "models", "hf")
DTYPES = ("f32", "bf16", "f16")
TOLERANCE = {"f32": (1e-5, 1e-5), "bf16": (0.1, 0.02), "f16": (0.012, 0.004)}
# Greedy decoding is compared token for token, which holds in a 16-bit
# dtype only while torch's f32 top two logits are further apart than the
# dtype's rounding moves them. Where a stored prompt reaches a near-tie,
# the run generates the tokens before it. with-past/llama's first prompt
# in bf16: its 9th new token is 970 at 2.7053 and 297 at 2.6865 in f32
# (onnxruntime on the prefix), 0.019 apart, where bf16's logit errors are
# 0.04-0.06 (the zoo's forward runs): the emulated CUDA picks 297 on 2 ranks
# and 970 on 1, the C++ target 970 on both.
TOKENS_BEFORE_NEAR_TIE = {("with-past/llama", "bf16"): 8}
NVCC_FLAGS = ["-std=c++17", "-arch=sm_90", "--expt-relaxed-constexpr", "-w",
              "-ptx"]
# The trailer every model.cu ends with: the library's side of the ABI,
# which one translation unit can hold once. Renamed per variant.
MODEL_INFO = "const tp::cuda::ModelInfo &tp::cuda::model() {"
SIGNATURE = 'extern "C" TP_MODEL_EXPORT const char *tp_model_signature(void)'


def find_nvcc(spec):
    """nvcc as tp-compile and lit find it for `auto` (NVCC, PATH, the
    toolkit's prefix in $CUDA_HOME or $CUDA_PATH, /usr/local/cuda), else
    the program `spec` names; None when there is none."""
    if spec != "auto":
        return shutil.which(spec) or spec
    if os.environ.get("NVCC") not in (None, "", "true"):
        return shutil.which(os.environ["NVCC"])
    found = shutil.which("nvcc")
    prefixes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    for prefix in [p for p in prefixes if p] + ["/usr/local/cuda"]:
        if found:
            break
        candidate = os.path.join(prefix, "bin", "nvcc")
        if os.access(candidate, os.X_OK):
            found = candidate
    return found


def zoo_entries(zoo):
    """{name: (model folder, input shapes or None for a with-past export)}."""
    entries = {}
    with open(os.path.join(zoo, "zoo.json")) as f:
        for name, entry in json.load(f).items():
            if isinstance(entry, dict):
                shapes = ["%s=%s" % (k, "x".join(map(str, v)))
                          for k, v in entry["inputs"].items()]
                entries[name] = (os.path.join(zoo, name), shapes)
    index = os.path.join(zoo, "with-past", "index.json")
    if os.path.exists(index):
        with open(index) as f:
            for name, entry in json.load(f).items():
                if isinstance(entry, dict):
                    entries["with-past/" + name] = (
                        os.path.join(zoo, "with-past", name), None)
    return entries


def compile_cuda(args, folder, shapes, dtype, text, artifact):
    """tp-compile --target cuda with nvcc standing aside; stderr on
    failure."""
    config = run_emulated.parse_config(text)
    cmd = [args.tp_compile, os.path.join(folder, "model.onnx"), "--target",
           "cuda", "-o", artifact, "--devices", str(config["tp"]), "--pp",
           str(config["pp"]), "--dtype", dtype]
    if config["sp"]:
        cmd.append("--sequence-parallel")
    if shapes is None:
        cmd += ["--max-seq", "24", "--max-batch", "2"]
    for shape in shapes or []:
        cmd += ["--input-shape", shape]
    done = subprocess.run(cmd, env=dict(os.environ, NVCC="true"),
                          capture_output=True, text=True)
    return None if done.returncode == 0 else done.stderr


def one_translation_unit(variants):
    """The model.cu of every variant in one source: each after its includes
    (guarded, so the first ones count) in a namespace of its own, its ABI
    trailer renamed, and #line directives so that nvcc's messages name the
    variant's own file and line."""
    parts = []
    for index, artifact in enumerate(variants):
        path = os.path.join(artifact, "model.cu")
        with open(path) as f:
            lines = f.read().split("\n")
        # The leading comments, #define and #include lines.
        last = -1
        while lines[last + 1].startswith(("#", "//")) or \
                not lines[last + 1].strip():
            last += 1
        body = "\n".join(lines[last + 1:])
        if MODEL_INFO not in body or SIGNATURE not in body:
            raise RuntimeError("%s: no ABI trailer (%s) to rename" %
                               (path, MODEL_INFO))
        body = body.replace(
            MODEL_INFO, "const tp::cuda::ModelInfo &variantModel() { "
            "using tp::cuda::ModelInfo;")
        body = body.replace(SIGNATURE, "const char *variantSignature(void)")
        parts.append("%s\nnamespace tp_variant_%d {\n#line %d \"%s\"\n%s\n"
                     "} // namespace tp_variant_%d\n" % (
                         "\n".join(lines[:last + 1]), index, last + 2, path,
                         body, index))
    return "\n".join(parts)


def nvcc_check(args, name, variants, work):
    """nvcc -ptx of all `variants` of `name` as one translation unit; True
    when it compiles (or compiled before: TP_BUILD_CACHE)."""
    headers = [os.path.join(variants[0], h)
               for h in ("tp_cuda_runtime.h", "tp_scalar_ops.h",
                         "tp_model_abi.h")]
    for artifact in variants[1:]:
        for header in headers:
            other = os.path.join(artifact, os.path.basename(header))
            with open(header, "rb") as a, open(other, "rb") as b:
                if a.read() != b.read():
                    print("%s: %s differs between variants FAIL" % (
                        name, os.path.basename(header)))
                    return False
    source = one_translation_unit(variants)
    marker = None
    cache = os.environ.get("TP_BUILD_CACHE")
    if cache:
        key = hashlib.sha256()
        version = subprocess.run([args.nvcc, "--version"], capture_output=True,
                                 check=True).stdout
        key.update(version + "\0".join(NVCC_FLAGS).encode() + b"\0")
        for header in headers:
            with open(header, "rb") as f:
                key.update(f.read())
        # The variants' paths are temporary: key the text without them.
        key.update(re.sub(r'^#line \d+ ".*"$', "", source, flags=re.M)
                   .encode())
        marker = os.path.join(cache, "cuda-zoo-ptx", key.hexdigest())
        if os.path.exists(marker):
            print("%s: nvcc -ptx of %d variants ok (cached)" % (
                name, len(variants)), flush=True)
            return True
    unit = os.path.join(work, name.replace("/", "-") + ".cu")
    with open(unit, "w") as f:
        f.write(source)
    done = subprocess.run([args.nvcc] + NVCC_FLAGS +
                          ["-I", variants[0], unit, "-o", unit + ".ptx"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        print("%s: nvcc -ptx of %d variants FAIL\n%s" % (
            name, len(variants), done.stderr.strip()[:4000]), flush=True)
        return False
    if marker:
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        with open(marker, "w") as f:
            f.write(name + "\n")
    print("%s: nvcc -ptx of %d variants ok" % (name, len(variants)),
          flush=True)
    return True


def compile_all(args, entries, names):
    passed = failed = 0
    for name in names:
        folder, shapes = entries[name]
        with tempfile.TemporaryDirectory() as work:
            variants = []
            for dtype in args.dtype:
                for text in args.config:
                    artifact = os.path.join(work, "%s-%s.tpa" % (
                        dtype, text.replace(",", "_")))
                    error = compile_cuda(args, folder, shapes, dtype, text,
                                         artifact)
                    if error is not None:
                        lines = [l for l in error.splitlines()
                                 if "error" in l.lower()] or \
                            error.splitlines() or [""]
                        print("%s %s %s: tp-compile FAIL (%s)" % (
                            name, dtype, text, lines[0][:300]), flush=True)
                        failed += 1
                        continue
                    with open(os.path.join(artifact, "model.cu")) as f:
                        kernels = len(run_emulated.KERNEL.findall(f.read()))
                    print("%s %s %s: emitted, %d kernels" % (
                        name, dtype, text, kernels), flush=True)
                    variants.append(artifact)
                    passed += 1
            if args.nvcc and variants and \
                    names.index(name) % args.nvcc_parts == args.nvcc_part:
                if nvcc_check(args, name, variants, work):
                    passed += 1
                else:
                    failed += 1
    return passed, failed


def run_all(args, entries, names):
    passed = failed = 0
    env = dict(os.environ, NVCC="true")
    for name in names:
        folder, shapes = entries[name]
        for dtype in args.dtype:
            atol, rtol = TOLERANCE[dtype]
            for text in args.config:
                label = "%s %s" % (dtype, text)
                with tempfile.TemporaryDirectory() as work:
                    try:
                        if shapes is None:
                            tokens = min(args.generate,
                                         TOKENS_BEFORE_NEAR_TIE.get(
                                             (name, dtype), args.generate))
                            ok = run_emulated.generate_one(
                                argparse.Namespace(**dict(
                                    vars(args), generate=tokens)),
                                folder, name, text, work, env, dtype, label)
                        else:
                            ok = run_emulated.forward_one(
                                args, folder, name, text, work, env, dtype,
                                shapes, atol, rtol, label) == 0
                    except subprocess.CalledProcessError as error:
                        print("%s [%s] FAIL (%s exit %s)" % (
                            name, label, os.path.basename(error.cmd[0]),
                            error.returncode), flush=True)
                        ok = False
                passed += ok
                failed += not ok
    return passed, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["compile", "run"])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--dtype", action="append", choices=DTYPES)
    parser.add_argument("--config", action="append",
                        help="tp=N[,pp=P][,sp] (default: tp=1 and tp=2)")
    parser.add_argument("--zoo", default=ZOO)
    parser.add_argument("--nvcc", help="compile: nvcc -ptx every variant "
                        "with this nvcc ('auto': found as tp-compile finds "
                        "it, none: no check unless TP_REQUIRE_NVCC=1)")
    parser.add_argument("--nvcc-sample", default="0/1", metavar="K/N",
                        help="compile: nvcc -ptx only the names whose index "
                        "is K modulo N (every variant is still emitted)")
    parser.add_argument("--generate", type=int, default=10, metavar="T",
                        help="run: tokens a with-past export generates")
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    parser.add_argument("--cxx", default=os.environ.get("CXX", "c++"))
    args = parser.parse_args()
    args.nvcc_part, args.nvcc_parts = (
        int(x) for x in args.nvcc_sample.split("/"))
    args.dtype = args.dtype or list(DTYPES)
    args.config = args.config or ["tp=1", "tp=2"]
    # What run_emulated's generation reads from its own options.
    args.num_beams, args.prefill_len = 1, None
    if args.nvcc:
        args.nvcc = find_nvcc(args.nvcc)
        if not args.nvcc:
            if os.environ.get("TP_REQUIRE_NVCC") == "1":
                sys.exit("--nvcc auto: no nvcc on PATH, in $CUDA_HOME, "
                         "$CUDA_PATH or /usr/local/cuda (TP_REQUIRE_NVCC=1)")
            print("no nvcc: the nvcc -ptx checks do not run")
    entries = zoo_entries(args.zoo)
    names = args.names or list(entries)
    for name in names:
        if name not in entries:
            sys.exit("'%s' is not in the zoo (%s)" % (name,
                                                      ", ".join(entries)))
    run = compile_all if args.mode == "compile" else run_all
    passed, failed = run(args, entries, names)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
