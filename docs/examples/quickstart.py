"""tp_mlir quick start: split the bundled GPT-2-style model over 2 ranks,
run it, compare with the unsplit model's stored output, save its weights.

    python3 docs/examples/quickstart.py        (after make demo or make python)
"""
import os
import tempfile

import numpy as np

import tp_mlir as tp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "test", "models", "gpt2")

work = tempfile.mkdtemp(prefix="tp_mlir-quickstart-")
# 2 tensor-parallel ranks; the model's batch and sequence dims are dynamic,
# so their sizes are given (as tp-compile --input-shape does).
artifact = tp.compile(os.path.join(MODEL, "model.onnx"), 2,
                      input_shapes={"input_ids": [2, 16]},
                      output=os.path.join(work, "gpt2.tpa"))

session = tp.Session(artifact)  # verifies the artifact, loads the weights once
print("inputs:", session.inputs, "outputs:", session.outputs)
ids = np.load(os.path.join(MODEL, "input_ids.npy"))
logits = session.run({"input_ids": ids})["logits"]
session.run({"input_ids": ids}, warmup=1, repeat=5)
print(f"logits {logits.shape}, {session.seconds_per_run * 1e3:.2f} ms per run "
      f"on {session.ranks} ranks")

reference = np.load(os.path.join(MODEL, "logits.npy"))
print("max abs difference from the unsplit model:",
      float(np.abs(logits - reference).max()))
assert np.allclose(logits, reference, atol=1e-5, rtol=1e-5)

# Bad input is an exception naming the input, never a crash.
try:
    session.run({"input_ids": ids[:, :8]})
except tp.TPError as error:
    print("refused:", error)

artifact.export_weights(os.path.join(work, "weights.safetensors"))
print("artifact and weights in", work)
