#!/usr/bin/env python3
"""Numerically check an ONNX model imported by `tp-translate --import-onnx`.

Independent of tp-mlir's own passes: the imported IR is lowered and run with
the *upstream* MLIR tools (Debian LLVM 22 by default) and its results are
compared with a reference (stored .npy files or onnxruntime).

Steps
  1. `tp-translate --import-onnx model.onnx [--input-shape ...]` -> @main whose
     arguments are tagged {tp.input = NAME} / {tp.weight = INITIALIZER} and
     results {tp.output = NAME}.
  2. Append a wrapper `@tp_ref_entry()` that materialises every argument as an
     `arith.constant dense<"0x...">` (inputs from the given .npy files, weights
     read from the ONNX initializers with onnx.numpy_helper), calls @main and
     prints every result with printMemrefI32/I64.  Results are printed
     bit-exactly: f32 -> bitcast i32, f64 -> bitcast i64, f16/bf16 -> bitcast
     i16 -> extui i32, i1 -> extui i32, i8/i16 -> extsi i32.
  3. Lower with mlir-opt (see PIPELINE below).
  4. Run with `mlir-runner -e tp_ref_entry -entry-point-result=void`.
  5. Parse the printed memrefs and compare each output against the reference:
     pass iff |got - ref| <= atol + rtol * |ref| elementwise (NaN/Inf must match
     exactly), shapes equal, and element types agree.  For bfloat16 results
     rtol is raised to one bf16 ulp (2^-7): producers differ in rounding.

Usage
  run_imported.py MODEL.onnx [--input NAME=FILE.npy ...] [--input-shape NAME=2x16 ...]
                  [--reference npy|ort] [--output NAME=FILE.npy ...]
                  [--atol 1e-5] [--rtol 1e-5] [--tp-translate PATH] [--keep DIR]

  --input        graph input values; if omitted for an input, <model dir>/<name>.npy
                 is used when it exists.
  --input-shape  passed to tp-translate.  For inputs with dynamic dims in the
                 model and no explicit --input-shape, the shape of the .npy is used.
  --reference    npy (default): compare with --output files or <model dir>/<output>.npy;
                 ort: run onnxruntime (CPU, graph optimisations off) on the same inputs.
Prints one line per output ("output NAME: shape .. max abs diff ..") and a final
"PASS ..." or "FAIL ..." line; exit code 0 on PASS, 1 on numerical mismatch,
2 on any tool/setup error.

The module can also be imported: `check(model, inputs, refs, ...)` returns a
Result(status, reason, diffs) with status in {"pass", "mismatch", "import",
"lower", "run", "error", "timeout"}; used by run_node_tests.py.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

LLVM_BIN = os.environ.get("TP_LLVM_BIN", "/usr/lib/llvm-22/bin")
LLVM_LIB = os.environ.get("TP_LLVM_LIB", "/usr/lib/llvm-22/lib")
HERE = os.path.dirname(os.path.abspath(__file__))
SRC_ROOT = os.path.dirname(os.path.dirname(HERE))

# Upstream-only lowering to the LLVM dialect (works with LLVM 22.1).
PIPELINE = ",".join([
    "convert-elementwise-to-linalg",       # any tensor-level arith/math op
    "one-shot-bufferize{bufferize-function-boundaries "
    "function-boundary-type-conversion=identity-layout-map}",
    "convert-linalg-to-loops",
    "convert-math-to-funcs",               # math.ipowi / math.fpowi -> outlined funcs
    "lower-affine",
    "convert-scf-to-cf",
    "expand-strided-metadata",
    "memref-expand",
    "lower-affine",                        # affine.apply from expand-strided-metadata
    "arith-expand",
    "finalize-memref-to-llvm",
    "convert-math-to-llvm",
    "convert-math-to-libm",                # math.erf & co. -> erff/... from libm
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-func-to-llvm",
    "convert-cf-to-llvm",
    "convert-ub-to-llvm",
    "reconcile-unrealized-casts",
])

# numpy dtype <-> MLIR element type (the importer maps unsigned to signless).
NP_TO_MLIR = {
    np.dtype(np.float32): "f32", np.dtype(np.float64): "f64",
    np.dtype(np.float16): "f16",
    np.dtype(np.int64): "i64", np.dtype(np.uint64): "i64",
    np.dtype(np.int32): "i32", np.dtype(np.uint32): "i32",
    np.dtype(np.int16): "i16", np.dtype(np.uint16): "i16",
    np.dtype(np.int8): "i8", np.dtype(np.uint8): "i8",
    np.dtype(np.bool_): "i1",
}
MLIR_TO_NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16,
              "i64": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8,
              "i1": np.bool_}


class Result:
    def __init__(self, status, reason="", diffs=None, log=""):
        self.status, self.reason, self.diffs, self.log = status, reason, diffs or [], log

    @property
    def ok(self):
        return self.status == "pass"


class ToolError(Exception):
    def __init__(self, stage, msg):
        super().__init__(msg)
        self.stage = stage


# --------------------------------------------------------------------------
# Parsing the imported module.

TENSOR_RE = r"tensor<((?:[0-9?]+x)*)([a-z0-9]+)>"


def _unescape(s):
    return re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)),
                  s.replace("\\\\", "\\5C"))


def _parse_type(dims, elt):
    if "?" in dims:
        raise ToolError("import", "dynamic shape in @main signature")
    shape = tuple(int(d) for d in dims.split("x") if d)
    return shape, elt


def main_signature(mlir):
    """(argument list, rest of the line) of @main's signature."""
    m = re.search(r"func\.func @main\(", mlir)
    if not m:
        raise ToolError("import", "no func.func @main in tp-translate output")
    # The signature ends at the first ' {' line end after '->' (or ') {').
    end = mlir.index("\n", m.end())
    sig = mlir[m.end():end]
    depth, i = 1, 0
    while depth and i < len(sig):   # find the ')' closing the argument list
        if sig[i] == '"':
            i = sig.index('"', i + 1)
        elif sig[i] == "(":
            depth += 1
        elif sig[i] == ")":
            depth -= 1
        i += 1
    return sig[:i - 1], sig[i:]


