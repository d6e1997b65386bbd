#!/usr/bin/env python3
"""Compile and run the model zoo (test/models/hf) and compare with torch.

For every model (all of zoo.json, or those named), every opset variant and
every config, the model is compiled with `tp-compile --target cpu --explain`,
run with `tp-run` (thread ranks) on the inputs stored beside it, and each
output is compared with torch's output stored by generate.py:
|out - ref| <= atol + rtol * |ref| (atol = rtol = 1e-5 by default: the
measured errors of every zoo model, split or not, are at most 3e-6 with
activations of O(1), so 1e-5 leaves room for a different BLAS summation
order and no room for a wrong split, which shows at O(1e-2) or more).

    run_zoo.py [name ...] [--opset native --opset 18 --opset 21
               --opset torchscript]
               [--config tp=1 --config tp=2 --config tp=4 --config tp=2,sp]
               [--converted-config CONFIG ...] [--zoo DIR]
               [--reference stored|onnxruntime] [--tp-compile P] [--tp-run P]

--zoo reads another folder laid out like test/models/hf (a zoo.json and one
folder per model), e.g. the one test/models/hf/export_minilm.py or
utils/hf-sweep/export.py writes; an entry's own "atol"/"rtol" replace the
defaults for that model (each says why where it is written).
--reference onnxruntime compares with onnxruntime run on the same model
file and inputs instead of the outputs stored beside it.

`--opset torchscript` compiles the model.pt beside the export instead (a
torch.jit.trace of the same module, e.g. utils/hf-sweep/export.py
--torchscript), with --config's configs.
Opset variants other than `native` are made with onnx.version_converter
(ReduceMean, Split, Squeeze and friends take axes as inputs from 18 on) and
run the --converted-config configs (by default the same as --config).
One line per run:

    gpt2 opset17 tp=2: logits max abs diff 1.9e-06 ok | all_reduce 5; \
split logits | weights per device 51.2%

then a closing 'N passed, N failed' line; exit status 1 if any failed.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ZOO = os.path.join(HERE, "..", "..", "test", "models", "hf")


def parse_config(text):
    config = {"tp": 1, "pp": 1, "sp": False}
    for part in filter(None, text.split(",")):
        if part == "sp":
            config["sp"] = True
            continue
        key, _, value = part.partition("=")
        if key not in ("tp", "pp") or not value.isdigit():
            sys.exit(f"bad config part '{part}' in '{text}'")
        config[key] = int(value)
    return config


def convert(model_path, opset, work):
    import onnx
    from onnx import version_converter
    model = onnx.load(model_path)
    converted = version_converter.convert_version(model, opset)
    path = os.path.join(work, f"opset{opset}.onnx")
    onnx.save(converted, path)
    return path


def parse_explain(text):
    """Collective counts and the weight fraction from tp-compile --explain."""
    collectives = {}
    m = re.search(r"^collectives: (.*?);", text, re.M)
    if m:
        for count, kind in re.findall(r"(\d+) (\w+)", m.group(1)):
            collectives[kind] = int(count)
    m = re.search(r"per device: weights (\d+) B \(whole model (\d+) B\)", text)
    fraction = int(m.group(1)) / int(m.group(2)) if m else 1.0
    # Outputs each rank returns its block of (tp-split-outputs), in place of
    # their gather.
    m = re.search(r"^split outputs .*?:\n((?:  .*\n)+)", text, re.M)
    split = re.findall(r"^  ([^:]+):", m.group(1), re.M) if m else []
    return collectives, fraction, split


def references(args, name, entry, model_path):
    """Each output's reference: stored beside the model, or onnxruntime's."""
    folder = os.path.join(args.zoo, name)
    if args.reference == "stored":
        return {o: np.load(os.path.join(folder, o + ".npy"))
                for o in entry["outputs"]}
    import onnxruntime
    session = onnxruntime.InferenceSession(
        model_path, providers=["CPUExecutionProvider"])
    feeds = {n: np.load(os.path.join(folder, n + ".npy"))
             for n in entry["inputs"]}
    outs = session.run(list(entry["outputs"]), feeds)
    return dict(zip(entry["outputs"], outs))


def run_one(args, name, entry, model_path, label, text, work):
    config = parse_config(text)
    artifact = os.path.join(work, f"{label}-{text.replace(',', '_')}.tpa")
    cmd = [args.tp_compile, model_path, "--target", "cpu", "--explain",
           "-o", artifact, "--devices", str(config["tp"]),
           "--pp", str(config["pp"])]
    if config["sp"]:
        cmd.append("--sequence-parallel")
    folder = os.path.join(args.zoo, name)
    for input_name, shape in entry["inputs"].items():
        spec = f"{input_name}={'x'.join(map(str, shape))}"
        if label == "torchscript":  # a trace does not say its input types
            dtype = np.load(os.path.join(folder, input_name + ".npy")).dtype
            spec += ":" + {"int64": "i64", "int32": "i32", "float32": "f32",
                           "bool": "i1"}[str(dtype)]
        cmd += ["--input-shape", spec]
    head = f"{name} {label} {text}:"
    compiled = subprocess.run(cmd, capture_output=True, text=True)
    if compiled.returncode != 0:
        errors = [l for l in compiled.stderr.splitlines() if "error" in l]
        print(f"{head} FAIL (tp-compile exit {compiled.returncode}: "
              f"{(errors or compiled.stderr.splitlines() or [''])[0][:300]})")
        return False
    collectives, fraction, split = parse_explain(compiled.stdout +
                                                 compiled.stderr)
    out_dir = os.path.join(work, "out")
    os.makedirs(out_dir, exist_ok=True)
    run = [args.tp_run, artifact, "--output-dir", out_dir, "--quiet"]
    for input_name in entry["inputs"]:
        run += ["--input",
                f"{input_name}={os.path.join(folder, input_name + '.npy')}"]
    ran = subprocess.run(run, capture_output=True, text=True)
    if ran.returncode != 0:
        print(f"{head} FAIL (tp-run exit {ran.returncode}: "
              f"{ran.stderr.strip()[:300]})")
        return False
    ok = True
    parts = []
    refs = references(args, name, entry, model_path)
    for index, output in enumerate(entry["outputs"]):
        ref = refs[output]
        # A TorchScript module's outputs are named by position.
        produced = output if label != "torchscript" else (
            "output" if len(entry["outputs"]) == 1 else f"output_{index}")
        out = np.load(os.path.join(out_dir, produced + ".npy"))
        good = out.shape == ref.shape and np.allclose(
            out, ref, atol=entry.get("atol", args.atol),
            rtol=entry.get("rtol", args.rtol))
        diff = (float(np.max(np.abs(out.astype(np.float64) - ref)))
                if out.shape == ref.shape else float("inf"))
        parts.append(f"{output} max abs diff {diff:.2g} "
                     f"{'ok' if good else 'FAIL'}")
        ok &= good
    counts = ", ".join(f"{k} {v}" for k, v in sorted(collectives.items()))
    if split:
        counts = "; ".join(filter(None, [counts, "split " + ", ".join(split)]))
    print(f"{head} {'; '.join(parts)} | {counts or 'no collectives'} | "
          f"weights per device {100 * fraction:.1f}%")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--opset", action="append")
    parser.add_argument("--config", action="append")
    parser.add_argument("--converted-config", action="append")
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--zoo", default=DEFAULT_ZOO)
    parser.add_argument("--reference", choices=["stored", "onnxruntime"],
                        default="stored")
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    args = parser.parse_args()
    with open(os.path.join(args.zoo, "zoo.json")) as f:
        zoo = {k: v for k, v in json.load(f).items() if isinstance(v, dict)}
    names = args.names or list(zoo)
    for name in names:
        if name not in zoo:
            sys.exit(f"'{name}' is not in the zoo ({', '.join(zoo)})")
    opsets = args.opset or ["native", "18", "21"]
    configs = args.config or ["tp=1", "tp=2", "tp=4", "tp=2,sp"]
    converted_configs = args.converted_config or configs
    passed = failed = 0
    for name in names:
        entry = zoo[name]
        model = os.path.join(args.zoo, name, "model.onnx")
        with tempfile.TemporaryDirectory() as work:
            for opset in opsets:
                if opset == "native":
                    path, label, runs = model, f"opset{entry['opset']}", configs
                elif opset == "torchscript":
                    path = os.path.join(args.zoo, name, "model.pt")
                    label, runs = "torchscript", configs
                    if not os.path.exists(path):
                        print(f"{name} torchscript: SKIP (no model.pt)")
                        continue
                else:
                    path = convert(model, int(opset), work)
                    label, runs = f"opset{opset}", converted_configs
                for text in runs:
                    if run_one(args, name, entry, path, label, text, work):
                        passed += 1
                    else:
                        failed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
