#!/usr/bin/env bash
# The test command (README; .ci/run calls it): installs what is missing, builds
# everything, compiles the --config=cuda build when a CUDA toolkit is present
# (compiling needs no GPU), runs every test, and ends with "N passed, N failed"
# counting test cases. Exits non-zero when anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh || exit 1

checks=()
if [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  echo "== compiling the CUDA configuration (bazel build --config=cuda //...)"
  if bazel build --config=cuda //...; then
    checks+=(--check "bazel build --config=cuda //...=passed")
  else
    checks+=(--check "bazel build --config=cuda //...=failed")
  fi
fi

echo "== running the tests (bazel test //...)"
events=$(mktemp)
trap 'rm -f "$events"' EXIT
bazel test --keep_going --build_event_json_file="$events" //...
testlogs=$(bazel info bazel-testlogs 2>/dev/null)

echo "== summary"
python3 tools/test_summary.py --bep "$events" --testlogs "$testlogs" "${checks[@]}"
