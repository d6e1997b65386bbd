#!/usr/bin/env python3
"""Numerically check a model PARTITIONED by `tp-opt --tp-parallelize` under MPI.

run_imported.py checks the import; this checks the per-rank SPMD program that
tp-parallelize makes of it, run on one CPU process per device with MPI, against
the same stored references.

Steps
  1. `tp-translate --import-onnx` then `tp-opt --tp-parallelize=OPTIONS
     --tp-lower-collectives`: one SPMD @main whose weight arguments have local
     shapes, with all_gather / reduce_scatter / all_slice rewritten into
     shard.all_reduce and slices (see include/tp/Conversion/Passes.td).
  2. Add `dlti.map<"MPI:Implementation" = ...>` to the module (MPIToLLVM picks
     the ABI from it) and a wrapper @tp_ref_entry that calls mpi.init, reads
     the rank with shard.process_multi_index, materialises every argument
     (inputs replicated; each weight as its FULL ONNX initializer constant and
     a tensor.extract_slice at offset rank*local along the dim its
     #tp.layout splits, of the range it holds, zero-padded if padded), calls
     @main, prints every result
     bit-exactly (as run_imported.py does) and calls mpi.finalize.
  3. Lower with upstream mlir-opt: convert-shard-to-mpi (its comm_split is
     replaced by the world communicator, see drop_comm_split), then
     run_imported's pipeline with convert-to-llvm{filter-dialects=mpi} for the
     MPI ops; strip_for_runner works around LLVM 22's Open MPI symbol names.
  4. `mpirun -np DEVICES --output-filename DIR mlir-runner ...`: every rank
     prints its results into its own file.
  5. Every rank's outputs are compared with the reference (same rule as
     run_imported.py: |got - ref| <= atol + rtol*|ref|); the max abs diff is
     the max over ranks.

Usage
  run_partitioned.py MODEL.onnx --tp-parallelize "devices=2 sequence-parallel=true"
                     [--input NAME=FILE.npy ...] [--input-shape NAME=2x16 ...]
                     [--output NAME=FILE.npy ...] [--atol 1e-5] [--rtol 1e-5]
                     [--debug-wrong-rank] [--keep DIR] [-v]

  --debug-wrong-rank  feed rank r the weight slices of rank (r+1) mod N: the
                      results must then mismatch (tests that the checker fails).
Environment: TP_LLVM_BIN / TP_LLVM_LIB (upstream tools), TP_MPI_LIB (libmpi.so),
TP_MPIRUN (mpirun).  Exit code 0 on PASS, 1 on numerical mismatch, 2 on any
tool/setup error.
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import run_imported as ri  # noqa: E402
from run_imported import ToolError, Result  # noqa: E402

LLVM_BIN, LLVM_LIB = ri.LLVM_BIN, ri.LLVM_LIB

# The MPI ops take memrefs, so they are lowered with the memref type
# conversion, before finalize-memref-to-llvm removes the memref producers.
_MEMREF_TO_LLVM = "finalize-memref-to-llvm"
PIPELINE = ri.PIPELINE.replace(
    _MEMREF_TO_LLVM, "convert-to-llvm{filter-dialects=mpi}," + _MEMREF_TO_LLVM, 1)
assert PIPELINE != ri.PIPELINE

MPI_LIB_CANDIDATES = [
    "/usr/lib/x86_64-linux-gnu/libmpi.so",
    "/usr/lib/aarch64-linux-gnu/libmpi.so",
    "/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so",
    "/usr/lib64/openmpi/lib/libmpi.so",
    "/usr/lib64/mpich/lib/libmpi.so",
    "/usr/local/lib/libmpi.so",
]


def find_mpi():
    """(mpirun, libmpi.so, implementation name for DLTI) or raises ToolError."""
    mpirun = os.environ.get("TP_MPIRUN") or shutil.which("mpirun")
    if not mpirun:
        raise ToolError("error", "mpirun not found (set TP_MPIRUN)")
    lib = os.environ.get("TP_MPI_LIB")
    if not lib:
        lib = next((p for p in MPI_LIB_CANDIDATES if os.path.exists(p)), None)
    if not lib or not os.path.exists(lib):
        raise ToolError("error", "libmpi.so not found (set TP_MPI_LIB)")
    try:
        ver = subprocess.run([mpirun, "--version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ToolError("error", f"cannot run {mpirun} --version: {e}")
    return mpirun, lib, ("OpenMPI" if "Open MPI" in ver else "MPICH")


def grid_devices(mlir):
    m = re.search(r"shard\.grid @(\w+)\(shape = ([0-9x?]+)\)", mlir)
    if not m:
        raise ToolError("partition", "no shard.grid in the partitioned module")
    if "x" in m.group(2) or "?" in m.group(2):
        raise ToolError("error", f"only 1-D static grids are supported, got {m.group(2)}")
    return m.group(1), int(m.group(2))


def arg_layouts(mlir):
    """The #tp.layout of each @main argument, as a dict (role, dim, slice,
    padded), or None: how the argument holds its initializer."""
    arg_str, _ = ri.main_signature(mlir)
    layouts = []
    for am in re.finditer(ri.ARG_RE, arg_str):
        lm = re.search(r"tp\.layout = #tp\.layout<([^>]*)>", am.group(3) or "")
        if not lm:
            layouts.append(None)
            continue
        body = lm.group(1)
        layout = {"role": re.search(r"role = (\w+)", body).group(1),
                  "dim": int(re.search(r"dim = (\d+)", body).group(1))}
        for key in ("slice", "padded"):
            km = re.search(key + r" = \[(\d+), (\d+)\]", body)
            layout[key] = (int(km.group(1)), int(km.group(2))) if km else None
        layouts.append(layout)
    return layouts


def strip_layouts(mlir):
    """Drops every typed tp attribute (#tp.layout on arguments,
    #tp.grid_role on grids): upstream mlir-opt does not know the tp dialect
    (its other attributes are plain strings and integers, which parse)."""
    layout = r"tp\.\w+ = #tp\.\w+<[^>]*>"
    mlir = re.sub(r" \{" + layout + r"\}", "", mlir)
    mlir = re.sub(r"\{" + layout + ", ", "{", mlir)
    return re.sub(", " + layout, "", mlir)


def local_value(name, local, value, layout, devices):
    """(what the ranks share, dim rank r takes its r-th chunk of or None):
    the range of the initializer `value` that the argument's layout holds,
    zero-padded as it says."""
    value = np.asarray(value)
    if layout is None:
        if tuple(local) != value.shape:
            raise ToolError("error", f"weight '{name}': local shape {list(local)} differs "
                                     f"from its initializer's {list(value.shape)} and it "
                                     "has no tp.layout")
        return value, None
    dim = layout["dim"]
    if layout["slice"]:
        offset, size = layout["slice"]
        index = [slice(None)] * value.ndim
        index[dim] = slice(offset, offset + size)
        value = value[tuple(index)]
    if layout["padded"]:
        pad = [(0, 0)] * value.ndim
        pad[dim] = (0, layout["padded"][1] - value.shape[dim])
        value = np.pad(value, pad)
    split = layout["role"] != "replicated"
    expected = [s // devices if d == dim and split else s for d, s in enumerate(value.shape)]
    if list(local) != expected or (split and value.shape[dim] % devices):
        raise ToolError("error", f"weight '{name}': local shape {list(local)} is not what "
                                 f"its tp.layout makes of {list(value.shape)} over {devices}")
    return value, dim if split else None


def _print_result(lines, needed, j, rv, shape, elt):
    """Bit-exact print of one result, as run_imported.make_wrapper does."""
    pelt, conv = ri._print_conv(elt)
    needed.add(pelt)
    dims = ", ".join(f"d{k}" for k in range(len(shape)))
    amap = f"affine_map<({dims}) -> ({dims})>"
    iters = ", ".join(['"parallel"'] * len(shape))
    ity, pty = ri._tensor_type(shape, elt), ri._tensor_type(shape, pelt)
    mty = "memref<" + "".join(f"{d}x" for d in shape) + pelt + ">"
    lines.append(f"    %e{j} = tensor.empty() : {pty}")
    lines.append(f"    %c{j} = linalg.generic {{indexing_maps = [{amap}, {amap}], "
                 f"iterator_types = [{iters}]}} ins({rv} : {ity}) outs(%e{j} : {pty}) {{")
    lines.append(f"    ^bb0(%x: {elt}, %o: {pelt}):")
    lines += ["      " + c for c in conv]
    lines.append(f"      linalg.yield {'%y' if conv else '%x'} : {pelt}")
    lines.append(f"    }} -> {pty}")
    lines.append(f"    %m{j} = bufferization.to_buffer %c{j} : {pty} to {mty}")
    lines.append(f"    %u{j} = memref.cast %m{j} : {mty} to memref<*x{pelt}>")
    fn = "printMemrefI32" if pelt == "i32" else "printMemrefI64"
    lines.append(f"    func.call @{fn}(%u{j}) : (memref<*x{pelt}>) -> ()")


def make_wrapper(grid, devices, args, results, values, wrong_rank=False, layouts=None):
    """args: [(kind, name, local shape, elt)]; values: full numpy arrays;
    layouts: the #tp.layout of each argument (arg_layouts), None for inputs."""
    layouts = layouts or [None] * len(args)
    lines = ["  func.func @tp_ref_entry() {",
             "    mpi.init",
             f"    %rank = shard.process_multi_index on @{grid} axes = [0] : index"]
    rank = "%rank"
    if wrong_rank:
        lines += ["    %one = arith.constant 1 : index",
                  f"    %ndev = arith.constant {devices} : index",
                  "    %rank_p1 = arith.addi %rank, %one : index",
                  "    %wrong = arith.remui %rank_p1, %ndev : index"]
        rank = "%wrong"
    for i, ((kind, name, shape, elt), val, layout) in enumerate(zip(args, values, layouts)):
        ty = ri._tensor_type(shape, elt)
        dim = None
        if kind == "weight":
            val, dim = local_value(name, shape, val, layout, devices)
        if dim is None:
            lines.append(f"    %a{i} = arith.constant {ri.dense_literal(val, shape, elt)} : {ty}")
            continue
        gshape = tuple(val.shape)
        gty = ri._tensor_type(gshape, elt)
        lines.append(f"    %g{i} = arith.constant {ri.dense_literal(val, gshape, elt)} : {gty}")
        lines.append(f"    %l{i} = arith.constant {shape[dim]} : index")
        lines.append(f"    %o{i} = arith.muli {rank}, %l{i} : index")
        offs = ", ".join(f"%o{i}" if d == dim else "0" for d in range(len(shape)))
        sizes = ", ".join(str(s) for s in shape)
        ones = ", ".join("1" for _ in shape)
        lines.append(f"    %a{i} = tensor.extract_slice %g{i}[{offs}] [{sizes}] [{ones}]"
                     f" : {gty} to {ty}")
    arg_tys = ", ".join(ri._tensor_type(s, e) for _, _, s, e in args)
    res_tys = ", ".join(ri._tensor_type(s, e) for _, s, e in results)
    call_args = ", ".join(f"%a{i}" for i in range(len(args)))
    lhs = (f"%r:{len(results)} = " if len(results) > 1 else "%r = ") if results else ""
    lines.append(f"    {lhs}func.call @main({call_args}) : ({arg_tys}) -> ({res_tys})")
    needed = set()
    for j, (_, shape, elt) in enumerate(results):
        _print_result(lines, needed, j, f"%r#{j}" if len(results) > 1 else "%r", shape, elt)
    lines += ["    mpi.finalize", "    return", "  }"]
    for pelt in sorted(needed):
        fn = "printMemrefI32" if pelt == "i32" else "printMemrefI64"
        lines.append(f"  func.func private @{fn}(memref<*x{pelt}>) attributes {{llvm.emit_c_interface}}")
    return "\n".join(lines) + "\n"


def add_mpi_dlti(mlir, impl):
    """Puts the MPI implementation on the module (MPIToLLVM reads it there)."""
    attr = f'dlti.map = #dlti.map<"MPI:Implementation" = "{impl}">'
    m = re.search(r"^module( attributes \{)?", mlir, re.M)
    if not m:
        raise ToolError("partition", "no top-level module in the partitioned IR")
    if m.group(1):
        return mlir[:m.end()] + attr + ", " + mlir[m.end():]
    return mlir[:m.end()] + f" attributes {{{attr}}}" + mlir[m.end():]


def drop_comm_split(path):
    """Uses MPI_COMM_WORLD for every collective's communicator.

    convert-shard-to-mpi splits the world by the grid axes outside the group;
    on a 1-D grid (all this script accepts) every rank has the same colour and
    its rank as key, so the split communicator is the world.  Dropping it
    avoids an LLVM 22 MPIToLLVM bug: with Open MPI it loads MPI_Comm_split's
    output handle (a pointer) as i32 and sign-extends it, so the first
    collective on it crashes."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"= mpi\.comm_split\([^)]*\) : !mpi\.comm", "= mpi.comm_world : !mpi.comm",
                  text)
    with open(path, "w") as f:
        f.write(text)


def strip_for_runner(path):
    """mlir-runner registers neither dlti nor shard; the DLTI attribute and
    the (now unused) shard.grid have done their job once MPI is lowered."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r'dlti\.map = #dlti\.map<"MPI:Implementation" = "\w+">(, )?', "",
                  text, count=1)
    text = text.replace("module attributes {} {", "module {", 1)
    text = re.sub(r"^ *shard\.grid @.*\n", "", text, count=1, flags=re.M)
    # LLVM 22's MPIToLLVM names Open MPI's predefined reduction ops
    # `ompi_mpi_sum` etc.; libmpi exports them as `ompi_mpi_op_sum`.
    text = re.sub(r"@ompi_mpi_(sum|prod|max|min|band|bor|bxor|land|lor|lxor|maxloc|minloc"
                  r"|replace|no_op)\b", r"@ompi_mpi_op_\1", text)
    with open(path, "w") as f:
        f.write(text)


