"""Edits a tp-compile artifact as a faulty writer or a hostile party would,
then rewrites SHA256SUMS (and the manifest's rank checksums) to match the
files, so that the runtime's schema and cross-checks, not the checksums,
are what must catch the edit.

  tamper_artifact.py DIR [--edit 'STATEMENT' ...] [--swap-rank-files A B]
                         [--header-replace RANK OLD NEW] [--keep-sums]

--edit runs a Python statement with `m` bound to manifest.json's object.
--swap-rank-files exchanges two rank files' contents (and their checksums
in the manifest). --header-replace replaces bytes inside rank RANK's
safetensors header (same length). --keep-sums leaves SHA256SUMS as it was.
"""
import argparse
import hashlib
import json
import os


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--edit", action="append", default=[])
    parser.add_argument("--swap-rank-files", nargs=2, type=int)
    parser.add_argument("--header-replace", nargs=3)
    parser.add_argument("--keep-sums", action="store_true")
    args = parser.parse_args()
    manifest_path = os.path.join(args.dir, "manifest.json")
    with open(manifest_path) as f:
        m = json.load(f)
    if args.swap_rank_files:
        a, b = (m["ranks"][r] for r in args.swap_rank_files)
        pa, pb = (os.path.join(args.dir, r["file"]) for r in (a, b))
        tmp = pa + ".swap"
        os.rename(pa, tmp)
        os.rename(pb, pa)
        os.rename(tmp, pb)
        a["sha256"], b["sha256"] = b["sha256"], a["sha256"]
        a["bytes"], b["bytes"] = b["bytes"], a["bytes"]
    if args.header_replace:
        rank, old, new = args.header_replace
        assert len(old) == len(new)
        entry = m["ranks"][int(rank)]
        path = os.path.join(args.dir, entry["file"])
        with open(path, "rb") as f:
            data = f.read()
        n = int.from_bytes(data[:8], "little")
        header = data[8:8 + n].decode()
        assert old in header, old
        data = data[:8] + header.replace(old, new, 1).encode() + data[8 + n:]
        with open(path, "wb") as f:
            f.write(data)
        entry["sha256"] = sha256(path)
    for statement in args.edit:
        exec(statement, {"m": m})
    with open(manifest_path, "w") as f:
        json.dump(m, f, indent=2)
    if args.keep_sums:
        return
    names = sorted(n for n in os.listdir(args.dir)
                   if n != "SHA256SUMS" and os.path.isfile(os.path.join(args.dir, n)))
    with open(os.path.join(args.dir, "SHA256SUMS"), "w") as f:
        for name in names:
            f.write(f"{sha256(os.path.join(args.dir, name))}  {name}\n")


if __name__ == "__main__":
    main()
