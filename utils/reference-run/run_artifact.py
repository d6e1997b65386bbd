#!/usr/bin/env python3
"""Compile a bundled test model with tp-compile --target cpu, run it with
tp-run, and compare every output with the reference stored beside the model.

    run_artifact.py test/models/gpt2 --input-shape input_ids=2x16 \
        --config tp=2 --config tp=2,sp --config pp=2 --config tp=2,pp=2 \
        --launcher threads --launcher mpi

--model picks the file in the model folder (model.onnx by default; model.pt
for the TorchScript version), and --rename artifact=reference maps an
input or output name of the artifact to the name of its .npy (a TorchScript
module's inputs are named as forward()'s arguments and its outputs
output, or output_<i>).

A config is a comma-separated list of tp=N, pp=P, mb=M (micro-batches per
pipeline step), sp (sequence parallel).
Inputs are read from <model dir>/<input name>.npy and references from
<model dir>/<output name>.npy (written by test/models/generate.py with torch).
A run passes when |out - ref| <= atol + rtol * |ref| everywhere.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np


def parse_config(text):
    config = {"tp": 1, "pp": 1, "mb": 1, "sp": False}
    for part in filter(None, text.split(",")):
        if part == "sp":
            config["sp"] = True
        else:
            key, _, value = part.partition("=")
            if key not in ("tp", "pp", "mb") or not value.isdigit():
                sys.exit(f"bad config part '{part}' in '{text}'")
            config[key] = int(value)
    return config


def read_manifest(tp_run, artifact):
    """The artifact's manifest as the runtime reads it (checked against
    SHA256SUMS and the schema): tp-run --print-manifest, the one reader."""
    out = subprocess.run([tp_run, artifact, "--print-manifest"], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out)


def mpirun_prefix(ranks):
    prefix = ["mpirun", "--oversubscribe", "-np", str(ranks)]
    if os.geteuid() == 0:
        prefix.insert(1, "--allow-run-as-root")
    return prefix


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--config", action="append", required=True)
    parser.add_argument("--launcher", action="append",
                        choices=["threads", "mpi"])
    parser.add_argument("--input-shape", action="append", default=[])
    parser.add_argument("--atol", type=float, default=1e-5)
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--dtype", help="tp-compile --dtype (bf16, f16)")
    parser.add_argument("--model", default="model.onnx")
    parser.add_argument("--rename", action="append", default=[],
                        help="artifact name=reference name")
    parser.add_argument("--tp-compile", default="tp-compile")
    parser.add_argument("--tp-run", default="tp-run")
    args = parser.parse_args()
    launchers = args.launcher or ["threads"]
    model = os.path.join(args.model_dir, args.model)
    renamed = dict(text.split("=", 1) for text in args.rename)

    def reference(name):
        return os.path.join(args.model_dir, renamed.get(name, name) + ".npy")

    name = os.path.basename(os.path.normpath(args.model_dir))

    failures = 0
    with tempfile.TemporaryDirectory() as work:
        for text in args.config:
            config = parse_config(text)
            artifact = os.path.join(work, text.replace(",", "_") + ".tpa")
            cmd = [args.tp_compile, model, "--target", "cpu", "-o", artifact,
                   "--devices", str(config["tp"]), "--pp", str(config["pp"]),
                   "--microbatches", str(config["mb"])]
            if config["sp"]:
                cmd.append("--sequence-parallel")
            if args.dtype:
                cmd += ["--dtype", args.dtype]
            for shape in args.input_shape:
                cmd += ["--input-shape", shape]
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
            manifest = read_manifest(args.tp_run, artifact)
            ranks = manifest["grid"]["ranks"]
            inputs = []
            for spec in manifest["inputs"]:
                inputs += ["--input", "%s=%s" % (spec["name"],
                                                 reference(spec["name"]))]
            for launcher in launchers:
                out_dir = os.path.join(work, "out")
                os.makedirs(out_dir, exist_ok=True)
                run = [args.tp_run, artifact, "--output-dir", out_dir,
                       "--quiet"] + inputs
                if launcher == "mpi":
                    run = mpirun_prefix(ranks) + run + ["--launcher", "mpi"]
                subprocess.run(run, check=True)
                for spec in manifest["outputs"]:
                    ref = np.load(reference(spec["name"]))
                    out = np.load(os.path.join(out_dir, spec["name"] + ".npy"))
                    diff = float(np.max(np.abs(out.astype(np.float64) - ref)))
                    ok = out.shape == ref.shape and np.allclose(
                        out, ref, atol=args.atol, rtol=args.rtol)
                    failures += not ok
                    print("%s [%s] %s x%d %s: max abs diff %.3g %s" % (
                        name, text, launcher, ranks, spec["name"], diff,
                        "ok" if ok else "FAIL"))
    if failures:
        print("FAIL %s: %d output(s) differ" % (name, failures))
        return 1
    print("PASS %s" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
