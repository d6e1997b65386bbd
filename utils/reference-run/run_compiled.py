#!/usr/bin/env python3
"""Check an ONNX model end to end through tp-compile --target cpu + tp-run.

check(model, inputs, refs, ...) compiles the model for one rank (or
--devices N), runs it with tp-run on the given inputs and compares every
output with the reference arrays using run_imported.compare (pass iff
|got - ref| <= atol + rtol * |ref| elementwise; NaN/Inf must match). It
returns a run_imported.Result whose status is one of pass, mismatch,
import (tp-compile refused the model), run (tp-run failed), error, timeout.
run_node_tests.py --backend tp-run uses it for ONNX's node tests.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import run_imported  # noqa: E402
from run_imported import Result, ToolError  # noqa: E402

# bfloat16 travels as its raw bits in uint16 .npy files.
DTYPE_TO_NP = {"F32": np.float32, "F64": np.float64, "I64": np.int64,
               "I32": np.int32, "I16": np.int16, "I8": np.int8,
               "U8": np.uint8, "BOOL": np.bool_, "F16": np.float16,
               "BF16": np.uint16}
DTYPE_TO_MLIR = {"F32": "f32", "F64": "f64", "I64": "i64", "I32": "i32",
                 "I16": "i16", "I8": "i8", "U8": "i8", "BOOL": "i1",
                 "F16": "f16", "BF16": "bf16"}


def find_tool(name, explicit=None):
    if explicit:
        return explicit
    build = os.path.join(run_imported.SRC_ROOT, "build", "bin", name)
    return build if os.path.exists(build) else (shutil.which(name) or name)


def _run(cmd, stage, timeout):
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError("timeout", f"{stage}: timed out after {timeout:.0f}s")
    if p.returncode != 0:
        raise ToolError(stage, (p.stderr or p.stdout).strip()[-2000:])
    return p.stdout


def check(model, inputs, refs, tp_compile=None, tp_run=None, devices=1,
          atol=1e-4, rtol=1e-4, timeout=300.0, ref_types=None, keep_dir=None):
    deadline = time.time() + timeout
    remaining = lambda: max(1.0, deadline - time.time())
    tmp = keep_dir or tempfile.mkdtemp(prefix="tp-compiled-")
    try:
        shapes = []
        for name in sorted(run_imported.dynamic_inputs(model)):
            value = np.asarray(inputs.get(name, 0))
            if name in inputs and value.ndim > 0:
                shapes += ["--input-shape",
                           name + "=" + "x".join(str(d) for d in value.shape)]
        artifact = os.path.join(tmp, "model.tpa")
        _run([find_tool("tp-compile", tp_compile), model, "--target", "cpu",
              "--devices", str(devices), "-o", artifact] + shapes,
             "import", remaining())
        # The manifest as the runtime reads it: its one reader.
        manifest = json.loads(_run([find_tool("tp-run", tp_run), artifact,
                                    "--print-manifest"], "run", remaining()))
        cmd = [find_tool("tp-run", tp_run), artifact, "--quiet",
               "--output-dir", tmp]
        for spec in manifest["inputs"]:
            if spec["name"] not in inputs:
                raise ToolError("error", f"no value for input '{spec['name']}'")
            # The compiled model is signless: unsigned data goes in as the
            # signed type of the same width, bit for bit.
            value = np.array(inputs[spec["name"]], order="C")
            if spec["dtype"] == "BF16":
                value = (value.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            value = value.view(DTYPE_TO_NP[spec["dtype"]]) \
                if value.dtype.itemsize == np.dtype(DTYPE_TO_NP[spec["dtype"]]).itemsize \
                else value
            path = os.path.join(tmp, "in_%d.npy" % len(cmd))
            np.save(path, value)
            cmd += ["--input", f"{spec['name']}={path}"]
        _run(cmd, "run", remaining())
        diffs, ok, reasons = [], True, []
        for spec in manifest["outputs"]:
            name = spec["name"]
            got = np.load(os.path.join(tmp, run_file_name(name) + ".npy"))
            if spec["dtype"] == "BF16":
                got = (got.astype(np.uint32) << 16).view(np.float32)
            if name not in refs:
                ok = False
                reasons.append(f"{name}: no reference")
                continue
            good, maxd, msg = run_imported.compare(
                name, got, DTYPE_TO_MLIR[spec["dtype"]], refs[name], atol, rtol,
                (ref_types or {}).get(name))
            diffs.append((name, tuple(spec["shape"]), maxd, msg))
            if not good:
                ok = False
                reasons.append(f"{name}: {msg}")
        return Result("pass" if ok else "mismatch", "; ".join(reasons), diffs)
    except ToolError as e:
        return Result(e.stage, str(e))
    except Exception as e:
        return Result("error", f"{type(e).__name__}: {e}")
    finally:
        if keep_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def run_file_name(name):
    """The file name tp-run gives an output (see tools/tp-run)."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
