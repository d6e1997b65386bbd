#!/usr/bin/env python3
"""Check that a model's TorchScript version gets the plan of its ONNX
export: compile both with tp-compile --explain (--target none: no code) and
compare the collectives each forward pass runs.

    same_plan.py test/models/hf/gpt2 --devices 2 \\
        --input-shape input_ids=2x12 --input-shape attention_mask=2x12:i64

The ONNX model takes the same shapes without the element types (it declares
them). Prints "same plan <name>: <collectives>" or "DIFFERENT ..." per model
folder given.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def collectives(tp_compile, model, shapes, devices, work):
    cmd = [tp_compile, model, "--devices", str(devices), "--explain", "-o",
           os.path.join(work, os.path.basename(model) + ".tpa")]
    for shape in shapes:
        cmd += ["--input-shape", shape]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    match = re.search(r"^collectives: (.*)$", out, re.M)
    return match.group(1) if match else "none"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dirs", nargs="+")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--input-shape", action="append", default=[])
    parser.add_argument("--tp-compile", default="tp-compile")
    args = parser.parse_args()
    onnx_shapes = [s.split(":")[0] for s in args.input_shape]
    different = 0
    with tempfile.TemporaryDirectory() as work:
        for folder in args.model_dirs:
            name = os.path.basename(os.path.normpath(folder))
            ts = collectives(args.tp_compile, os.path.join(folder, "model.pt"),
                             args.input_shape, args.devices, work)
            ox = collectives(args.tp_compile,
                             os.path.join(folder, "model.onnx"), onnx_shapes,
                             args.devices, work)
            if ts == ox:
                print(f"same plan {name}: {ts}")
            else:
                different += 1
                print(f"DIFFERENT {name}: TorchScript {ts}; ONNX {ox}")
    return 1 if different else 0


if __name__ == "__main__":
    sys.exit(main())
