"""Packages the tp_mlir module that the project's CMake build made.

The extension links the same LLVM/MLIR and the same compiler libraries as
tp-compile, so it is built with them (`make build`, into build/python/);
`pip install ./python-bindings` then installs that build. TP_MLIR_BUILD
names another build folder.
"""
import glob
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPy(build_py):
    def run(self):
        build = os.environ.get("TP_MLIR_BUILD",
                               os.path.join(HERE, os.pardir, "build"))
        source = os.path.join(os.path.abspath(build), "python", "tp_mlir")
        if not glob.glob(os.path.join(source, "_tp_mlir*.so")):
            raise SystemExit(
                f"tp_mlir: no built module in {source}; build the project "
                "first (make build, with nanobind from requirements.txt "
                "installed for this Python)")
        super().run()
        # The extension, and the build's copies of the Python files.
        target = os.path.join(self.build_lib, "tp_mlir")
        shutil.copytree(source, target, dirs_exist_ok=True)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(packages=["tp_mlir"], cmdclass={"build_py": BuildPy},
      distclass=BinaryDistribution)
