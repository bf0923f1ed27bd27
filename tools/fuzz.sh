#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time from its seed corpus:
#   tools/fuzz.sh [SECONDS_PER_FUZZER]      (default 30)
# Runs one fuzzer per core at a time. Prints one line per fuzzer, in the
# order listed, "fuzz <name>: passed|failed", and exits non-zero
# when any fuzzer found a crash, a hang, a leak or a broken promise. Crashing
# inputs are left under $DSLAUNCH_FUZZ_ARTIFACTS (default /tmp/dslaunch-fuzz).
set -uo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-30}
fuzzers=(hostfile_fuzzer spec_fuzzer deepspeed_config_fuzzer overrides_fuzzer plan_fuzzer
  safetensors_fuzzer manifest_fuzzer shard_header_fuzzer token_file_fuzzer state_json_fuzzer
  rank_output_fuzzer launch_inputs_fuzzer bpe_tokenizer_fuzzer)
# A separate output base (clang here, gcc in the main build), one per checkout
# as Bazel's own are.
workspace_key=$(pwd | md5sum | cut -c1-12)
output_base=${DSLAUNCH_FUZZ_OUTPUT_BASE:-$HOME/.cache/dslaunch-fuzz-bazel/$workspace_key}
artifacts=${DSLAUNCH_FUZZ_ARTIFACTS:-/tmp/dslaunch-fuzz}
fuzz_bazel() { bazel --output_base="$output_base" "$@"; }

targets=()
for fuzzer in "${fuzzers[@]}"; do targets+=("//tests/fuzz:$fuzzer"); done
if ! fuzz_bazel build --config=fuzz --symlink_prefix=/ "${targets[@]}"; then
  for fuzzer in "${fuzzers[@]}"; do echo "fuzz $fuzzer: failed (did not build)"; done
  exit 1
fi
bin=$(fuzz_bazel info --config=fuzz bazel-bin 2>/dev/null)

# One fuzzer per core at a time (each is one process); results print in the
# order of the list.
fuzz_one() {
  local fuzzer=$1 corpus
  corpus=$(mktemp -d)
  mkdir -p "$artifacts/$fuzzer"
  if "$bin/tests/fuzz/$fuzzer" "$corpus" "tests/fuzz/corpus/${fuzzer%_fuzzer}" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/$fuzzer/" -print_final_stats=1 > "$artifacts/$fuzzer.log" 2>&1; then
    echo "fuzz $fuzzer: passed ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$artifacts/$fuzzer.log" | grep -o '[0-9]*$') runs in ${seconds}s)"
  else
    echo "fuzz $fuzzer: failed; see $artifacts/$fuzzer.log"
    tail -30 "$artifacts/$fuzzer.log"
  fi > "$artifacts/$fuzzer.result"
  rm -rf "$corpus"
}

rm -f "$artifacts"/*.result
parallel=$(nproc)
running=0
for fuzzer in "${fuzzers[@]}"; do
  if [ "$running" -ge "$parallel" ]; then
    wait -n
    running=$((running - 1))
  fi
  fuzz_one "$fuzzer" &
  running=$((running + 1))
done
wait

status=0
for fuzzer in "${fuzzers[@]}"; do
  cat "$artifacts/$fuzzer.result"
  grep -q "^fuzz $fuzzer: passed" "$artifacts/$fuzzer.result" || status=1
done
exit $status
