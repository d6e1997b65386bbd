"""Checks a tp-run --trace file (Chrome trace event format) against the
artifact it ran: one named track per rank; `--forwards` forward intervals on
each; on each forward, one interval per collective call of the rank's
generated code (model.cpp's context->allReduce/allGather/reduceScatter/
send/recv), in it, with its site and a byte count; and every rank making
the same collectives in the same order (they pair up by index). Under MPI
the runtime's own transfer of split outputs' blocks to rank 0 after the
passes (site "output gather") is not the generated code's: left out.

Usage: check_trace.py TRACE.json... --artifact DIR --forwards N
(several files: one per MPI process, merged)."""
import argparse
import json
import os
import re
import sys

CALLS = {"allReduce": "all-reduce", "allGather": "all-gather",
         "reduceScatter": "reduce-scatter", "send": "send", "recv": "recv"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--artifact", required=True)
    ap.add_argument("--forwards", type=int, required=True)
    a = ap.parse_args()
    names, intervals = {}, {}
    for path in a.traces:
        with open(path) as f:
            for e in json.load(f)["traceEvents"]:
                if e["ph"] == "M":
                    names[e["tid"]] = e["args"]["name"]
                elif e["ph"] == "X":
                    intervals.setdefault(e["tid"], []).append(e)
    with open(os.path.join(a.artifact, "manifest.json")) as f:
        ranks = len(json.load(f)["ranks"])
    with open(os.path.join(a.artifact, "model.cpp")) as f:
        source = f.read()
    # One rank program per stage; with tp only, every rank runs the same.
    per_forward = {}
    for call, name in CALLS.items():
        per_forward[name] = len(re.findall(r"context->" + call + r"\(", source))
    print("tracks:", " ".join(names[r] for r in sorted(names)))
    ok = sorted(names) == list(range(ranks))
    sequences = []
    for rank in sorted(intervals):
        evs = sorted(intervals[rank], key=lambda e: e["ts"])
        forwards = [e for e in evs if e["name"] == "forward"]
        calls = [e for e in evs if e["name"] != "forward" and
                 e["args"].get("site") != "output gather"]
        counts = {n: sum(e["name"] == n for e in calls) for n in CALLS.values()}
        inside = all(any(f["ts"] <= c["ts"] and
                         c["ts"] + c["dur"] <= f["ts"] + f["dur"] + 1e-3
                         for f in forwards) for c in calls)
        labelled = all(c["args"]["site"] and c["args"]["bytes"] > 0
                       for c in calls)
        expected = {n: a.forwards * k for n, k in per_forward.items()}
        good = (len(forwards) == a.forwards and counts == expected and inside
                and labelled)
        ok &= good
        print(f"rank {rank}: {len(forwards)} forwards, {len(calls)} "
              f"collectives {'as model.cpp makes them' if good else 'WRONG'}")
        if not good:
            print(f"  counts {counts}, expected {expected}, inside {inside}, "
                  f"labelled {labelled}", file=sys.stderr)
        sequences.append([(c["name"], c["args"]["site"]) for c in calls])
    same = all(s == sequences[0] for s in sequences)
    print("ranks pair up:", "yes" if same else "NO")
    print("PASS" if ok and same else "FAIL")


if __name__ == "__main__":
    main()
