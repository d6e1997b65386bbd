#!/usr/bin/env python3
"""Run run_imported.py's checker over the ONNX backend node tests.

Each test directory (default /usr/share/libonnx-testdata/data/node/test_*/)
holds model.onnx and test_data_set_0/{input,output}_N.pb TensorProto files.
Inputs are matched by order to the graph inputs that are not initializers,
outputs by order to the graph outputs.  Every test is imported with
tp-translate, lowered/run with the upstream MLIR tools and compared with the
stored outputs (atol/rtol 1e-4 by default).

Tests that fail to import only because an input (Reshape shape, Slice starts,
Unsqueeze axes, Resize scales, ...) must be a compile-time constant are
retried with every integer or rank-0 graph input, and every float graph input
that a Resize reads as roi/scales or an Upsample as scales, replaced by a
Constant node holding its test value (disable with --no-fold); those are
marked with * in the failure list.

A test that runs but differs from its stored outputs is run again against
onnxruntime (CPU, graph optimisations off) on the same model and inputs when
onnxruntime is installed (disable with --no-ort): if it matches onnxruntime,
it is counted apart ('matched onnxruntime where it differs from the stored
outputs'), not as imported but failed.  ONNX's reference and onnxruntime
disagree on a few tests (Resize's align_corners on a fractional in*scale).

Prints: number of tests, how many import, how many run and match, and the
failures grouped by reason (stage + normalised message).

Usage
  run_node_tests.py [--dir DIR] [--filter REGEX] [-j 2] [--timeout 120]
                    [--tp-translate PATH] [--json results.json] [-v]
                    [--expect-pass FILE] [--write-pass FILE] [--no-fold] [--no-ort]
Exit code 0 always unless --strict (then 1 if any imported test fails and
does not match onnxruntime either).

--expect-pass FILE pins the tests that must pass (one name per line, '#'
comments): any of them that does not pass is listed and counted in
'pinned tests that did not pass: N', so that an op regressing to
"unsupported" (which drops out of the pass rate) still fails the test.
--write-pass FILE writes the names that passed, to refresh the pin.
"""

import argparse
import glob
import json
import multiprocessing
import os
import re
import shutil
import sys
import tempfile
import time
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import run_compiled  # noqa: E402
import run_imported  # noqa: E402

DEFAULT_DIR = "/usr/share/libonnx-testdata/data/node"


def load_case(tdir):
    import onnx
    from onnx import numpy_helper
    model = onnx.load(os.path.join(tdir, "model.onnx"), load_external_data=False)
    g = model.graph
    inits = {t.name for t in g.initializer}
    in_names = [vi.name for vi in g.input if vi.name not in inits]
    out_names = [vi.name for vi in g.output]
    ds = os.path.join(tdir, "test_data_set_0")

    bf16_names = set()
    decl = {"input": [vi for vi in g.input if vi.name not in inits], "output": list(g.output)}

    def read(prefix):
        files = glob.glob(os.path.join(ds, prefix + "_*.pb"))
        files.sort(key=lambda f: int(re.search(r"_(\d+)\.pb$", f).group(1)))
        vals = []
        for f in files:
            t = onnx.TensorProto()
            with open(f, "rb") as fh:
                t.ParseFromString(fh.read())
            if t.data_type == onnx.TensorProto.STRING:
                raise ValueError("string tensor in test data")
            a = numpy_helper.to_array(t)
            i = len(vals)
            vi = decl[prefix][i] if i < len(decl[prefix]) else None
            if vi is not None:
                tt = vi.type.tensor_type
                dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
                if tt.HasField("shape") and (len(dims) != a.ndim or any(
                        d is not None and d != s for d, s in zip(dims, a.shape))):
                    raise ValueError(f"{prefix} {vi.name}: stored shape {list(a.shape)} "
                                     f"differs from declared {dims}")
            # bfloat16 data is sometimes stored as UINT16 bit patterns
            if t.data_type == onnx.TensorProto.BFLOAT16 or (
                    vi is not None and tt.elem_type == onnx.TensorProto.BFLOAT16
                    and t.data_type == onnx.TensorProto.UINT16):
                # older onnx returns raw uint16 bits, newer ml_dtypes.bfloat16
                bits = a.view(np.uint16) if a.dtype.itemsize == 2 else a
                a = (bits.astype(np.uint32) << 16).view(np.float32)
                bf16_names.add((prefix, i))
            vals.append(a)
        return vals

    for vi in list(g.input) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            raise ValueError("non-tensor graph input/output (sequence/optional/map)")
    ins, outs = read("input"), read("output")
    if len(ins) > len(in_names) or len(outs) != len(out_names):
        raise ValueError(f"test data count mismatch ({len(ins)} inputs for {len(in_names)}, "
                         f"{len(outs)} outputs for {len(out_names)})")
    ref_types = {out_names[i]: "bf16" for p, i in bf16_names if p == "output"}
    return dict(zip(in_names, ins)), dict(zip(out_names, outs)), ref_types