def check(model, inputs, refs, parallelize="devices=2", input_shapes=(), tp_translate=None,
          tp_opt=None, atol=1e-5, rtol=1e-5, timeout=600.0, keep_dir=None, opt_level="-O2",
          log=None, wrong_rank=False):
    """Returns Result(status, reason, diffs); diffs = [(name, shape, max diff, msg)]."""
    log = log or (lambda s: None)
    deadline = time.time() + timeout
    remaining = lambda: max(1.0, deadline - time.time())
    tmp = keep_dir or tempfile.mkdtemp(prefix="tp-partrun-")
    os.makedirs(tmp, exist_ok=True)
    try:
        mpirun, mpi_lib, impl = find_mpi()
        shapes = list(input_shapes)
        given = {s.split("=", 1)[0] for s in shapes}
        for n in sorted(ri.dynamic_inputs(model)):
            if n in inputs and n not in given and np.asarray(inputs[n]).ndim > 0:
                shapes.append(n + "=" + "x".join(str(d) for d in np.asarray(inputs[n]).shape))
        imported = os.path.join(tmp, "imported.mlir")
        cmd = [ri.find_tp_translate(tp_translate), "--import-onnx", model, "-o", imported]
        for s in shapes:
            cmd += ["--input-shape", s]
        t0 = time.time()
        ri._run(cmd, "import", remaining())
        part = os.path.join(tmp, "partitioned.mlir")
        tp_opt = tp_opt or os.path.join(os.path.dirname(cmd[0]), "tp-opt")
        ri._run([tp_opt, imported, f"--tp-parallelize={parallelize}", "--tp-lower-collectives",
                 "-o", part], "partition", remaining())
        log(f"import + partition: {time.time() - t0:.2f}s")
        with open(part) as f:
            mlir = f.read()
        grid, devices = grid_devices(mlir)
        args, results = ri.parse_main(mlir)
        weights = ri.load_weights(model)
        values = []
        for kind, name, _, _ in args:
            src = inputs if kind == "input" else weights
            if name not in src:
                raise ToolError("error", f"no value for {kind} '{name}'")
            values.append(src[name])
        wrapper = make_wrapper(grid, devices, args, results, values, wrong_rank,
                               arg_layouts(mlir))
        mlir = add_mpi_dlti(strip_layouts(mlir), impl)
        close = mlir.rstrip().rfind("}")
        src = os.path.join(tmp, "wrapped.mlir")
        with open(src, "w") as f:
            f.write(mlir[:close] + wrapper + "}\n")
        lowered = os.path.join(tmp, "lowered.mlir")
        t0 = time.time()
        mpi = os.path.join(tmp, "mpi.mlir")
        ri._run([os.path.join(LLVM_BIN, "mlir-opt"), src, "--convert-shard-to-mpi",
                 "-o", mpi], "lower", remaining())
        drop_comm_split(mpi)
        ri._run([os.path.join(LLVM_BIN, "mlir-opt"), mpi,
                 f"--pass-pipeline=builtin.module({PIPELINE})",
                 "-o", lowered], "lower", remaining())
        log(f"lower: {time.time() - t0:.2f}s")
        strip_for_runner(lowered)
        outdir = os.path.join(tmp, "ranks")
        shutil.rmtree(outdir, ignore_errors=True)
        t0 = time.time()
        ri._run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(devices),
                 "--output-filename", outdir,
                 os.path.join(LLVM_BIN, "mlir-runner"), lowered, "-e", "tp_ref_entry",
                 "-entry-point-result=void", opt_level,
                 "-shared-libs=" + os.path.join(LLVM_LIB, "libmlir_c_runner_utils.so"),
                 "-shared-libs=" + os.path.join(LLVM_LIB, "libmlir_runner_utils.so"),
                 "-shared-libs=" + mpi_lib], "run", remaining())
        log(f"run ({devices} ranks): {time.time() - t0:.2f}s")
        per_rank = []
        for r in range(devices):
            files = glob.glob(os.path.join(outdir, "*", f"rank.{r}", "stdout"))
            if len(files) != 1:
                raise ToolError("run", f"no output file for rank {r} under {outdir}")
            with open(files[0]) as f:
                per_rank.append(ri.parse_printed(f.read(), results))
        diffs, ok, reasons = [], True, []
        for j, (name, shape, elt) in enumerate(results):
            if name not in refs:
                diffs.append((name, tuple(shape), None, "no reference"))
                ok = False
                reasons.append(f"{name}: no reference")
                continue
            maxd, msgs = 0.0, []
            for r in range(devices):
                good, d, msg = ri.compare(name, per_rank[r][j], elt, refs[name], atol, rtol)
                log(f"{name} rank {r}: max abs diff {d:.3e}")
                maxd = max(maxd, d)
                if not good:
                    msgs.append(f"rank {r}: {msg}")
            diffs.append((name, tuple(shape), maxd, "; ".join(msgs)))
            if msgs:
                ok = False
                reasons.append(f"{name}: " + "; ".join(msgs))
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
    ap.add_argument("--tp-parallelize", default="devices=2", metavar="OPTIONS",
                    help="option string for tp-opt --tp-parallelize")
    ap.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    ap.add_argument("--input-shape", action="append", default=[], metavar="NAME=DIMS")
    ap.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy",
                    help="reference output; default <model dir>/<name>.npy")
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--tp-translate", default=None)
    ap.add_argument("--tp-opt", default=None, help="default: next to tp-translate")
    ap.add_argument("--timeout", type=float, default=600.0, help="total seconds for all tools")
    ap.add_argument("--opt-level", default="-O2", help="mlir-runner optimisation flag")
    ap.add_argument("--debug-wrong-rank", action="store_true",
                    help="feed each rank the next rank's weight slices (must FAIL)")
    ap.add_argument("--keep", metavar="DIR", help="keep intermediate files in DIR")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args(argv)

    import onnx
    model = os.path.abspath(a.model)
    mdir = os.path.dirname(model)
    g = onnx.load(model, load_external_data=False).graph
    inits = {t.name for t in g.initializer}
    inputs = {n: np.load(f) for n, f in (s.split("=", 1) for s in a.input)}
    for vi in g.input:
        p = os.path.join(mdir, vi.name + ".npy")
        if vi.name not in inits and vi.name not in inputs and os.path.exists(p):
            inputs[vi.name] = np.load(p)
    refs = {n: np.load(f) for n, f in (s.split("=", 1) for s in a.output)}
    for o in g.output:
        p = os.path.join(mdir, o.name + ".npy")
        if o.name not in refs and os.path.exists(p):
            refs[o.name] = np.load(p)
    log = (lambda s: print("  [log] " + s, flush=True)) if a.verbose else None
    tp_opt = (shutil.which(a.tp_opt) or a.tp_opt) if a.tp_opt else None
    r = check(model, inputs, refs, a.tp_parallelize, a.input_shape, a.tp_translate, tp_opt,
              a.atol, a.rtol, a.timeout, a.keep, a.opt_level, log, a.debug_wrong_rank)
    for name, shape, maxd, msg in r.diffs:
        d = "n/a" if maxd is None else f"{maxd:.3e}"
        print(f"output {name}: shape {list(shape)} max abs diff {d}"
              + (f"  FAIL {msg}" if msg else "  ok"))
    what = f"{os.path.basename(mdir)} [{a.tp_parallelize}]"
    tol = f"atol={a.atol:g} rtol={a.rtol:g}"
    if r.ok:
        print(f"PASS {what}: {len(r.diffs)} output(s) match on every rank ({tol})")
        return 0
    print(f"FAIL {what} [{r.status}] ({tol}): {r.reason}")
    return 1 if r.status == "mismatch" else 2


if __name__ == "__main__":
    sys.exit(main())
