#!/usr/bin/env bash
# The demo command (README): installs what is missing, builds dslaunch and
# dsworker, and runs them on this machine: the environment report, the plan
# of the demo training job (jobs/demo.yaml), and a real 4-rank job started
# and watched by `dslaunch run`: the collectives benchmark (jobs/commbench.yaml).
# Training the demo job joins once the training engine exists.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build //launcher:dslaunch //worker:dsworker
bin=$(bazel info bazel-bin 2>/dev/null)

echo
echo "== dslaunch report"
"$bin/launcher/dslaunch" report
echo
echo "== dslaunch plan jobs/demo.yaml"
"$bin/launcher/dslaunch" plan jobs/demo.yaml
echo
echo "== dslaunch run jobs/commbench.yaml"
"$bin/launcher/dslaunch" run jobs/commbench.yaml --set commbench.max_bytes=1048576
echo
echo "== dslaunch status"
"$bin/launcher/dslaunch" status
