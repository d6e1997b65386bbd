# lit configuration for tp-mlir: FileCheck tests of the tools, plus the
# GoogleTest unit tests (unittests/) run as one lit test each.
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "TP"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.excludes = ["Inputs", "models", "lit.cfg.py", "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tp_obj_root, "test")

config.substitutions.append(("%PYTHON", config.python_executable))
config.substitutions.append(("%models", os.path.join(config.tp_src_root, "test", "models")))
config.substitutions.append(("%tp_src", config.tp_src_root))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["tp-compile", "tp-export-weights", "tp-opt", "tp-run", "tp-translate", "TPUnitTests", "TPEmitTests",
     "TPRuntimeTests"],
    [config.tp_tools_dir],
)

# Tools built with ASan + UBSan (TP_SANITIZE): a report aborts, so that it
# fails a test even under `not` (which passes any non-zero exit but not a
# signal), and UBSan prints where it happened. Options already in the
# environment come last, so they win.
if config.tp_sanitize:
    config.available_features.add("sanitized")
    for name, value in [("ASAN_OPTIONS", "abort_on_error=1"),
                        ("UBSAN_OPTIONS", "print_stacktrace=1:abort_on_error=1")]:
        config.environment[name] = ":".join(
            filter(None, [value, os.environ.get(name)]))
    # Open MPI's init allocates state that it never frees (libmpi,
    # libopen-rte, PMIx); some of it from plugins that are unloaded before
    # the leak check, so no suppression can name them. Leak checking is off
    # in MPI ranks only (Open MPI sets this in every process it launches)
    # and stays on everywhere else.
    config.environment["OMPI_MCA_mca_base_env_list"] = (
        "ASAN_OPTIONS=" + config.environment["ASAN_OPTIONS"] + ":detect_leaks=0")
    config.environment["ASAN_SYMBOLIZER_PATH"] = os.path.join(
        config.llvm_tools_dir, "llvm-symbolizer")

# strace: LeakSanitizer cannot run under ptrace, so a traced sanitized tool
# skips its leak check.
_strace = "strace"
if config.tp_sanitize:
    _strace = ("env ASAN_OPTIONS=" + config.environment["ASAN_OPTIONS"] +
               ":detect_leaks=0 strace")
config.substitutions.append(("%strace", _strace))

# MPI (Open MPI from Debian): partitioned programs and tp-run --launcher mpi
# run one process per rank. %mpirun works as root and on few cores.
import shutil

_mpi_libs = [os.environ.get("TP_MPI_LIB", ""),
             "/usr/lib/x86_64-linux-gnu/libmpi.so",
             "/usr/lib/aarch64-linux-gnu/libmpi.so",
             "/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so",
             "/usr/lib64/openmpi/lib/libmpi.so"]
_mpirun = os.environ.get("TP_MPIRUN") or shutil.which("mpirun")
_mpi_lib = next((p for p in _mpi_libs if p and os.path.exists(p)), None)
if _mpirun and _mpi_lib:
    config.available_features.add("mpi")
    config.environment["TP_MPIRUN"] = _mpirun
    config.environment["TP_MPI_LIB"] = _mpi_lib
    _root = " --allow-run-as-root" if os.geteuid() == 0 else ""
    config.substitutions.append(("%mpirun", _mpirun + _root + " --oversubscribe"))
# The TorchScript frontend (built where libtorch-dev is installed, which
# `make deps` does). A build without it (the sanitized one) may use another
# build's, named by TP_IMPORT_TORCHSCRIPT (make check-sanitized does).
_ts_importer = os.path.join(config.tp_tools_dir, "tp-import-torchscript")
if not os.access(_ts_importer, os.X_OK):
    _ts_importer = os.environ.get("TP_IMPORT_TORCHSCRIPT", "")
    if _ts_importer:
        config.environment["TP_IMPORT_TORCHSCRIPT"] = _ts_importer
if _ts_importer and os.access(_ts_importer, os.X_OK):
    config.available_features.add("torchscript")
    config.substitutions.append(("tp-import-torchscript", _ts_importer))

# nvcc (the CUDA toolkit): tp-compile --target cuda can build libraries,
# finding nvcc on PATH or in the toolkit's prefix as it does (findNvcc).
# TP_REQUIRE_NVCC=1 (set by .ci/run) makes a missing nvcc an error rather
# than tests quietly unsupported. cuda-prefix: the standard prefix holds
# one (tp-compile-errors.test can then not see "no nvcc at all").
_cuda_prefix = "/usr/local/cuda/bin/nvcc"
if os.access(_cuda_prefix, os.X_OK):
    config.available_features.add("cuda-prefix")
_nvcc = shutil.which("nvcc") or next(
    (p for p in (os.path.join(os.environ.get(v, ""), "bin", "nvcc")
                 for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v))
     if os.access(p, os.X_OK)),
    _cuda_prefix if os.access(_cuda_prefix, os.X_OK) else None)
if _nvcc:
    config.available_features.add("nvcc")