ARG_RE = r"%arg\d+: " + TENSOR_RE + r'(?: \{([^}]*)\})?'


def parse_main(mlir):
    """Returns (args, results): args = [(kind, name, shape, elt)], results = [(name, shape, elt)]."""
    arg_str, res_str = main_signature(mlir)
    args = []
    for am in re.finditer(ARG_RE, arg_str):
        shape, elt = _parse_type(am.group(1), am.group(2))
        attrs = am.group(3) or ""
        km = re.search(r'tp\.(input|weight) = "((?:[^"\\]|\\.)*)"', attrs)
        if not km:
            raise ToolError("import", "@main argument without tp.input/tp.weight: " + am.group(0))
        args.append((km.group(1), _unescape(km.group(2)), shape, elt))
    if arg_str.count("%arg") != len(args):
        raise ToolError("import", "unsupported @main argument type: " + arg_str[:200])
    results = []
    if "->" in res_str:
        res_str = res_str[res_str.index("->") + 2:]
        for rm in re.finditer(TENSOR_RE + r'(?: \{([^}]*)\})?', res_str):
            shape, elt = _parse_type(rm.group(1), rm.group(2))
            om = re.search(r'tp\.output = "((?:[^"\\]|\\.)*)"', rm.group(3) or "")
            results.append((_unescape(om.group(1)) if om else None, shape, elt))
        if res_str.count(",") + 1 != len(results) and results:
            # a non-tensor result (or a comma inside an attribute) -> be strict
            if res_str.count("tensor<") != len(results):
                raise ToolError("import", "unsupported @main result type: " + res_str[:200])
    return args, results


# --------------------------------------------------------------------------
# Emitting the wrapper.

def _tensor_type(shape, elt):
    return "tensor<" + "".join(f"{d}x" for d in shape) + elt + ">"


def _to_bf16_bits(a):
    """float array -> uint16 bfloat16 bit patterns (round to nearest even)."""
    if a.dtype == np.uint16:          # already raw bfloat16 bits
        return a
    b = np.ascontiguousarray(a.astype(np.float32)).view(np.uint32)
    nan = np.isnan(a.astype(np.float32))
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, np.uint16(0x7FC0), r)


