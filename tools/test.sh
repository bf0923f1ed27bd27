#!/usr/bin/env bash
# The test command (README; .ci/run calls it): installs what is missing, builds
# everything, compiles the --config=cuda build when a CUDA toolkit is present
# (compiling needs no GPU), runs every test, and ends with "N passed, N failed"
# counting test cases, after a bounded run of every fuzzer (tools/fuzz.sh).
# Exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

# Each stage's wall time, printed before the summary: CI has a time budget.
timings=()
stage_start=$SECONDS
stage_done() {
  timings+=("$1 $((SECONDS - stage_start)) s")
  stage_start=$SECONDS
}

bash tools/setup.sh || exit 1
stage_done "set-up"

checks=()
if [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "== compiling the CUDA configuration (bazel build --config=cuda //...)"
  if bazel build --config=cuda //...; then
    checks+=(--check "bazel build --config=cuda //...=passed")
    # The tests that exist only in that configuration (they need no GPU,
    # and check the GPU when there is one).
    if bazel test --config=cuda //tests/kernels/cuda:cuda_backend_test; then
      checks+=(--check "bazel test --config=cuda //tests/kernels/cuda:cuda_backend_test=passed")
    else
      checks+=(--check "bazel test --config=cuda //tests/kernels/cuda:cuda_backend_test=failed")
    fi
  else
    checks+=(--check "bazel build --config=cuda //...=failed")
  fi
  stage_done "CUDA configuration build"
fi

# Fuzzers: a bounded run each (DSLAUNCH_FUZZ_SECONDS, default 15: a smoke
# run from the seed corpora that keeps CI inside its time budget; fuzz longer
# by hand with tools/fuzz.sh SECONDS).
echo "== fuzzing (tools/fuzz.sh)"
fuzz_checks=${#checks[@]}
while read -r line; do
  echo "$line"
  case "$line" in
    "fuzz "*": passed"*) checks+=(--check "${line%%: *}=passed") ;;
    "fuzz "*": failed"*) checks+=(--check "${line%%: *}=failed") ;;
  esac
done < <(bash tools/fuzz.sh "${DSLAUNCH_FUZZ_SECONDS:-15}" 2>&1)
if [ ${#checks[@]} -eq "$fuzz_checks" ]; then
  checks+=(--check "fuzz=failed (tools/fuzz.sh reported no fuzzer)")
fi
stage_done "fuzzing (build and runs)"

echo "== running the tests (bazel test //...)"
events=$(mktemp)
trap 'rm -f "$events"' EXIT
# Tests tagged requires-root (mounts, namespaces) run only as root, and
# those tagged requires-gnuplot only where gnuplot is installed (setup.sh
# installs it); elsewhere they are reported as skipped by name, never counted
# as passed.
filters=()
skipped=()
excluded=()
skip_tagged() {
  excluded+=("-$1")
  while read -r label; do
    skipped+=(--skipped "$label ($2)")
  done < <(bazel query "attr(tags, \"$1\", tests(//...))" 2>/dev/null)
}
[ "$(id -u)" != 0 ] && skip_tagged requires-root "needs root"
command -v gnuplot >/dev/null || skip_tagged requires-gnuplot "needs gnuplot"
if [ ${#excluded[@]} -gt 0 ]; then
  filters=(--test_tag_filters="$(IFS=,; echo "${excluded[*]}")")
fi
bazel test --keep_going --build_event_json_file="$events" "${filters[@]}" //...
bazel_status=$?
stage_done "bazel test //... (build and tests)"
testlogs=$(bazel info bazel-testlogs 2>/dev/null)
# 0: all passed; 3: some tests failed (counted below). Anything else means
# Bazel could not load, analyse or build part of //... , and tests there
# never ran: that is a failure of its own.
case "$bazel_status" in
  0|3) ;;
  *) checks+=(--check "bazel test //... (exit code $bazel_status: a package did not load or build)=failed") ;;
esac

echo "== time per stage: $(IFS=,; echo "${timings[*]}" | sed 's/,/, /g')"
echo "== summary"
python3 tools/test_summary.py --bep "$events" --testlogs "$testlogs" "${checks[@]}" "${skipped[@]}"
