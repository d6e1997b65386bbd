#!/usr/bin/python3
"""archgen: sample transformer architectures, export each with
torch.onnx.export, and check that tp-compile splits it as Megatron would.

    archgen.py [--seed S] [--count N] [--ranks 1,2,4] [--no-sp]
               [--features key=value ...] [--plan-only] [--keep DIR]
               [--expected-failures FILE] [--save-regressions DIR |
               --no-save] [--minimize]
    archgen.py --replay FILE [FILE ...] [--all-configs] [--minimize]
    archgen.py --replay-dir DIR [--expected-failures FILE] [--sample K/N]

Sample i of a run is the architecture of seed S+i (features.sample): it is
built in torch (model.py) with random O(1) weights and exported at a
sampled opset (14-17) with dynamic batch and sequence axes; onnxruntime
checks the export and its conversion to a sampled opset (18-21)
(check_export.py). Then, at both opsets, at tp=r for each rank count and
tp=2,sp: the plan (tp-compile --target none --explain) must use exactly
the minimum collectives, keep the logits split, split every attention and
MLP contraction and hold at most 55% / 32% of the weights per rank at 2 /
4 ranks (expect.py: all from the structure); and run_zoo.py (a one-model
zoo) compiles and runs it against torch's outputs.

One line per sample: PASS, FAIL (with one line per failing run), XFAIL
(every failing run is a known compiler bug of --expected-failures) or SKIP
(the export itself is wrong); exit status 1 if a sample failed. A failing
sample is written to <save-regressions>/<seed>.json (seed, features, the
configs that failed), which --replay rebuilds bit for bit; --minimize
shrinks its features to the fewest that fail the same way.

Run with Debian's /usr/bin/python3 (torch 1.13; torch.onnx.export writes
opsets up to 17); run_zoo.py and check_export.py run in --zoo-python
(default: $ARCHGEN_PYTHON, else the first python3 on PATH with onnx and
numpy).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
RUN_ZOO = os.path.join(ROOT, "utils", "reference-run", "run_zoo.py")
REGRESSIONS = os.path.join(ROOT, "test", "Numerics", "archgen", "regressions")
sys.path.insert(0, HERE)

import expect  # noqa: E402
import features as space  # noqa: E402

sys.path.insert(0, os.path.dirname(RUN_ZOO))
import run_zoo  # noqa: E402  (parse_explain: the same reading of --explain)

# The targets: weights per rank at 2 and 4 ranks, padding included.
WEIGHT_LIMITS = {2: 0.55, 4: 0.32}
# Slack for constants the export folds into initializers (index tables,
# shapes) that expect.weights does not count.
WEIGHT_SLACK = 0.02

LINE = re.compile(r"^(?P<name>\S+) opset(?P<opset>\d+) (?P<config>\S+): "
                  r"(?P<rest>.*)$")


def find_tool(name):
    built = os.path.join(ROOT, "build", "bin", name)
    return built if os.access(built, os.X_OK) else (shutil.which(name) or name)


def find_zoo_python():
    if os.environ.get("ARCHGEN_PYTHON"):
        return os.environ["ARCHGEN_PYTHON"]
    for candidate in [shutil.which("python3"), sys.executable]:
        if candidate and subprocess.call(
                [candidate, "-c", "import onnx, numpy"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
            return candidate
    return sys.executable


def configs(ranks, sp):
    out = [f"tp={r}" for r in ranks]
    if sp and 2 in ranks:
        out.append("tp=2,sp")
    return out


def parse_config(text):
    parts = text.split(",")
    return int(parts[0].split("=")[1]), "sp" in parts


def show(counts):
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"


def count_statistics(explain):
    """The all-reduces of one value per token (a norm's mean or variance
    over features split by heads: OLMo 2's Q and K norms), from
    tp-compile --explain's list."""
    import model
    count = 0
    for shape in re.findall(r"^\s+all_reduce\s+tensor<([0-9x]+)x\w+>",
                            explain, re.M):
        if math.prod(int(d) for d in shape.split("x")) <= \
                model.BATCH * model.SEQ:
            count += 1
    return count


def check_plan(f, t, sp, collectives, fraction, split, replicated,
               statistics=0):
    """What in one plan differs from what the structure of `f` allows."""
    problems = []
    got = {k: v for k, v in collectives.items() if k != "all_slice"}
    if statistics:
        got["all_reduce"] -= statistics
        if not got["all_reduce"]:
            del got["all_reduce"]
    want_statistics = expect.statistics(f, t)
    if statistics not in want_statistics:
        problems.append(f"collectives of statistics: {statistics} "
                        f"all-reduces (expected "
                        f"{' or '.join(map(str, want_statistics))})")
    raw = dict(got)
    if sp and "all_reduce" in got:
        # An all-reduce moves what a reduce-scatter and an all-gather do
        # (Megatron-LM's identity): the stream stays whole up to the next
        # block instead of split, which costs no extra bytes.
        n = got.pop("all_reduce")
        for kind in ("reduce_scatter", "all_gather"):
            got[kind] = got.get(kind, 0) + n
    want = expect.collectives(f, t, sp)
    if got != want:
        problems.append(f"collectives {show(raw)} (minimum {show(want)})")
    want_split = expect.split_outputs(f, t)
    if sorted(split) != sorted(want_split):
        problems.append(f"split outputs [{', '.join(split)}] (expected "
                        f"[{', '.join(want_split)}])")
    if t > 1:
        structural = expect.weight_fraction(f, t)
        limit = max(WEIGHT_LIMITS.get(t, 1.0 / t + 0.05),
                    structural + WEIGHT_SLACK)
        if fraction > limit + 1e-9:
            problems.append(f"weights per device {100 * fraction:.1f}% > "
                            f"{100 * limit:.1f}% (structural "
                            f"{100 * structural:.1f}%)")
    # By structure every contraction of attention and MLP splits; only a
    # bottleneck's down and up projections (/layers.N/down, /up) and the
    # shared Q-K bottleneck (attn/qk_down) are whole,
    # and K/V heads that t does not divide (replicated, as Megatron-LM
    # does: K and V of a fused projection, up to 2 of its pieces).
    wrong, fused = [], {}
    for node, why in replicated:
        m = re.match(r"/layers\.(\d+)/(attn|mlp)/(\w+)", node)
        # A module applied several times (shared layers) names its later
        # calls' nodes with a suffix: qk_down_1.
        call = re.match(r"(\w+?)(_\d+)?$", m.group(3)) if m else None
        name = call.group(1) if m else None
        if not m or name == "qk_down":
            continue
        if f.kv_heads % t and name in ("k_proj", "v_proj"):
            continue
        if f.kv_heads % t and name == "qkv_proj":
            layer = (m.group(1), call.group(2))
            fused[layer] = fused.get(layer, 0) + 1
            if fused[layer] <= 2:
                continue
        wrong.append((node, why))
    if wrong:
        # The first contraction of that block left whole, even one that
        # may be (a fused QKV projection not cut into pieces): the cause.
        block = re.match(r"/layers\.\d+/\w+/", wrong[0][0]).group(0)
        node, why = next(r for r in replicated if r[0].startswith(block))
        why = why.replace("; ", ", ")
        more = f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""
        problems.append(f"replicated '{node}'{more}: {why[:300]}")
    return problems


def first_error(stderr):
    lines = stderr.splitlines()
    errors = [l for l in lines if "error" in l] or lines or [""]
    return re.sub(r"\S*/(model|opset\d+)\.onnx", r"\1.onnx",
                  errors[0][:300]).replace("; ", ", ")


def plan(args, path, f, config):
    """tp-compile --target none --explain (the plan, no code): the
    problems of one run, or its error."""
    import model
    t, sp = parse_config(config)
    out = path + f".tp{t}{'sp' if sp else ''}.tpa"
    cmd = [args.tp_compile, path, "--target", "none", "--explain",
           "--devices", str(t), "-o", out]
    if sp:
        cmd.append("--sequence-parallel")
    for name in ("input_ids", "attention_mask"):
        cmd += ["--input-shape", f"{name}={model.BATCH}x{model.SEQ}"]
    if args.lock:
        cmd = ["flock", "-s", args.lock] + cmd
    ran = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(out, ignore_errors=True)
    if ran.returncode != 0:
        return [f"tp-compile exit {ran.returncode}: {first_error(ran.stderr)}"]
    collectives, fraction, split = run_zoo.parse_explain(ran.stdout +
                                                         ran.stderr)
    m = re.search(r"^replicated contractions:\n((?:  .*\n)+)", ran.stdout,
                  re.M)
    replicated = re.findall(r"^  '([^']*)': (.*)$", m.group(1) if m else "",
                            re.M)
    return check_plan(f, t, sp, collectives, fraction, split, replicated,
                      count_statistics(ran.stdout))


def write_zoo(f, seed, folder):
    """A one-model zoo (run_zoo.py --zoo) for the architecture."""
    import model
    entry = model.export(f, seed, os.path.join(folder, "arch"))
    with open(os.path.join(folder, "zoo.json"), "w") as out:
        json.dump({"arch": entry}, out, indent=1)
    return entry


class Invalid(Exception):
    """The export itself is wrong (torch or onnxruntime says so): the
    sample says nothing about the compiler."""


def run_sample(args, f, seed, runs, opsets, keep=None, plan_only=False):
    """[(label, why)] of the failing runs of one architecture; raises
    Invalid for an export that torch refuses or onnxruntime disagrees
    with. Every run's plan is checked (tp-compile --target none); then
    run_zoo.py compiles and runs them against torch (not with
    plan_only)."""
    work = keep or tempfile.mkdtemp(prefix=f"archgen-{seed}-")
    try:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                entry = write_zoo(f, seed, work)
        except Exception as e:  # an export that torch itself refuses
            raise Invalid(f"torch.onnx.export: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:300]}")
        # float32 rounding grows with the outputs' size (a tied head's
        # logits are O(sqrt(hidden))).
        atol = args.atol * max(1.0, entry["output_rms"])
        converted = [o for o in opsets if o != f.opset]
        checked = subprocess.run(
            [args.zoo_python, os.path.join(HERE, "check_export.py"), work,
             str(atol)] + [str(o) for o in converted],
            capture_output=True, text=True)
        if checked.returncode != 0:
            raise Invalid((checked.stdout.strip() or
                           checked.stderr.strip()[-300:]))
        # The compiled model may be as far from torch as onnxruntime is
        # (x4): a wrong split is off by O(1e-2) or more.
        m = re.match(r"ok (\S+)", checked.stdout)
        if m:
            atol = max(atol, 4 * float(m.group(1)))
        if args.export_only:
            return []
        failures, errors = [], set()
        for opset in opsets:
            path = os.path.join(work, "arch", "model.onnx") \
                if opset == f.opset else os.path.join(work,
                                                      f"opset{opset}.onnx")
            for config in runs:
                problems = plan(args, path, f, config)
                if problems:
                    label = f"opset{opset} {config}"
                    failures.append((label, "; ".join(problems)))
                    if problems[0].startswith("tp-compile exit"):
                        errors.add(label)
        if plan_only:
            return failures
        cmd = [args.zoo_python, RUN_ZOO, "arch", "--zoo", work,
               "--tp-compile", args.tp_compile, "--tp-run", args.tp_run,
               "--atol", f"{atol:.3g}", "--rtol", str(args.rtol)]
        for opset in opsets:
            cmd += ["--opset", "native" if opset == f.opset else str(opset)]
        for config in runs:
            cmd += ["--config", config]
        if args.lock:  # hold off a rebuild of the tools while they run
            cmd = ["flock", "-s", args.lock] + cmd
        env = dict(os.environ)
        if not getattr(args, "replaying", False):
            # A fresh sample is built once: keep it out of the build cache
            # (TP_BUILD_CACHE, which lit sets) rather than grow it.
            env.pop("TP_BUILD_CACHE", None)
        ran = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if args.verbose:
            sys.stdout.write(ran.stdout)
        seen = 0
        for line in ran.stdout.splitlines():
            m = LINE.match(line)
            if not m:
                continue
            seen += 1
            label = f"opset{m.group('opset')} {m.group('config')}"
            rest = m.group("rest")
            if label in errors:
                continue  # the plan's error says it
            if rest.startswith("FAIL ("):  # tp-compile (code) or tp-run
                why = re.sub(r"\S*/(model|opset\d+)\.onnx", r"\1.onnx",
                             rest[len("FAIL ("):-1])
            elif "FAIL" in rest.split(" | ")[0]:
                why = "numerics: " + rest.split(" | ")[0]
            else:
                continue
            for i, (other, text) in enumerate(failures):
                if other == label:
                    failures[i] = (label, why + "; " + text)
                    break
            else:
                failures.append((label, why))
        if seen != len(runs) * len(opsets):
            tail = (ran.stderr.strip().splitlines() or ["no output"])[-1]
            failures.append(("run_zoo", f"{seen} of "
                             f"{len(runs) * len(opsets)} runs reported "
                             f"(exit {ran.returncode}): {tail[:300]}"))
        order = {f"opset{o} {c}": i for i, (o, c) in enumerate(
            (o, c) for o in opsets for c in runs)}
        return sorted(failures, key=lambda x: order.get(x[0], -1))
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


# What a failing run's problems are; `plan` stands for the first four.
KINDS = ("collectives", "weights", "split", "replicated", "error",
         "numerics", "run")
PLAN = {"collectives", "weights", "split", "replicated"}


def problem_kind(part):
    """collectives, weights, split, replicated (a contraction left
    whole), error (tp-compile fails), numerics, or run (tp-run fails)."""
    word = part.split(" ")[0]
    if word in PLAN:
        return word
    if word == "numerics:":
        return "numerics"
    if word == "tp-compile":
        return "error"
    return "run"


def load_known(path):
    """expected-failures.txt, one known compiler failure a line:

        <regression>.json <kinds>: <expression>  # what fails

    The regression must still fail. <kinds> (comma-separated: plan, or
    its collectives, weights, split, replicated; error, numerics, run)
    and the expression (Python, of the features f,
    the rank count t and sp) say which runs of other architectures fail
    for the same bug: a fresh sample whose every failing run is covered
    is a known failure, not a new one."""
    known = []
    if not path:
        return known
    with open(path) as inp:
        for number, line in enumerate(inp, 1):
            text = line.split("#")[0].strip()
            if not text:
                continue
            m = re.match(r"(\S+\.json)\s+([a-z,]+):\s*(.+)$", text)
            kinds = set(m.group(2).split(",")) if m else set()
            if "plan" in kinds:
                kinds = (kinds - {"plan"}) | PLAN
            if not m or not kinds <= set(KINDS):
                sys.exit(f"{path}:{number}: expected '<regression>.json "
                         f"<kinds>: <expression>', kinds from plan, "
                         f"{', '.join(KINDS)}")
            known.append((m.group(1), kinds, m.group(3)))
    return known


def known_match(known, f, label, why):
    """The known failure that covers a failing run, if any."""
    config = label.split(" ")[-1]
    if "=" not in config:
        return None
    t, sp = parse_config(config)
    kinds = {problem_kind(p) for p in why.split("; ")}
    for name, covers, expression in known:
        if kinds <= covers and eval(expression, {"__builtins__": {}},
                                    {"f": f, "t": t, "sp": sp}):
            return name
    return None


def report(seed, f, failures, elapsed, invalid=None, known=()):
    """Print a sample's line; returns the names of the known failures
    that cover all its failing runs (None if one is not known)."""
    matched = [known_match(known, f, label, why) for label, why in failures]
    covered = failures and all(matched)
    status = "SKIP" if invalid else ("XFAIL" if covered else
                                     "FAIL" if failures else "PASS")
    print(f"sample {seed}: {status} {f.describe()} ({elapsed:.0f} s)")
    if invalid:
        print(f"  invalid export: {invalid}")
    for (label, why), name in zip(failures, matched):
        print(f"  {label}: {why}" + (f" [known: {name}]" if name else ""))
    sys.stdout.flush()
    return sorted(set(matched)) if covered else None


def save_regression(folder, seed, f, failures, runs, opsets, note=None,
                    name=None):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name or seed}.json")
    failing = [r for r in runs
               if any(label.endswith(" " + r) for label, _ in failures)]
    case = {"seed": seed, "features": f.to_dict(),
            "configs": failing or runs, "opsets": opsets,
            "failures": [f"{label}: {why}" for label, why in failures]}
    if note:
        case["note"] = note
    with open(path, "w") as out:
        json.dump(case, out, indent=1)
        out.write("\n")
    return path