elif os.environ.get("TP_REQUIRE_NVCC") == "1":
    lit_config.fatal("TP_REQUIRE_NVCC=1 but no nvcc on PATH, in $CUDA_HOME, "
                     "$CUDA_PATH or /usr/local/cuda: the CUDA tests cannot run")

# The model libraries tests build are kept in one build cache (tp-compile
# --build-cache) shared by the plain and the sanitized suites: the
# sanitized run checks our tools, and the host compiler's ~90% of each
# compile of the same generated code is spent once. An entry is used only
# for identical code, headers, compiler and flags.
config.environment["TP_BUILD_CACHE"] = os.environ.get("TP_BUILD_CACHE") or \
    os.path.join(config.tp_src_root, ".cache", "tp-build-cache")

# make check runs a part of the big sweeps and the sanitized suite a smaller
# part; lit --param full=1 (make check-full) runs each whole, and the tests
# that REQUIRE: full (whole matrices of which another test runs a sample).
sweeps_full = lit_config.params.get("full", "0") not in ("0", "")
if sweeps_full:
    config.available_features.add("full")


def sweep_sample(part, sanitized_part):
    """The K/N part of a sweep (run_node_tests.py --sample) this run takes."""
    if sweeps_full:
        return "0/1"
    return sanitized_part if config.tp_sanitize else part


config.substitutions.append(("%node_tests_sample", sweep_sample("0/4", "1/8")))
# onnx-node-tests-compiled.test builds each case's library: a third as many.
config.substitutions.append(
    ("%node_tests_compiled_sample", sweep_sample("0/12", "0/12")))
# Target/Emit/cuda-zoo.test: the zoo models that go through nvcc -ptx (the
# sanitized suite takes the same ones, whose checks the build cache has).
config.substitutions.append(("%nvcc_sample", sweep_sample("0/3", "0/3")))
# The zoo's models at their export opset; under full also converted to
# opsets 18 and 21 (gpt2, llama and bert always run all three: the converted
# forms of ReduceMean, Split, Squeeze and friends are the importer's, the
# same for every model).
config.substitutions.append(
    ("%zoo_opsets", "" if sweeps_full else "--opset native"))
# Fresh architectures drawn per run (test/Numerics/archgen/sample.test):
# 2 in make check, 1 in the sanitized suite, 8 under full.
config.substitutions.append(
    ("%archgen_count",
     "8" if sweeps_full else "1" if config.tp_sanitize else "2"))
# The generator's saved regressions replayed (replay.test): a quarter of
# them (every fourth file by name), all under full.
config.substitutions.append(("%replay_sample", sweep_sample("0/4", "0/4")))

# The suite builds model libraries at -O1 (tp-compile --target cpu reads
# $TP_CXX_FLAGS where --cxx-flags is absent): the host compiler's -O3 takes
# ~75% longer and the tests' models are small; a test that passes
# --cxx-flags (packed-weights.test) and every benchmark build at -O3.
config.environment["TP_CXX_FLAGS"] = os.environ.get("TP_CXX_FLAGS", "-O1")

# Open MPI refuses to start as root without these.
config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"

# What the numerical tests need, as features for per-test REQUIRES lines:
# Python packages in %PYTHON, and upstream mlir-opt / mlir-runner with the
# runner's runtime libraries (run_imported.py runs imported IR with them).
import subprocess

for _module in ["numpy", "onnx", "onnxruntime"]:
    if subprocess.call([config.python_executable, "-c", "import " + _module],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
        config.available_features.add(_module)
# The tp_mlir Python module, where this build made it (not in sanitized
# builds, or without nanobind).
import glob

config.substitutions.append(("%tp_python", os.path.join(config.tp_obj_root, "python")))
if glob.glob(os.path.join(config.tp_obj_root, "python", "tp_mlir", "_tp_mlir*.so")):
    config.available_features.add("tp-python")
# Debian's python3 has torch (python3-torch) and, with the zoo's site
# folder (make zoo-site), transformers: tp_mlir.from_torch's test runs
# there (same CPython 3.11 ABI as the module).
_debian_python = "/usr/bin/python3"
_hf_site = os.path.join(config.tp_src_root, "test", "models", "hf", ".cache", "site")
config.substitutions.append(("%debian_python", _debian_python))
config.substitutions.append(("%hf_site", _hf_site))
if os.path.exists(_debian_python) and subprocess.call(
        [_debian_python, "-c", "import torch, pytest, numpy"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0 and \
        os.path.isdir(os.path.join(_hf_site, "transformers")):
    config.available_features.add("debian-torch")
_llvm_lib = os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")
if all(os.path.exists(p) for p in [
        os.path.join(config.llvm_tools_dir, "mlir-opt"),
        os.path.join(config.llvm_tools_dir, "mlir-runner"),
        os.path.join(_llvm_lib, "libmlir_c_runner_utils.so"),
        os.path.join(_llvm_lib, "libmlir_runner_utils.so")]):
    config.available_features.add("mlir-runner")
