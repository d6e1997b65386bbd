#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora into fuzz/corpus/<target>/ (replacing
what is there): the ONNX text models the lit tests embed (split-file
sections named *.onnxtxt, up to 4 KB each), the same models as binary
protobuf where onnx parses them, .npy files of every dtype tp-run reads in
format versions 1 and 2, artifacts of a small model on several grids
(manifest.json, NUL, rank-0.safetensors; built with BUILD/bin/tp-compile,
and a generation artifact's manifest with its rank-0 header only;
BUILD from $TP_BUILD or build/) and fixed pseudo-random bytes for the
plan -> partition generator. Needs onnx and numpy (the pyenv python3)."""
import glob
import hashlib
import io
import os
import random
import re
import shutil
import subprocess
import tempfile

import numpy as np
import onnx
import onnx.parser

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
MAX_SEED = 4096


def reset(target):
    path = os.path.join(CORPUS, target)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def save(folder, name, data):
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def text_models():
    """(name, text) of every *.onnxtxt section in the lit tests."""
    for test in sorted(glob.glob(os.path.join(ROOT, "test", "**", "*.test"),
                                 recursive=True)):
        parts = re.split(r"^#--- (\S+)\n", open(test).read(), flags=re.M)
        stem = os.path.splitext(os.path.basename(test))[0]
        for name, body in zip(parts[1::2], parts[2::2]):
            if name.endswith(".onnxtxt") and len(body) <= MAX_SEED:
                yield f"{stem}-{name}", body


def onnx_seeds():
    text = reset("onnx-text-import-fuzzer")
    binary = reset("onnx-import-fuzzer")
    seen = set()
    for name, body in text_models():
        digest = hashlib.sha1(body.encode()).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        save(text, name, body.encode())
        try:
            model = onnx.parser.parse_model(body)
        except Exception:  # a test of a syntax error: no binary form
            continue
        data = model.SerializeToString()
        if len(data) <= 2 * MAX_SEED:
            save(binary, os.path.splitext(name)[0] + ".onnx", data)


def npy_seeds():
    out = reset("npy-fuzzer")
    arrays = {
        "f32-2x3": np.arange(6, dtype=np.float32).reshape(2, 3),
        "f64-4": np.linspace(-1, 1, 4),
        "i64-ids": np.array([[1, 5, 7], [0, 2, 9]], dtype=np.int64),
        "i32-scalar": np.array(7, dtype=np.int32),
        "i16-empty": np.zeros((2, 0, 3), dtype=np.int16),
        "i8": np.array([-1, 0, 1], dtype=np.int8),
        "u8": np.array([0, 255], dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "f16": np.ones((2, 2), dtype=np.float16),
    }
    for name, array in arrays.items():
        for version in ((1, 0), (2, 0)):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, array, version=version)
            save(out, f"{name}-v{version[0]}.npy", buffer.getvalue())
    # Fortran order, a structured dtype: errors tp-run names.
    buffer = io.BytesIO()
    np.save(buffer, np.asfortranarray(np.ones((2, 3), np.float32)))
    save(out, "fortran.npy", buffer.getvalue())
    buffer = io.BytesIO()
    np.save(buffer, np.zeros(2, dtype=[("a", "<f4"), ("b", "<i8")]))
    save(out, "structured.npy", buffer.getvalue())


# Token ids through an embedding (the manifest's index_range), two
# projections (column- then row-split weights) and a residual add.
ARTIFACT_MODEL = """<ir_version: 8, opset_import: ["" : 17]>
g (int64[4, 6] ids) => (float[4, 6, 8] y)
<float[16, 8] emb = {%s}, float[8, 16] w1 = {%s}, float[16] b1 = {%s},
 float[16, 8] w2 = {%s}>
{
  h = Gather(emb, ids)
  u = MatMul(h, w1)
  v = Add(u, b1)
  r = Relu(v)
  o = MatMul(r, w2)
  y = Add(o, h)
}
"""


def artifact_seeds():
    out = reset("manifest-fuzzer")
    build = os.environ.get("TP_BUILD", os.path.join(ROOT, "build"))
    compiler = os.path.join(build, "bin", "tp-compile")
    rng = random.Random(7)
    values = lambda n: ", ".join(f"{rng.uniform(-1, 1):.3f}" for _ in range(n))
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "model.onnxtxt")
        with open(model, "w") as f:
            f.write(ARTIFACT_MODEL % (values(128), values(128), values(16),
                                      values(128)))
        for devices, pp, microbatches in ((1, 1, 1), (2, 1, 1), (4, 1, 1),
                                          (1, 2, 2), (2, 2, 2)):
            name = f"tp{devices}-pp{pp}-mb{microbatches}"
            artifact = os.path.join(tmp, name + ".tpa")
            subprocess.run([compiler, model, f"--devices={devices}",
                            f"--pp={pp}", f"--microbatches={microbatches}",
                            "--target=none", "-o", artifact],
                           check=True, stderr=subprocess.DEVNULL)
            with open(os.path.join(artifact, "manifest.json"), "rb") as f:
                manifest = f.read()
            with open(os.path.join(artifact, "rank-0.safetensors"), "rb") as f:
                weights = f.read()
            save(out, name, manifest + b"\0" + weights)
        # A generation artifact (KV caches, a prefill program) of the
        # with-past GPT-2: its manifest, and rank 0's safetensors header
        # (the weights themselves would make a 1 MB seed).
        artifact = os.path.join(tmp, "gpt2-generation.tpa")
        subprocess.run([compiler, os.path.join(ROOT, "test", "models", "hf",
                                               "with-past", "gpt2",
                                               "model.onnx"),
                        "--devices=2", "--max-seq=8", "--max-batch=2",
                        "--prefill-len=4", "--target=none", "-o", artifact],
                       check=True, stderr=subprocess.DEVNULL)
        with open(os.path.join(artifact, "manifest.json"), "rb") as f:
            manifest = f.read()
        with open(os.path.join(artifact, "rank-0.safetensors"), "rb") as f:
            header = f.read(8)
            header += f.read(int.from_bytes(header, "little"))
        save(out, "tp2-generation", manifest + b"\0" + header)


def plan_seeds():
    out = reset("plan-partition-fuzzer")
    rng = random.Random(13)
    for i in range(24):
        size = rng.choice([8, 16, 24, 32, 48, 64])
        save(out, f"random-{i:02}", bytes(rng.randrange(256)
                                          for _ in range(size)))


if __name__ == "__main__":
    onnx_seeds()
    npy_seeds()
    artifact_seeds()
    plan_seeds()
    for target in sorted(os.listdir(CORPUS)):
        files = glob.glob(os.path.join(CORPUS, target, "*"))
        print(f"{target}: {len(files)} seeds, "
              f"{sum(os.path.getsize(f) for f in files)} bytes")