def failure_items(why):
    """One run's problems as (priority, class) pairs, names and numbers
    left out, the most specific first: an error, a contraction left whole
    and why, numerics, then counts."""
    items = []
    for part in why.split("; "):
        word = part.split(" ")[0]
        if word in ("collectives", "weights", "split"):
            items.append((3, word))
        elif word == "numerics:":
            items.append((2, "numerics"))
        else:  # an error, or 'replicated <node>: <why>'
            text = re.sub(r"'[^']*'|\d+", "#", part)
            text = re.sub(r" \(and # more\)", "", text)
            items.append((1 if word == "replicated" else 0, text[:160]))
    return items


def minimize(args, f, seed, failures, opsets, target=None):
    """Set features to the plain GPT-2-like defaults one at a time while
    the sample still fails the same way (its most specific problem, or
    the first that contains `target`), on a config where it fails."""
    candidates = [(item, label) for label, why in failures
                  for item in failure_items(why)
                  if target is None or target in item[1]]
    if not candidates:
        print(f"  nothing to minimize matches '{target}'")
        return f
    # The most specific problem, at the first run that has it.
    (priority, want), label = min(candidates, key=lambda c: c[0][0])
    config = label.split(" ")[-1] if " " in label else "tp=2"
    opset = int(label.split(" ")[0][len("opset"):]) \
        if label.startswith("opset") else f.opset
    current = f
    # A plan's failure needs no code built: tp-compile --target none (an
    # error may come from the code's build: those run in full).
    plan_only = priority in (1, 3)
    print(f"  minimizing on {config} opset{opset}: {want}")
    plain = space.Features()
    order = ["shared_layers", "logit_post", "qk_bottleneck", "bottleneck",
             "attn_conv",
             "mlp_conv", "embed_norm",
             "embed_scale", "residual", "position", "bh_view", "qkv",
             "attention", "kind", "norm_place", "norm", "mlp", "fused_gate",
             "ffn_mult", "repeat_kv", "causal_mask", "scale", "tied",
             "lm_bias", "linear_bias", "position_ids", "rotary_pct",
             "rotary_style", "parallel_norms", "parallel_sum", "layers",
             "vocab", "heads", "head_dim"]
    for name in order:
        candidates = [getattr(plain, name)]
        if name == "layers":
            candidates = [1]
        if name == "attention":
            candidates = [("mha", current.heads)]
        if name == "heads":
            candidates = [(h, h) for h in (2, 4)]
        for value in candidates:
            trial = space.Features.from_dict(current.to_dict())
            if name == "attention":
                trial.attention, trial.kv_heads = value
            elif name == "heads":
                trial.heads, trial.kv_heads = value
                trial.attention = "mha"
            else:
                setattr(trial, name, value)
            if trial == current:
                continue
            if trial.qkv == "kv_tail" and trial.kv_heads == trial.heads:
                trial.qkv = "fused"
            if trial.residual == "parallel" and trial.norm_place != "pre":
                trial.norm_place = "pre"
            if opset == f.opset:
                trial.opset = opset
            try:
                space.check(trial)
            except ValueError:
                continue
            runs_opsets = [trial.opset] if opset == f.opset else [opset]
            try:
                got = run_sample(args, trial, seed, [config], runs_opsets,
                                 plan_only=plan_only)
            except Invalid:
                continue
            if any(want == item[1] for _, why in got
                   for item in failure_items(why)):
                current = trial
                print(f"    {name}={getattr(trial, name)}: still fails")
                sys.stdout.flush()
                break
    return current