def dense_literal(arr, shape, elt):
    a = np.asarray(arr)
    if elt == "bf16":
        a = _to_bf16_bits(a)
    elif elt not in MLIR_TO_NP:
        raise ToolError("error", "unsupported argument element type " + elt)
    elif a.dtype == np.bool_ or elt == "i1":
        a = a.astype(np.bool_)
    elif elt.startswith("i"):
        want = MLIR_TO_NP[elt]
        a = a.astype(np.int64).astype(want)   # wraps unsigned to signless
    else:
        a = a.astype(MLIR_TO_NP[elt])
    if a.size != int(np.prod(shape, dtype=np.int64)):
        raise ToolError("error", f"value of shape {a.shape} does not fit {_tensor_type(shape, elt)}")
    a = a.reshape(shape)
    if a.size == 0:
        return "dense<>"
    if elt == "i1":
        flat = a.reshape(-1)
        if flat.all() or not flat.any():
            return "dense<%s>" % ("true" if flat[0] else "false")
        body = np.array2string(a, separator=",", threshold=sys.maxsize,
                               max_line_width=sys.maxsize)
        return "dense<" + body.replace("True", "true").replace("False", "false") + ">"
    return 'dense<"0x' + a.astype(a.dtype.newbyteorder("<")).tobytes().hex().upper() + '">'


def _print_conv(elt):
    """(print element type, scalar conversion lines template) for printing results."""
    if elt == "f32":
        return "i32", ["%y = arith.bitcast %x : f32 to i32"]
    if elt == "f64":
        return "i64", ["%y = arith.bitcast %x : f64 to i64"]
    if elt in ("f16", "bf16"):
        return "i32", [f"%t = arith.bitcast %x : {elt} to i16", "%y = arith.extui %t : i16 to i32"]
    if elt == "i1":
        return "i32", ["%y = arith.extui %x : i1 to i32"]
    if elt in ("i8", "i16"):
        return "i32", [f"%y = arith.extsi %x : {elt} to i32"]
    if elt in ("i32", "i64"):
        return elt, []
    raise ToolError("error", "unsupported result element type " + elt)


def make_wrapper(args, results, values):
    """values: list of numpy arrays (one per @main argument)."""
    lines = []
    needed = set()
    lines.append("  func.func @tp_ref_entry() {")
    for i, ((kind, name, shape, elt), val) in enumerate(zip(args, values)):
        ty = _tensor_type(shape, elt)
        lines.append(f"    %a{i} = arith.constant {dense_literal(val, shape, elt)} : {ty}")
    arg_tys = ", ".join(_tensor_type(s, e) for _, _, s, e in args)
    res_tys = ", ".join(_tensor_type(s, e) for _, s, e in results)
    call_args = ", ".join(f"%a{i}" for i in range(len(args)))
    if results:
        lhs = f"%r:{len(results)} = " if len(results) > 1 else "%r = "
    else:
        lhs = ""
    lines.append(f"    {lhs}func.call @main({call_args}) : ({arg_tys}) -> ({res_tys})")
    for j, (_, shape, elt) in enumerate(results):
        rv = f"%r#{j}" if len(results) > 1 else "%r"
        pelt, conv = _print_conv(elt)
        needed.add(pelt)
        rank = len(shape)
        dims = ", ".join(f"d{k}" for k in range(rank))
        amap = f"affine_map<({dims}) -> ({dims})>"
        iters = ", ".join(['"parallel"'] * rank)
        ity, pty = _tensor_type(shape, elt), _tensor_type(shape, pelt)
        mty = "memref<" + "".join(f"{d}x" for d in shape) + pelt + ">"
        lines.append(f"    %e{j} = tensor.empty() : {pty}")
        lines.append(f"    %c{j} = linalg.generic {{indexing_maps = [{amap}, {amap}], "
                     f"iterator_types = [{iters}]}} ins({rv} : {ity}) outs(%e{j} : {pty}) {{")
        lines.append(f"    ^bb0(%x: {elt}, %o: {pelt}):")
        if conv:
            lines += ["      " + c for c in conv]
            lines.append(f"      linalg.yield %y : {pelt}")
        else:
            lines.append(f"      linalg.yield %x : {pelt}")
        lines.append(f"    }} -> {pty}")
        lines.append(f"    %m{j} = bufferization.to_buffer %c{j} : {pty} to {mty}")
        lines.append(f"    %u{j} = memref.cast %m{j} : {mty} to memref<*x{pelt}>")
        fn = "printMemrefI32" if pelt == "i32" else "printMemrefI64"
        lines.append(f"    func.call @{fn}(%u{j}) : (memref<*x{pelt}>) -> ()")
    lines.append("    return")
    lines.append("  }")
    for pelt in sorted(needed):
        fn = "printMemrefI32" if pelt == "i32" else "printMemrefI64"
        lines.append(f"  func.func private @{fn}(memref<*x{pelt}>) attributes {{llvm.emit_c_interface}}")
    return "\n".join(lines) + "\n"