def normalise(stage, msg):
    if stage == "onnxruntime":
        return "onnxruntime: matches onnxruntime, which differs from the stored outputs"
    if stage == "import" and "does not verify" in msg:
        stage = "import (importer emitted invalid IR)"
    line = msg.strip().splitlines()[0] if msg.strip() else ""
    line = re.sub(r"^.*?:\d+:\d+: error: ", "", line)
    m = re.search(r"unsupported ONNX op '([^']+)'", line)
    if m:
        return f"{stage}: unsupported op {m.group(1)}"
    line = re.sub(r" at node '[^']*'", "", line)
    line = re.sub(r"node '[^']*' \(([^)]*)\)", r"\1", line)
    line = re.sub(r"'[^']*'", "'…'", line) if stage != "import" else line
    if stage == "mismatch":
        line = re.sub(r"^[^:]*: ", "", line)
        line = re.sub(r"\d+/\d+ elements", "N elements", line)
        line = re.sub(r"\d+ (NaN|Inf|elements)", r"N \1", line)
        line = re.sub(r"got \([^)]*\) ref \([^)]*\)", "got .. ref ..", line)
        line = re.sub(r"got \w+ ref \w+", lambda m: m.group(0), line)
        line = line.split(";")[0]
    if stage in ("lower", "run"):
        line = re.sub(r"^.*?error: ", "", line)
        line = re.sub(r"%[\w#:]+", "%v", line)
        line = re.sub(r"\d+", "N", line)
    return f"{stage}: {line[:160]}"


FOLDABLE = re.compile(r"must be known at import time")

# Float operands the importer needs at import time, by (op, input slot) of the
# default domain: Resize's roi and scales (Resize-10 has scales at slot 1,
# Resize-11+ roi at 1 and scales at 2), Upsample's scales and OneHot's depth.
CONST_FLOAT_SLOTS = {"Resize": {1, 2}, "Upsample": {1}, "OneHot": {1}}


