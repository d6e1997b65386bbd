#!/usr/bin/env bash
# Checks that every tracked C++ source and header is as clang-format
# (.clang-format, LLVM style) writes it; lists the files that are not and
# exits non-zero. `make format-check` runs it, and so does .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
mapfile -t files < <(git ls-files '*.cpp' '*.h' | grep -v '^test/')
bad=()
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run --Werror "$f" > /dev/null 2>&1; then
    bad+=("$f")
  fi
done
if [ ${#bad[@]} -ne 0 ]; then
  echo "check-format: ${#bad[@]} of ${#files[@]} files differ from" \
    "$("$CLANG_FORMAT" --version | head -1) (run: $CLANG_FORMAT -i FILE):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files clean"