def replay(args, path, all_configs):
    with open(path) as inp:
        case = json.load(inp)
    f = space.check(space.Features.from_dict(case["features"]))
    runs = configs(args.ranks, not args.no_sp) if all_configs else \
        case["configs"]
    opsets = case.get("opsets") or [f.opset, f.converted_opset]
    start = time.time()
    try:
        failures = run_sample(args, f, case["seed"], runs, opsets, args.keep)
        invalid = None
    except Invalid as e:
        failures, invalid = [], str(e)
    return f, case["seed"], failures, invalid, time.time() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int,
                        help="first sample's seed (default: "
                        "$ARCHGEN_SEED, else from the clock)")
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--no-sp", action="store_true",
                        help="leave out tp=2,sp")
    parser.add_argument("--features", nargs="*", default=[],
                        metavar="KEY=VALUE", help="pin features")
    parser.add_argument("--keep", help="keep the exports in this folder "
                        "(one sub-folder per seed)")
    parser.add_argument("--save-regressions", default=REGRESSIONS,
                        metavar="DIR")
    parser.add_argument("--no-save", action="store_true")
    parser.add_argument("--minimize", action="store_true",
                        help="shrink a failing sample's features and save "
                        "the smallest that still fails the same way")
    parser.add_argument("--minimize-on", metavar="TEXT",
                        help="with --minimize: keep the problem that "
                        "contains TEXT (default: the most specific)")
    parser.add_argument("--replay", nargs="+", metavar="FILE")
    parser.add_argument("--replay-dir", metavar="DIR")
    parser.add_argument("--sample", default="0/1", metavar="K/N",
                        help="with --replay-dir: replay the K-th of every "
                        "N regressions (sorted by name; default all)")
    parser.add_argument("--expected-failures", metavar="FILE",
                        help="known compiler failures: regressions that "
                        "must still fail, each with an expression of the "
                        "runs that fail the same way")
    parser.add_argument("--all-configs", action="store_true",
                        help="replay every config, not only the failing")
    parser.add_argument("--list", action="store_true",
                        help="print the sampled features only")
    parser.add_argument("--plan-only", action="store_true",
                        help="check the plans only (tp-compile --target "
                        "none): no code is built or run, no numerics")
    parser.add_argument("--export-only", action="store_true",
                        help="export and check with onnxruntime only")
    parser.add_argument("--atol", type=float, default=1e-5,
                        help="times max(1, rms of the output)")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--tp-compile", default=find_tool("tp-compile"))
    parser.add_argument("--tp-run", default=find_tool("tp-run"))
    parser.add_argument("--zoo-python", default=None)
    parser.add_argument("--lock", metavar="FILE",
                        help="run the tools under `flock -s FILE` (the "
                        "lock their rebuild takes)")
    parser.add_argument("--verbose", action="store_true",
                        help="print run_zoo.py's lines")
    args = parser.parse_args()
    args.ranks = [int(r) for r in args.ranks.split(",")]
    args.zoo_python = args.zoo_python or find_zoo_python()
    if args.replay or args.replay_dir:
        return main_replay(args)

    seed = args.seed
    if seed is None and os.environ.get("ARCHGEN_SEED"):
        seed = int(os.environ["ARCHGEN_SEED"])  # to rerun a CI sample
    if seed is None:
        seed = int(time.time()) % 1000000
    fixed = space.parse_overrides(args.features)
    runs = configs(args.ranks, not args.no_sp)
    print(f"archgen: seed {seed}, {args.count} samples, "
          f"{' '.join(runs)}, at the export opset and one converted"
          + (f", pinned {' '.join(args.features)}" if fixed else ""))
    sys.stdout.flush()
    known = load_known(args.expected_failures)
    failed, skipped, xfailed = [], [], []
    for i in range(args.count):
        s = seed + i
        f = space.sample(s, fixed)
        if args.list:
            print(f"sample {s}: {f.describe()}")
            continue
        start = time.time()
        keep = os.path.join(args.keep, str(s)) if args.keep else None
        opsets = [f.opset, f.converted_opset]
        try:
            failures = run_sample(args, f, s, runs, opsets, keep,
                                  plan_only=args.plan_only)
        except Invalid as e:
            report(s, f, [], time.time() - start, invalid=str(e))
            skipped.append(s)
            continue
        if report(s, f, failures, time.time() - start, known=known):
            xfailed.append(s)
            continue
        if not failures:
            continue
        failed.append(s)
        if args.no_save:
            continue
        path = save_regression(args.save_regressions, s, f, failures, runs,
                               opsets)
        print(f"  saved {os.path.relpath(path)}; replay: "
              f"{os.path.relpath(__file__)} --replay {os.path.relpath(path)}")
        with open(path) as saved:  # for a CI log, where the file is gone
            print("  " + json.dumps(json.load(saved)["features"],
                                    separators=(",", ":")))
        if args.minimize:
            small = minimize(args, f, s, failures, opsets, args.minimize_on)
            if small != f:
                label = failures[0][0].split(" ")[-1]
                got = run_sample(args, small, s, [label],
                                 [small.opset, small.converted_opset])
                path = save_regression(
                    args.save_regressions, s, small, got or failures,
                    [label], [small.opset, small.converted_opset],
                    note=f"minimized from sample {s}", name=f"{s}-min")
                print(f"  minimized: {small.describe()}")
                print(f"  saved {os.path.relpath(path)}")
        sys.stdout.flush()
    if args.list:
        return 0
    passed = args.count - len(failed) - len(skipped) - len(xfailed)
    print(f"archgen: {passed} passed, {len(failed)} failed, "
          f"{len(xfailed)} known failures, {len(skipped)} skipped "
          f"(invalid export) (seed {seed}, count {args.count})"
          + (f"; failing seeds {' '.join(map(str, failed))}"
             if failed else ""))
    return 1 if failed else 0


