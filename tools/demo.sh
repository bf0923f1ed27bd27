#!/usr/bin/env bash
# The demo command (README): installs what is missing, builds dslaunch and
# dsworker, and runs them on this machine.
#
# What it runs grows with the project: today the environment report and a
# 2-rank MPI probe; the training demo job (jobs/demo.yaml) joins once
# `dslaunch run` exists.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build //launcher:dslaunch //worker:dsworker
bin=$(bazel info bazel-bin 2>/dev/null)

echo
echo "== dslaunch report"
"$bin/launcher/dslaunch" report
echo
echo "== dsworker probe on 2 ranks"
tools/mpirun_local.sh 2 "$bin/worker/dsworker" probe
