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
    ["tp-compile", "tp-export-weights", "tp-opt", "tp-run", "tp-translate", "TPUnitTests",
     "TPRuntimeTests"],
    [config.tp_tools_dir],
)

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
# nvcc (the CUDA toolkit): tp-compile --target cuda can build libraries.
if shutil.which("nvcc"):
    config.available_features.add("nvcc")

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
_llvm_lib = os.path.join(os.path.dirname(config.llvm_tools_dir), "lib")
if all(os.path.exists(p) for p in [
        os.path.join(config.llvm_tools_dir, "mlir-opt"),
        os.path.join(config.llvm_tools_dir, "mlir-runner"),
        os.path.join(_llvm_lib, "libmlir_c_runner_utils.so"),
        os.path.join(_llvm_lib, "libmlir_runner_utils.so")]):
    config.available_features.add("mlir-runner")
