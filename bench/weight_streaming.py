"""Weight-streaming benchmark for tp-compile's artifact writer.

Builds (once, cached in bench/.cache/weight_streaming/) a two-layer MLP whose
float weights are 1.14 GB of REAL external data (random float32 written in
64 MiB chunks, not a sparse file), runs

  tp-compile model.onnx --devices N --input-shape x=1xH -o out.tpa

under /usr/bin/time -f %M, and reports peak RSS against the largest single
tensor. Target: peak RSS <= largest tensor + 256 MB (the writer streams each
initializer in 16 MiB chunks, so it should be far below). Reported, not
asserted. With --verify it also runs tp-export-weights and checks that the
exported bytes equal weights.bin (SHA-256, streamed).

Usage:
  python3 bench/weight_streaming.py                 # ~1.1 GB model, 2 devices
  python3 bench/weight_streaming.py --verify        # + export round trip
  python3 bench/weight_streaming.py --inner 4096    # small, quick
"""

import argparse
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHUNK = 64 << 20


def external(name, dims, offset):
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims,
                    data_location=TensorProto.EXTERNAL)
    n = 4 * dims[0] * dims[1]
    for key, value in (("location", "weights.bin"), ("offset", str(offset)),
                       ("length", str(n))):
        e = t.external_data.add()
        e.key, e.value = key, value
    return t, n


def build(folder, hidden, inner):
    model_path = os.path.join(folder, "model.onnx")
    data_path = os.path.join(folder, "weights.bin")
    w1, n1 = external("fc1.weight", [hidden, inner], 0)
    w2, n2 = external("fc2.weight", [inner, hidden], n1)
    if (os.path.exists(model_path) and os.path.exists(data_path)
            and os.path.getsize(data_path) == n1 + n2):
        return model_path, n1 + n2, max(n1, n2)
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    with open(data_path, "wb") as f:
        left = n1 + n2
        while left:
            n = min(CHUNK, left)
            f.write(rng.standard_normal(n // 4, dtype=np.float32).tobytes())
            left -= n
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "fc1.weight"], ["h"], name="fc1"),
         helper.make_node("Relu", ["h"], ["a"], name="act"),
         helper.make_node("MatMul", ["a", "fc2.weight"], ["y"], name="fc2")],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, hidden])],
        initializer=[w1, w2])
    model = helper.make_model(graph,
                              opset_imports=[helper.make_opsetid("", 17)])
    with open(model_path, "wb") as f:
        f.write(model.SerializeToString())
    return model_path, n1 + n2, max(n1, n2)


def timed(cmd):
    """Runs cmd under /usr/bin/time; returns (seconds, peak RSS bytes)."""
    with tempfile.NamedTemporaryFile("r") as rss:
        start = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss.name]
                              + cmd, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode:
            sys.exit(f"{cmd[0]} failed:\n{proc.stderr}")
        return seconds, int(rss.read().split()[-1]) * 1024


def sha256_file(path, begin=0, end=None):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(begin)
        left = (end if end is not None else os.path.getsize(path)) - begin
        while left:
            block = f.read(min(CHUNK, left))
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--inner", type=int, default=34816)
    p.add_argument("--devices", type=int, default=2)
    p.add_argument("--verify", action="store_true")
    p.add_argument("--keep", action="store_true",
                   help="keep the artifact (printed path)")
    args = p.parse_args()

    bin_dir = os.path.join(ROOT, "build", "bin")
    cache = os.path.join(ROOT, "bench", ".cache",
                         f"weight_streaming-{args.hidden}x{args.inner}")
    t0 = time.perf_counter()
    model, total, largest = build(cache, args.hidden, args.inner)
    print(f"model: {model}")
    print(f"external weights: {total / 1e9:.3f} GB, largest tensor "
          f"{largest / 1e6:.1f} MB (ready in {time.perf_counter() - t0:.1f} s)")

    work = tempfile.mkdtemp(prefix="tp-weight-streaming-",
                            dir=os.path.join(ROOT, "bench", ".cache"))
    try:
        # Copy the binaries so that a concurrent rebuild cannot break a run.
        tools = {}
        for tool in ("tp-compile", "tp-export-weights", "tp-run"):
            tools[tool] = shutil.copy(os.path.join(bin_dir, tool), work)
        artifact = os.path.join(work, "model.tpa")
        seconds, rss = timed([tools["tp-compile"], model, "--devices",
                              str(args.devices), "--input-shape",
                              f"x=1x{args.hidden}", "-o", artifact])
        manifest = json.loads(subprocess.run(
            [tools["tp-run"], artifact, "--print-manifest"], check=True,
            stdout=subprocess.PIPE, text=True).stdout)
        written = sum(r["bytes"] for r in manifest["ranks"])
        target = largest + 256e6
        print(f"tp-compile --devices {args.devices}: {seconds:.2f} s, "
              f"wrote {written / 1e9:.3f} GB in {len(manifest['ranks'])} "
              f"rank files ({written / 1e6 / seconds:.0f} MB/s)")
        print(f"peak RSS: {rss / 1e6:.1f} MB; largest tensor "
              f"{largest / 1e6:.1f} MB; target <= {target / 1e6:.1f} MB: "
              f"{'met' if rss <= target else 'NOT met'} "
              f"(RSS is {rss / largest:.2f}x the largest tensor)")
        if args.verify:
            full = os.path.join(work, "full.safetensors")
            seconds, rss = timed([tools["tp-export-weights"], artifact,
                                  "-o", full])
            with open(full, "rb") as f:
                (n,) = struct.unpack("<Q", f.read(8))
            same = sha256_file(full, 8 + n) == sha256_file(
                os.path.join(cache, "weights.bin"))
            print(f"tp-export-weights: {seconds:.2f} s, peak RSS "
                  f"{rss / 1e6:.1f} MB; bytes equal weights.bin: {same}")
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work)


if __name__ == "__main__":
    main()
