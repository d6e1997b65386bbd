"""Checks that tp-compile's --help (argv[1]) and --help-hidden (argv[2])
list every option of the table its flags are made from, as tp_mlir's
compile_options() returns it: each flag with its help text (a hidden one
under --help-hidden only), the positional model in the usage line. Prints
what it checked; exits 1 naming each option missing."""
import re
import sys

from tp_mlir import _tp_mlir


def listed(text, option):
    flag = option["flag"]
    dashes = "-" if len(flag) == 1 else "--"
    line = (rf"^\s+{dashes}{re.escape(flag)}[=\s].* - "
            rf"{re.escape(option['help'])}$")
    return re.search(line, text, re.MULTILINE) is not None


def main():
    with open(sys.argv[1]) as f:
        shown = f.read()
    with open(sys.argv[2]) as f:
        hidden = f.read()
    missing, counts = [], {"flags": 0, "hidden": 0, "positional": 0}
    for option in _tp_mlir.compile_options():
        if option["kind"] == "positional":
            counts["positional"] += 1
            if not re.search(rf"^USAGE: .* {re.escape(option['help'])}$",
                             shown, re.MULTILINE):
                missing.append(f"{option['keyword']}: not in the usage line")
        elif option["kind"] == "hidden":
            counts["hidden"] += 1
            if not listed(hidden, option) or listed(shown, option):
                missing.append(f"--{option['flag']}: not under "
                               "--help-hidden alone")
        else:
            counts["flags"] += 1
            if not listed(shown, option):
                missing.append(f"--{option['flag']}: not in --help")
    for line in missing:
        print("missing:", line)
    print(", ".join(f"{n} {kind}" for kind, n in counts.items()),
          "checked")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