def parse_printed(stdout, results):
    chunks = stdout.split("Unranked Memref")[1:]
    if len(chunks) != len(results):
        raise ToolError("run", f"expected {len(results)} printed results, got {len(chunks)}")
    outs = []
    for chunk, (_, shape, elt) in zip(chunks, results):
        data = chunk.split("data =", 1)[1]
        ints = np.array([int(x) for x in re.findall(r"-?\d+", data)], dtype=np.int64)
        n = int(np.prod(shape, dtype=np.int64))
        if n == 0:          # printMemref prints a placeholder for empty memrefs
            ints = ints[:0]
        if ints.size != n:
            raise ToolError("run", f"printed {ints.size} values, expected {n}")
        if elt == "f32":
            v = ints.astype(np.int32).view(np.float32)
        elif elt == "f64":
            v = ints.view(np.float64)
        elif elt == "f16":
            v = ints.astype(np.uint16).view(np.float16)
        elif elt == "bf16":
            v = (ints.astype(np.uint32) << 16).view(np.float32)
        elif elt == "i1":
            v = ints.astype(np.bool_)
        else:
            v = ints.astype(MLIR_TO_NP[elt])
        outs.append(v.reshape(shape))
    return outs


# --------------------------------------------------------------------------
# Driver.

def _run(cmd, stage, timeout, stdin=None):
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise ToolError("timeout", f"{stage}: timed out after {timeout:.0f}s")
    except OSError as e:    # missing / not executable (e.g. being relinked)
        raise ToolError("error", f"cannot execute {cmd[0]}: {e}")
    if p.returncode != 0:
        msg = (p.stderr or p.stdout).strip()
        raise ToolError(stage, msg[-4000:] or f"exit code {p.returncode}")
    return p.stdout


def find_tp_translate(explicit=None):
    if explicit:
        return shutil.which(explicit) or explicit
    cand = os.path.join(SRC_ROOT, "build", "bin", "tp-translate")
    return cand if os.path.exists(cand) else (shutil.which("tp-translate") or "tp-translate")


def load_weights(model_path):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(model_path)   # external data is resolved relative to the model
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


