#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/bin for SECONDS each, on a copy of
# its seeds (fuzz/corpus/<target>/), so that the repository is never
# written. Findings go to BUILD/fuzz/findings/; exits non-zero if any target
# found one.
#   usage: fuzz/run-fuzzers.sh BUILD [SECONDS] [TARGET...]
# Each target first replays its seeds once, which is deterministic and
# always fatal: the seeds include every past finding (regression-*). Then it
# fuzzes for SECONDS. A finding there is fatal unless FUZZ_STRICT=0, which
# CI sets: which inputs a run reaches depends on the machine's speed and on
# memory layout (a fixed seed does not make two builds explore alike), so
# a new finding is reported and kept but does not fail an unrelated change.
# FUZZ_SEED (default 1) is libFuzzer's seed; 0 draws a new one.
set -uo pipefail
build=${1:?usage: $0 BUILD [SECONDS] [TARGET...]}
seconds=${2:-60}
shift $(( $# < 2 ? $# : 2 ))
src=$(cd "$(dirname "$0")" && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] ||
  targets=(onnx-import-fuzzer onnx-text-import-fuzzer npy-fuzzer
           manifest-fuzzer plan-partition-fuzzer)

# Longest input each target gets: the seeds' size or a little more.
declare -A maxLen=([onnx-import-fuzzer]=8192 [onnx-text-import-fuzzer]=4096
                   [npy-fuzzer]=1024 [manifest-fuzzer]=16384
                   [plan-partition-fuzzer]=64)

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
symbolizer=$(command -v llvm-symbolizer-22 || echo /usr/lib/llvm-22/bin/llvm-symbolizer)
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$symbolizer}

work="$build/fuzz"
mkdir -p "$work/findings"
failed=()
found=()
for target in "${targets[@]}"; do
  corpus="$work/corpus/$target"
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp "$src/corpus/$target"/* "$corpus"/
  log="$work/$target.log"
  if ! "$build/bin/$target" -runs=0 -rss_limit_mb=2048 -timeout=25 \
      "$src/corpus/$target" > "$work/$target.replay.log" 2>&1; then
    echo "== $target: replaying its seeds FAILED; the log is $work/$target.replay.log:"
    grep -E 'ERROR|runtime error|finding|Running:' "$work/$target.replay.log" |
      tail -n 20 | sed 's/^/    /'
    failed+=("$target")
    continue
  fi
  echo "== $target: $(ls "$src/corpus/$target" | wc -l) seeds replayed; $seconds s, -max_len=${maxLen[$target]:-4096}"
  "$build/bin/$target" -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" \
    -max_len="${maxLen[$target]:-4096}" -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/findings/$target-" \
    "$corpus" > "$log" 2>&1
  rc=$?
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
    "$log" | awk '!seen[$0]++ { print "  " $0 }'
  if [ $rc -ne 0 ]; then
    echo "  FOUND (exit $rc); the log is $log:"
    grep -E 'ERROR|runtime error|finding|Test unit written' "$log" | head -n 20 |
      sed 's/^/    /'
    if [ "${FUZZ_STRICT:-1}" = 0 ]; then
      found+=("$target")
    else
      failed+=("$target")
    fi
  fi
done
if [ ${#found[@]} -gt 0 ]; then
  echo "new findings (not fatal, FUZZ_STRICT=0): ${found[*]} (inputs in $work/findings/);"
  echo "fix each and add it to fuzz/corpus/<target>/regression-*"
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzers with findings: ${failed[*]} (inputs in $work/findings/)"
  exit 1
fi
