#!/usr/bin/env python3
"""How a command's peak memory grows with the size of the model it is given:
runs COMMAND once with {} replaced by SMALL and once by LARGE, and prints
each run's peak resident set (the largest of the command and the programs
it starts: getrusage's RUSAGE_CHILDREN in a fresh process per run) beside
the size of the model file.

    peak_memory.py SMALL.pt LARGE.pt [--max-growth 0.25] -- tp-compile {} ...

PASS when the peak grows by less than --max-growth times the growth of the
file (a command that holds the weights in memory grows by about 1x).
"""
import argparse
import os
import subprocess
import sys

PROBE = ("import resource,subprocess,sys;"
         "rc=subprocess.call(sys.argv[1:],stdout=subprocess.DEVNULL);"
         "print(rc,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")


def peak_mib(command, model):
    argv = [model if part == "{}" else part for part in command]
    out = subprocess.check_output([sys.executable, "-c", PROBE] + argv,
                                  text=True)
    rc, kib = out.split()
    if int(rc) != 0:
        sys.exit(f"FAIL: {' '.join(argv)} exited with {rc}")
    return int(kib) / 1024.0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("small")
    parser.add_argument("large")
    parser.add_argument("--max-growth", type=float, default=0.25)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if "{}" not in command:
        sys.exit("the command needs {} where the model goes")

    sizes, peaks = [], []
    for label, model in (("small", args.small), ("large", args.large)):
        sizes.append(os.path.getsize(model) / 2**20)
        peaks.append(peak_mib(command, model))
        print(f"{label}: model {sizes[-1]:.1f} MiB, peak resident "
              f"{peaks[-1]:.1f} MiB")
    growth = (peaks[1] - peaks[0]) / (sizes[1] - sizes[0])
    print(f"peak grew {peaks[1] - peaks[0]:.1f} MiB for "
          f"{sizes[1] - sizes[0]:.1f} MiB more model ({growth:.2f}x)")
    print("PASS" if growth < args.max_growth else
          f"FAIL: more than {args.max_growth}x")


if __name__ == "__main__":
    main()
