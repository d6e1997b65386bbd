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
