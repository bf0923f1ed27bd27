#!/usr/bin/env bash
# The demo command (README): installs what is missing, builds dslaunch and
# dsworker, and runs them on this machine: the environment report, the plan
# of the demo training job, the training itself (2 data-parallel ranks on the
# built-in corpus, generated on first use, checkpointing every 100 steps),
# the job's status and checkpoints, its training curves plotted, its weights
# exported as Hugging Face GPT-2 safetensors and evaluated, a 4-rank
# collectives benchmark (jobs/commbench.yaml) with its table, and a sample of
# text from the trained model.
set -euo pipefail
cd "$(dirname "$0")/.."

bash tools/setup.sh
bazel build //launcher:dslaunch //worker:dsworker
bin=$(bazel info bazel-bin 2>/dev/null)
dslaunch="$bin/launcher/dslaunch"
job_dir="${DSLAUNCH_HOME:-$HOME/.dslaunch}/jobs/demo-$(date +%Y%m%d-%H%M%S)"

echo
echo "== dslaunch report"
"$dslaunch" report
echo
echo "== dslaunch plan jobs/demo.yaml"
"$dslaunch" plan jobs/demo.yaml
echo
echo "== dslaunch run jobs/demo.yaml"
"$dslaunch" run jobs/demo.yaml --job-dir "$job_dir"
echo
echo "== dslaunch status"
"$dslaunch" status
"$dslaunch" status "$job_dir"
echo
echo "== its checkpoints (the manifest of the last)"
ls "$job_dir/checkpoints"
head -c 400 "$job_dir/checkpoints/step_00000300/manifest.json"; echo
echo
echo "== the last steps, from the rank-0 log"
grep -E '\] (data:|step .*eval_loss)' "$job_dir/logs/attempt_0/rank_0/stdout.log"
echo
echo "== dslaunch export, then dslaunch eval on the demo corpus's evaluation split"
"$dslaunch" export "$job_dir" --out "$job_dir/export/model.safetensors"
data_dir="${DSL_DATA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dslaunch/data}"
"$dslaunch" eval --weights "$job_dir/export/model.safetensors" \
  --tokens "$data_dir/demo-v1-valid.bin" --batch 8 --seq 256 --batches 8
echo
echo "== dslaunch plot: loss, evaluation loss, learning rate, tokens/s"
"$dslaunch" plot "$job_dir"
echo
echo "== dslaunch run jobs/commbench.yaml, and its table from rank 0's log"
bench_dir="${job_dir%/*}/commbench-$(date +%Y%m%d-%H%M%S)"
"$dslaunch" run jobs/commbench.yaml --set commbench.max_bytes=1048576 --job-dir "$bench_dir"
"$dslaunch" logs "$bench_dir" --rank 0
echo
echo "== dslaunch generate: the trained model continues a prompt"
"$dslaunch" generate --weights "$job_dir" --prompt "The " --tokens 240 --temperature 0.8 --seed 7