def const_float_uses(graph):
    """Names that some node of `graph` (or of a subgraph in it) reads in one
    of CONST_FLOAT_SLOTS."""
    import onnx
    names = set()
    for node in graph.node:
        if node.domain in ("", "ai.onnx"):
            for slot in CONST_FLOAT_SLOTS.get(node.op_type, ()):
                if slot < len(node.input) and node.input[slot]:
                    names.add(node.input[slot])
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                names |= const_float_uses(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    names |= const_float_uses(sub)
    return names


def fold_inputs(model_path, inputs, out_path):
    """Writes a copy of the model in which every integer or rank-0 graph input,
    and every float graph input that a node reads in one of CONST_FLOAT_SLOTS
    (Resize roi/scales, Upsample scales), is replaced by a Constant node
    holding its test value (the importer needs shapes/axes/pads/scales/... as
    compile-time constants).  Returns the folded names."""
    import onnx
    from onnx import helper, numpy_helper
    m = onnx.load(model_path)
    g = m.graph
    inits = {t.name for t in g.initializer}
    const_floats = const_float_uses(g)
    folded, keep = [], []
    for vi in g.input:
        v = inputs.get(vi.name)
        if vi.name not in inits and v is not None and (
                v.dtype.kind in "iu" or v.ndim == 0
                or (v.dtype.kind == "f" and vi.name in const_floats)):
            folded.append(vi.name)
        else:
            keep.append(vi)
    if not folded:
        return []
    consts = [helper.make_node("Constant", [], [n],
                               value=numpy_helper.from_array(np.asarray(inputs[n]), n))
              for n in folded]
    del g.input[:]
    g.input.extend(keep)
    nodes = consts + list(g.node)
    del g.node[:]
    g.node.extend(nodes)
    onnx.save(m, out_path)
    return folded


def run_one(job):
    tdir, opts = job
    name = os.path.basename(tdir.rstrip("/"))
    t0 = time.time()
    try:
        inputs, refs, ref_types = load_case(tdir)
    except Exception as e:
        return name, "data", f"unsupported test data: {e}", time.time() - t0, [], False
    model = os.path.join(tdir, "model.onnx")
    if opts["backend"] == "tp-run":
        checker = run_compiled.check
        kw = dict(tp_compile=opts["tp_compile"], tp_run=opts["tp_run"], atol=opts["atol"],
                  rtol=opts["rtol"], timeout=opts["timeout"], ref_types=ref_types)
    else:
        checker = run_imported.check
        kw = dict(tp_translate=opts["tp_translate"], atol=opts["atol"], rtol=opts["rtol"],
                  timeout=opts["timeout"], ref_types=ref_types)
    r = checker(model, inputs, refs, **kw)
    folded = False
    with tempfile.TemporaryDirectory(prefix="tp-fold-") as tmp:
        if opts["fold"] and r.status == "import" and FOLDABLE.search(r.reason):
            fmodel = os.path.join(tmp, "model.onnx")
            names = fold_inputs(model, inputs, fmodel)
            if names:
                folded = True
                model = fmodel
                inputs = {k: v for k, v in inputs.items() if k not in names}
                r = checker(model, inputs, refs, **kw)
        if r.status == "mismatch" and opts["ort"]:
            # Where the stored outputs and onnxruntime disagree (ONNX's
            # reference and onnxruntime differ on a few tests), matching
            # onnxruntime is reported apart from a wrong result.
            try:
                ort_refs = run_imported.ort_reference(model, inputs)
            except Exception:
                ort_refs = None
            if ort_refs is not None and checker(model, inputs, ort_refs, **kw).ok:
                r.status = "onnxruntime"
                r.reason = "matches onnxruntime, which differs from the stored outputs (" \
                    + r.reason + ")"
    diffs = [(n, d) for n, _, d, _ in r.diffs]
    return name, r.status, r.reason, time.time() - t0, diffs, folded


def _have_ort():
    try:
        import onnxruntime  # noqa: F401
        return True
    except ImportError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=DEFAULT_DIR)
    ap.add_argument("--filter", default="", help="regex on the test name")
    ap.add_argument("--sample", default="0/1", metavar="K/N",
                    help="run the tests whose index in name order is K modulo N "
                         "(make check's suite runs a part; the whole: 0/1)")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per test")
    ap.add_argument("--atol", type=float, default=1e-4)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--tp-translate", default=None)
    ap.add_argument("--backend", choices=["mlir-runner", "tp-run", "compiled"],
                    default="mlir-runner",
                    help="mlir-runner: lower the imported IR with upstream MLIR and run it; "
                         "tp-run (alias compiled): tp-compile --devices 1 --target cpu, "
                         "then tp-run")
    ap.add_argument("--tp-compile", default=None)
    ap.add_argument("--tp-run", default=None)
    ap.add_argument("--json", help="write per-test results here")
    ap.add_argument("--strict", action="store_true")
    ap.add_argument("--expect-pass", help="file of test names that must pass")
    ap.add_argument("--write-pass", help="write the names of the tests that passed")
    ap.add_argument("--no-fold", action="store_true",
                    help="do not retry tests whose shape/axes/... inputs must be constants "
                         "with those inputs turned into Constant nodes")
    ap.add_argument("--no-ort", action="store_true",
                    help="do not check a test that differs from its stored outputs against "
                         "onnxruntime (by default one that matches onnxruntime is counted "
                         "apart, not as a wrong result)")
    ap.add_argument("-v", "--verbose", action="store_true")
    a = ap.parse_args()
    if a.backend == "compiled":
        a.backend = "tp-run"
    jobs = max(1, min(a.jobs, 2))

    tests = sorted(d for d in glob.glob(os.path.join(a.dir, "test_*"))
                   if os.path.exists(os.path.join(d, "model.onnx"))
                   and re.search(a.filter, os.path.basename(d)))
    found = len(tests)
    part, parts = (int(x) for x in a.sample.split("/"))
    tests = tests[part::parts]
    # Run a private copy of tp-translate: the build tree may be relinked meanwhile.
    snap_dir = tempfile.mkdtemp(prefix="tp-node-tests-")
    src = run_imported.find_tp_translate(a.tp_translate)
    for _ in range(120):
        if os.access(src, os.X_OK) and os.path.getsize(src) > 0:
            break
        time.sleep(1)
    snap = os.path.join(snap_dir, "tp-translate")
    shutil.copy2(src, snap)
    a.tp_translate = snap
    for tool in ("tp_compile", "tp_run"):
        if a.backend == "tp-run":
            path = run_compiled.find_tool(tool.replace("_", "-"), getattr(a, tool))
            copy = os.path.join(snap_dir, os.path.basename(path))
            shutil.copy2(shutil.which(path) or path, copy)
            setattr(a, tool, copy)
    opts = dict(tp_translate=a.tp_translate, atol=a.atol, rtol=a.rtol, timeout=a.timeout,
                fold=not a.no_fold, ort=not a.no_ort and _have_ort(), backend=a.backend, tp_compile=a.tp_compile,
                tp_run=a.tp_run)
    results = []
    t0 = time.time()
    with multiprocessing.Pool(jobs) as pool:
        for i, res in enumerate(pool.imap_unordered(run_one, [(t, opts) for t in tests]), 1):
            results.append(res)
            if a.verbose:
                print(f"[{i}/{len(tests)}] {res[0]}: {res[1]}{' (folded)' if res[5] else ''} "
                      f"({res[3]:.1f}s) {res[2][:200]}",
                      flush=True)
    results.sort()
    total = len(results)
    data_bad = [r for r in results if r[1] == "data"]
    not_imported = [r for r in results if r[1] in ("import", "data")
                    or (r[1] == "timeout" and r[2].startswith("import"))]
    imported = total - len(not_imported)
    passed = [r for r in results if r[1] == "pass"]
    ort_only = [r for r in results if r[1] == "onnxruntime"]
    sample = f", sample {a.sample} of {found}"
    print(f"node tests: {total}  (dir {a.dir}, filter '{a.filter}'{sample}, {time.time() - t0:.0f}s, "
          f"atol={a.atol:g} rtol={a.rtol:g})")
    print(f"  backend: {a.backend}")
    print(f"  imported by {'tp-compile' if a.backend == 'tp-run' else 'tp-translate'}: {imported}"
          f"  (+{len(data_bad)} skipped: non-tensor/string test data)")
    nfold = sum(1 for r in results if r[5] and r[1] != "import")
    if nfold:
        print(f"    of which {nfold} only after folding integer/scalar/scale inputs into Constant nodes"
              f" ({sum(1 for r in passed if r[5])} of them match)")
    print(f"  ran and matched stored outputs: {len(passed)}")
    if opts["ort"]:
        print(f"  ran and matched onnxruntime where it differs from the stored outputs: "
              f"{len(ort_only)}")
    else:
        print("  (not checked against onnxruntime: --no-ort or onnxruntime missing)")
    unsupported = [r for r in results if r[1] == "import" and "unsupported ONNX op" in r[2]]
    usable = total - len(unsupported) - len(data_bad)
    if usable:
        print(f"  pass rate over tests of supported ops with usable data: "
              f"{len(passed)}/{usable} = {100.0 * len(passed) / usable:.1f}%")
    print(f"  imported but failed: {imported - len(passed) - len(ort_only)}")
    groups = defaultdict(list)
    for name, status, reason, _, _, folded in results:
        if status != "pass":
            groups[normalise(status, reason)].append(name + ("*" if folded else ""))
    order = {"mismatch": 0, "run": 1, "lower": 2, "timeout": 3, "error": 4, "onnxruntime": 5,
             "import": 6, "data": 7}
    print("\nfailures by reason (* = after folding inputs into Constant nodes):")
    for key in sorted(groups, key=lambda k: (order.get(k.split(":")[0], 9), -len(groups[k]), k)):
        names = groups[key]
        print(f"  [{len(names)}] {key}")
        print("      " + " ".join(names))
    shutil.rmtree(snap_dir, ignore_errors=True)
    passed_names = {r[0] for r in passed}
    if a.expect_pass:
        with open(a.expect_pass) as f:
            pinned = [l.split("#")[0].strip() for l in f]
        ran = {os.path.basename(t) for t in tests}
        pinned = [n for n in pinned if n and re.search(a.filter, n)
                  and (parts == 1 or n in ran)]
        lost = [n for n in pinned if n not in passed_names]
        print(f"\npinned tests that did not pass: {len(lost)} of {len(pinned)}")
        if lost:
            print("      " + " ".join(lost))
    if a.write_pass:
        with open(a.write_pass, "w") as f:
            f.write(f"# ONNX node tests that pass through the {a.backend} backend; written by\n"
                    f"# run_node_tests.py --write-pass. A test may leave this list only with a\n"
                    f"# reason in docs/onnx-ops.md.\n")
            f.write("".join(n + "\n" for n in sorted(passed_names)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump([dict(test=n, status=s, reason=r, seconds=round(t, 2),
                            max_abs_diff=d, folded=fo) for n, s, r, t, d, fo in results],
                      f, indent=1)
    if a.strict and imported != len(passed) + len(ort_only):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
