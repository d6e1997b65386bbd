"""The SHA-256 of an artifact's files: LLVM's portable implementation
(llvm::SHA256, which tp-compile and tp-run used until 2026-12-04) against
tp::rt::Sha256 (include/tp/Runtime/Sha256.h, OpenSSL's libcrypto, which
uses the CPU's SHA extensions), side by side in one process on one buffer
the size of a rank file.

Every load of an artifact hashes each rank file before it runs
(tp::rt::loadRankWeights), and tp-compile hashes them as it writes them,
so this rate bounds how fast a large model loads: a 7 GB rank file of a
bf16 7B model split over two ranks is hashed in 7000 / rate seconds.

bench/sha256.cpp is built against this checkout's lib/Runtime/Sha256.cpp,
LLVM 22 and libcrypto. Each round hashes --megabytes with each; the table
gives every round and the median ratio, and whether the digests agree. It
asserts nothing.

Usage:
  python3 bench/sha256.py                 # 256 MB, 5 rounds
  python3 bench/sha256.py --megabytes 1024 --rounds 3
"""

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build(folder):
    llvm_config = "llvm-config-22"
    flags = subprocess.run([llvm_config, "--cxxflags"], check=True,
                           capture_output=True, text=True).stdout.split()
    libdir = subprocess.run([llvm_config, "--libdir"], check=True,
                            capture_output=True, text=True).stdout.strip()
    binary = os.path.join(folder, "sha256")
    cxx = os.environ.get("CXX", "c++")
    subprocess.run([cxx, "-O2"] + flags + ["-fexceptions",
        "-I", os.path.join(REPO, "include"),
        os.path.join(REPO, "bench", "sha256.cpp"),
        os.path.join(REPO, "lib", "Runtime", "Sha256.cpp"),
        "-o", binary, "-L" + libdir, "-Wl,-rpath," + libdir, "-lLLVM",
        "-lcrypto"], check=True)
    return binary


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--megabytes", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="tp-sha256-") as folder:
        binary = build(folder)
        out = subprocess.run([binary, str(a.megabytes), str(a.rounds)],
                             check=True, capture_output=True, text=True).stdout
    rows = [line.split() for line in out.splitlines()]
    cpu = platform.processor() or platform.machine()
    with open("/proc/cpuinfo") as f:
        sha_ni = " sha_ni" in f.read()
    print(f"# sha256.py, {cpu}, SHA extensions: {'yes' if sha_ni else 'no'}; "
          f"{a.megabytes} MB per round")
    print(f"{'round':>5} {'LLVM MB/s':>10} {'OpenSSL MB/s':>13} {'ratio':>6}  digests")
    ratios = []
    for i, (llvm_rate, ssl_rate, same) in enumerate(rows):
        ratio = float(ssl_rate) / float(llvm_rate)
        ratios.append(ratio)
        print(f"{i + 1:>5} {float(llvm_rate):>10.1f} {float(ssl_rate):>13.1f} "
              f"{ratio:>5.2f}x  {'equal' if same == '1' else 'DIFFER'}")
    llvm_rate = statistics.median(float(r[0]) for r in rows)
    ssl_rate = statistics.median(float(r[1]) for r in rows)
    print(f"median: LLVM {llvm_rate:.1f} MB/s, OpenSSL {ssl_rate:.1f} MB/s, "
          f"ratio {statistics.median(ratios):.2f}x; a 7,000 MB rank file is "
          f"hashed in {7000 / llvm_rate:.1f} s with LLVM's, "
          f"{7000 / ssl_rate:.1f} s with OpenSSL's")
    return 0 if all(r[2] == "1" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