def dynamic_inputs(model_path):
    """Names of graph inputs whose declared shape is not fully static."""
    import onnx
    g = onnx.load(model_path, load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    dyn = set()
    for vi in g.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
            dyn.add(vi.name)
    return dyn


def ort_reference(model_path, inputs):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    feeds = {i.name: inputs[i.name] for i in sess.get_inputs() if i.name in inputs}
    return dict(zip(names, sess.run(names, feeds)))


def compare(name, got, got_elt, ref, atol, rtol, ref_elt=None):
    """Returns (ok, max_abs_diff, message).  got_elt: MLIR element type of the
    result; ref_elt: MLIR element type the reference stands for (default: from
    its numpy dtype; pass "bf16" for bfloat16 references given as float32)."""
    ref = np.asarray(ref)
    if tuple(got.shape) != tuple(ref.shape):
        return False, float("inf"), f"shape mismatch: got {tuple(got.shape)} ref {tuple(ref.shape)}"
    exp_elt = ref_elt or NP_TO_MLIR.get(ref.dtype)
    if exp_elt is not None and exp_elt != got_elt:
        return False, float("inf"), f"element type mismatch: got {got_elt} ref {exp_elt} ({ref.dtype})"
    if ref.size == 0:
        return True, 0.0, ""
    if exp_elt == "bf16":
        # bfloat16 has 8 significant bits; rounding (RNE vs truncation) may
        # differ between producers, so allow one bf16 ulp.
        rtol = max(rtol, 2.0 ** -7)
    if ref.dtype.kind in "iub":
        g = got.astype(ref.dtype)        # wraps signless back to unsigned
        diff = np.abs(g.astype(np.float64) - ref.astype(np.float64))
        bad = diff > 0
        return (not bad.any()), float(diff.max()), ("" if not bad.any() else f"{int(bad.sum())} elements differ")
    g = got.astype(np.float64)
    r = ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        return _compare_float(g, r, ref.size, atol, rtol)


def _compare_float(g, r, size, atol, rtol):
    nan_bad = np.isnan(g) != np.isnan(r)
    fin = np.isfinite(g) & np.isfinite(r)
    inf_bad = (~fin & ~np.isnan(g) & ~np.isnan(r)) & (g != r)
    diff = np.where(fin, np.abs(g - r), 0.0)
    tol_bad = fin & (diff > atol + rtol * np.abs(r))
    bad = nan_bad | inf_bad | tol_bad
    maxd = float(diff.max()) if fin.any() else 0.0
    if nan_bad.any() or inf_bad.any():
        maxd = float("inf")
    msg = ""
    if bad.any():
        msg = f"{int(bad.sum())}/{size} elements out of tolerance"
        if nan_bad.any():
            msg += f" ({int(nan_bad.sum())} NaN mismatches)"
        if inf_bad.any():
            msg += f" ({int(inf_bad.sum())} Inf mismatches)"
    return (not bad.any()), maxd, msg


def check(model, inputs, refs=None, input_shapes=(), tp_translate=None, atol=1e-5, rtol=1e-5,
          timeout=300.0, keep_dir=None, opt_level="-O2", log=None, ref_types=None):
    """inputs: {name: ndarray}; refs: {output name: ndarray} or None to use onnxruntime;
    ref_types: optional {output name: MLIR element type} overriding the refs' dtypes
    (bfloat16 references are passed as float32 arrays with ref_types[name] = "bf16")."""
    log = log or (lambda s: None)
    deadline = time.time() + timeout
    remaining = lambda: max(1.0, deadline - time.time())
    tmp = keep_dir or tempfile.mkdtemp(prefix="tp-refrun-")
    os.makedirs(tmp, exist_ok=True)
    try:
        shapes = list(input_shapes)
        given = {s.split("=", 1)[0] for s in shapes}
        try:
            dyn = dynamic_inputs(model)
        except Exception as e:
            return Result("error", f"cannot read model: {e}")
        for n in sorted(dyn):
            if n in inputs and n not in given and np.asarray(inputs[n]).ndim > 0:
                shapes.append(n + "=" + "x".join(str(d) for d in np.asarray(inputs[n]).shape))
        imported = os.path.join(tmp, "imported.mlir")
        cmd = [find_tp_translate(tp_translate), "--import-onnx", model, "-o", imported]
        for s in shapes:
            cmd += ["--input-shape", s]
        t0 = time.time()
        _run(cmd, "import", remaining())
        with open(imported) as f:
            mlir = f.read()
        log(f"import: {time.time() - t0:.2f}s")
        args, results = parse_main(mlir)
        weights = None
        values = []
        for kind, name, shape, elt in args:
            if kind == "input":
                if name not in inputs:
                    raise ToolError("error", f"no value for graph input '{name}'")
                values.append(inputs[name])
            else:
                if weights is None:
                    weights = load_weights(model)
                if name in weights:
                    values.append(weights[name])
                elif name in inputs:
                    values.append(inputs[name])
                else:
                    raise ToolError("error", f"no initializer named '{name}'")
        wrapper = make_wrapper(args, results, values)
        close = mlir.rstrip().rfind("}")
        full = mlir[:close] + wrapper + "}\n"
        src = os.path.join(tmp, "wrapped.mlir")
        with open(src, "w") as f:
            f.write(full)
        lowered = os.path.join(tmp, "lowered.mlir")
        t0 = time.time()
        _run([os.path.join(LLVM_BIN, "mlir-opt"), src, f"--pass-pipeline=builtin.module({PIPELINE})",
              "-o", lowered], "lower", remaining())
        log(f"lower: {time.time() - t0:.2f}s")
        t0 = time.time()
        out = _run([os.path.join(LLVM_BIN, "mlir-runner"), lowered, "-e", "tp_ref_entry",
                    "-entry-point-result=void", opt_level,
                    "-shared-libs=" + os.path.join(LLVM_LIB, "libmlir_c_runner_utils.so"),
                    "-shared-libs=" + os.path.join(LLVM_LIB, "libmlir_runner_utils.so")],
                   "run", remaining())
        log(f"run: {time.time() - t0:.2f}s")
        got = parse_printed(out, results)
        if refs is None:
            t0 = time.time()
            try:
                refs = ort_reference(model, inputs)
            except Exception as e:
                raise ToolError("error", f"onnxruntime failed: {e}")
            log(f"onnxruntime: {time.time() - t0:.2f}s")
        diffs, ok, reasons = [], True, []
        for (name, shape, elt), g in zip(results, got):
            if name not in refs:
                diffs.append((name, tuple(shape), None, "no reference"))
                ok = False
                reasons.append(f"{name}: no reference")
                continue
            good, maxd, msg = compare(name, g, elt, refs[name], atol, rtol,
                                      (ref_types or {}).get(name))
            diffs.append((name, tuple(shape), maxd, msg))
            if not good:
                ok = False
                reasons.append(f"{name}: {msg}")
        missing = [n for n in refs if n not in {r[0] for r in results}]
        if missing:
            ok = False
            reasons.append("outputs missing from @main: " + ", ".join(missing))
        return Result("pass" if ok else "mismatch", "; ".join(reasons), diffs)
    except ToolError as e:
        return Result(e.stage, str(e))
    except Exception as e:  # a bug here or an unexpected tool output
        return Result("error", f"{type(e).__name__}: {e}")
    finally:
        if keep_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS")
    ap.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy",
                    help="reference output (npy mode); default <model dir>/<name>.npy")
    ap.add_argument("--reference", choices=["npy", "ort"], default="npy")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--tp-translate", default=None)
    ap.add_argument("--timeout", type=float, default=600.0, help="total seconds for all tools")
    ap.add_argument("--opt-level", default="-O2", help="mlir-runner optimisation flag")
    ap.add_argument("--keep", metavar="DIR", help="keep intermediate files in DIR")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)

    import onnx
    model = os.path.abspath(a.model)
    mdir = os.path.dirname(model)
    g = onnx.load(model, load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    inputs = {}
    for spec in a.input:
        n, f = spec.split("=", 1)
        inputs[n] = np.load(f)
    for vi in g.input:
        if vi.name not in inits and vi.name not in inputs:
            p = os.path.join(mdir, vi.name + ".npy")
            if os.path.exists(p):
                inputs[vi.name] = np.load(p)
    refs = None
    if a.reference == "npy":
        refs = {}
        for spec in a.output:
            n, f = spec.split("=", 1)
            refs[n] = np.load(f)
        for o in g.output:
            p = os.path.join(mdir, o.name + ".npy")
            if o.name not in refs and os.path.exists(p):
                refs[o.name] = np.load(p)
    log = (lambda s: print("  [time] " + s, flush=True)) if a.verbose else None
    r = check(model, inputs, refs, a.input_shape, a.tp_translate, a.atol, a.rtol,
              a.timeout, a.keep, a.opt_level, log)
    for name, shape, maxd, msg in r.diffs:
        d = "n/a" if maxd is None else f"{maxd:.3e}"
        print(f"output {name}: shape {list(shape)} max abs diff {d}"
              + (f"  FAIL {msg}" if msg else "  ok"))
    tol = f"atol={a.atol:g} rtol={a.rtol:g} reference={a.reference}"
    if r.ok:
        print(f"PASS {os.path.basename(mdir)}: {len(r.diffs)} output(s) match ({tol})")
        return 0
    print(f"FAIL {os.path.basename(mdir)} [{r.status}] ({tol}): {r.reason}")
    return 1 if r.status == "mismatch" else 2


if __name__ == "__main__":
    sys.exit(main())
