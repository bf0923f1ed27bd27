#!/usr/bin/env bash
# The demo command (README): installs what is missing, builds dslaunch and
# dsworker, and runs them on this machine.
#
# What it runs grows with the project: today the environment report, the plan
# of the demo job (jobs/demo.yaml) and a 2-rank MPI probe; training the demo
# job joins once `dslaunch run` exists.
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
echo "== dsworker probe on 2 ranks"
tools/mpirun_local.sh 2 "$bin/worker/dsworker" probe
