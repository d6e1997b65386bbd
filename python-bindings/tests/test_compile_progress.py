"""tp_mlir.compile's progress callback, and interrupting a compile: by an
exception from the callback, and by Ctrl-C (SIGINT) in a separate Python
process. An interrupted compile raises that exception and leaves no
artifact at `output` (an artifact already there stays as it was).

Run with the module on the path: PYTHONPATH=build/python pytest
python-bindings/tests (lit's Python/api.test does this).
"""
import os
import subprocess
import sys
import textwrap

import pytest

import tp_mlir as tp

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
GPT2 = os.path.join(ROOT, "test", "models", "gpt2", "model.onnx")
SHAPES = {"input_ids": [2, 16]}


def test_progress_counts_the_weights(tmp_path):
    calls = []
    tp.compile(GPT2, 2, target="none", input_shapes=SHAPES,
               output=tmp_path / "g.tpa",
               progress=lambda done, total: calls.append((done, total)))
    assert calls, "progress was never called"
    totals = {total for _, total in calls}
    assert len(totals) == 1 and totals.pop() > 0
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == calls[-1][1]


class Stop(Exception):
    pass


def test_exception_in_progress_stops_the_compile(tmp_path):
    out = tmp_path / "g.tpa"

    def stop(done, total):
        raise Stop(f"at {done} of {total}")

    with pytest.raises(Stop, match="at [0-9]+ of [0-9]+"):
        tp.compile(GPT2, 2, target="none", input_shapes=SHAPES, output=out,
                   progress=stop)
    assert not out.exists()
    assert not any(tmp_path.iterdir()), "the half-built artifact stayed"


def test_interrupt_keeps_an_existing_artifact(tmp_path):
    out = tmp_path / "g.tpa"
    tp.compile(GPT2, 2, target="none", input_shapes=SHAPES, output=out)
    manifest = (out / "manifest.json").read_bytes()

    def stop(done, total):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tp.compile(GPT2, 4, target="none", input_shapes=SHAPES, output=out,
                   progress=stop)
    assert (out / "manifest.json").read_bytes() == manifest


def test_ctrl_c_interrupts_the_compile(tmp_path):
    """SIGINT arrives while the compile runs (sent by the progress callback
    to its own process, as a terminal's Ctrl-C would): Python's handler
    raises KeyboardInterrupt at the compile's next check."""
    out = tmp_path / "g.tpa"
    script = textwrap.dedent(f"""
        import os, signal, tp_mlir as tp
        sent = []
        def progress(done, total):
            if not sent:
                sent.append(1)
                os.kill(os.getpid(), signal.SIGINT)
        try:
            tp.compile({GPT2!r}, 2, target="none",
                       input_shapes={SHAPES!r}, output={str(out)!r},
                       progress=progress)
            print("compiled")
        except KeyboardInterrupt:
            print("interrupted")
    """)
    result = subprocess.run([sys.executable, "-c", script],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ))
    assert result.stdout.strip() == "interrupted", result.stderr
    assert not out.exists()


def test_ctrl_c_stops_the_host_compiler(tmp_path):
    """Ctrl-C while the host C++ compiler builds the model's library (a
    large model's build takes minutes): the compiler is killed at once and
    the compile raises KeyboardInterrupt, leaving no artifact. The compiler
    here is a stand-in that would take a minute."""
    out = tmp_path / "g.tpa"
    started, finished = tmp_path / "started", tmp_path / "finished"
    compiler = tmp_path / "slow-c++"
    compiler.write_text(f"#!/bin/sh\ntouch {started}\nsleep 60\n"
                        f"touch {finished}\n")
    compiler.chmod(0o755)
    script = textwrap.dedent(f"""
        import os, signal, threading, time, tp_mlir as tp
        def press_ctrl_c():
            while not os.path.exists({str(started)!r}):
                time.sleep(0.05)
            os.kill(os.getpid(), signal.SIGINT)
        threading.Thread(target=press_ctrl_c, daemon=True).start()
        begin = time.time()
        try:
            tp.compile({GPT2!r}, 2, target="cpu",
                       input_shapes={SHAPES!r}, output={str(out)!r})
            print("compiled")
        except KeyboardInterrupt:
            print("interrupted after %.0f s" % (time.time() - begin))
    """)
    result = subprocess.run([sys.executable, "-c", script],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, CXX=str(compiler)))
    assert result.stdout.startswith("interrupted"), result.stderr
    seconds = int(result.stdout.split()[2])
    assert seconds < 30, result.stdout
    assert started.exists() and not finished.exists()
    assert not out.exists()