def main_replay(args):
    args.replaying = True
    paths = list(args.replay or [])
    if args.replay_dir:
        paths += sorted(os.path.join(args.replay_dir, n)
                        for n in os.listdir(args.replay_dir)
                        if n.endswith(".json"))
    known = load_known(args.expected_failures)
    expected = {name for name, _, _ in known}
    listed = os.path.basename(args.expected_failures or "")
    if args.replay_dir:
        missing = expected - {os.path.basename(p) for p in paths}
        if missing:
            print(f"archgen: {listed} lists {', '.join(sorted(missing))}, "
                  f"not in {args.replay_dir}")
            return 1
    part, parts = (int(x) for x in args.sample.split("/"))
    paths = [p for i, p in enumerate(paths) if i % parts == part]
    bad = 0
    for path in paths:
        name = os.path.basename(path)
        f, seed, failures, invalid, elapsed = replay(args, path,
                                                     args.all_configs)
        report(seed, f, failures, elapsed, invalid)
        if invalid:
            bad += 1
        elif name in expected and not failures:
            print(f"  {name} passes now: take it out of {listed}")
            bad += 1
        elif name in expected:
            print(f"  {name}: fails, as {listed} expects")
        elif failures:
            bad += 1
        if failures and args.minimize:
            small = minimize(args, f, seed, failures, [f.opset],
                             args.minimize_on)
            print(f"  minimized: {small.describe()}")
            print("  features: " + " ".join(
                f"{k}={v}" for k, v in small.to_dict().items()
                if v != getattr(space.Features(), k)))
    print(f"archgen: replayed {len(paths)}, {bad} unexpected")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
