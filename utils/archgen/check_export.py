"""Convert an archgen export to other opsets (run_zoo.py's convert) and
check each file with onnxruntime before the compiler sees it:
torch.onnx.export (1.13) writes a wrong graph for some constructs, and a
sample whose ONNX file disagrees with torch says nothing about tp-compile.

    check_export.py ZOO_DIR ATOL [OPSET ...]

writes ZOO_DIR/opset<N>.onnx for each OPSET. Runs in the python that runs
run_zoo.py (onnx, numpy; onnxruntime if installed). Prints one line: 'ok
<max abs diff>', 'not checked (no onnxruntime)', or 'invalid <why>' (exit
status 1).
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "reference-run"))
import run_zoo  # noqa: E402


def main():
    # Loose: this looks for a wrong graph, not for rounding (a wrong
    # export is off by far more; the compiler is held to 4x the
    # difference found here).
    zoo, atol = sys.argv[1], float(sys.argv[2])
    folder = os.path.join(zoo, "arch")
    paths = [os.path.join(folder, "model.onnx")]
    for opset in sys.argv[3:]:
        try:
            paths.append(run_zoo.convert(paths[0], int(opset), zoo))
        except Exception as e:  # onnx's version_converter gives up
            print(f"invalid version_converter to {opset}: "
                  + str(e).replace("\n", " ")[:300])
            return 1
    try:
        import onnxruntime
    except ImportError:
        print("not checked (no onnxruntime)")
        return 0
    with open(os.path.join(zoo, "zoo.json")) as f:
        entry = json.load(f)["arch"]
    feeds = {n: np.load(os.path.join(folder, n + ".npy"))
             for n in entry["inputs"]}
    worst = 0.0
    for path in paths:
        what = os.path.basename(path)
        try:
            session = onnxruntime.InferenceSession(
                path, providers=["CPUExecutionProvider"])
            outs = session.run(list(entry["outputs"]), feeds)
        except Exception as e:  # onnxruntime rejects the graph itself
            print(f"invalid onnxruntime on {what}: "
                  + str(e).replace("\n", " ")[:300])
            return 1
        for name, out in zip(entry["outputs"], outs):
            ref = np.load(os.path.join(folder, name + ".npy"))
            if out.shape != ref.shape:
                print(f"invalid onnxruntime's {name} on {what} is "
                      f"{list(out.shape)}, torch's {list(ref.shape)}")
                return 1
            diff = float(np.max(np.abs(out.astype(np.float64) - ref)))
            worst = max(worst, diff)
            if not np.allclose(out, ref, atol=10 * atol, rtol=1e-4):
                print(f"invalid onnxruntime's {name} on {what} differs "
                      f"from torch's by {diff:.2g}")
                return 1
    print(f"ok {worst:.2g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
