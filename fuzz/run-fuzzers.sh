#!/usr/bin/env bash
# Runs every libFuzzer target in BUILD/bin for SECONDS each, on a copy of
# its seeds (fuzz/corpus/<target>/), so that the repository is never
# written. Findings go to BUILD/fuzz/findings/; exits non-zero if any target
# found one.
#   usage: fuzz/run-fuzzers.sh BUILD [SECONDS] [TARGET...]
# FUZZ_SEED (default 1) fixes libFuzzer's random seed, so that a run
# repeats the same inputs in the same order (CI's is reproducible: a finding
# there is found again by the same command); FUZZ_SEED=0 draws a new one.
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
for target in "${targets[@]}"; do
  corpus="$work/corpus/$target"
  rm -rf "$corpus" && mkdir -p "$corpus"
  cp "$src/corpus/$target"/* "$corpus"/
  log="$work/$target.log"
  echo "== $target: $seconds s, -max_len=${maxLen[$target]:-4096}"
  "$build/bin/$target" -max_total_time="$seconds" -seed="${FUZZ_SEED:-1}" \
    -max_len="${maxLen[$target]:-4096}" -timeout=25 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work/findings/$target-" \
    "$corpus" > "$log" 2>&1
  rc=$?
  grep -E '^stat::(number_of_executed_units|average_exec_per_sec|peak_rss_mb)' \
    "$log" | awk '!seen[$0]++ { print "  " $0 }'
  if [ $rc -ne 0 ]; then
    echo "  FAILED (exit $rc); the log is $log:"
    grep -E 'ERROR|runtime error|finding|Test unit written' "$log" | head -n 20 |
      sed 's/^/    /'
    failed+=("$target")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzzers with findings: ${failed[*]} (inputs in $work/findings/)"
  exit 1
fi
