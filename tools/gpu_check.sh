#!/usr/bin/env bash
# Runs the --config=cuda build on a GPU machine that has CUDA's driver and
# toolkit (or PyTorch's CUDA wheels) but none of our Debian libraries, from
# the bundle tools/gpu_bundle.sh made (.device/bundle.tar.xz):
#   1. nvidia-smi and `dslaunch report` (CUDA, cuBLAS and NCCL versions);
#   2. `dslaunch selftest --device cuda` (every kernel, 20 training steps
#      and the engine against the CPU backend, NCCL against MPI);
#   3. a job through `dslaunch run` on the GPU (the demo's model in bf16,
#      ZeRO stage 1, one rank per GPU), then `dslaunch status`;
#   4. bench/gpu_train_bench (GPT-2 124M tokens/s and MFU beside PyTorch);
#   offload: bench/gpu_offload_bench (pin_memory: pinned beside pageable).
# Each step has a time limit, so one that hangs leaves the others their
# turn; logs go to $OUT (else /tmp/gpu_check). Run from the repository root:
#   tools/gpu_check.sh [selftest|job|bench|offload|profile|pytorch ...]
# (default: the first three). profile times each kernel of a training step
# with Nsight Compute; pytorch runs the PyTorch reference alone.
set -uo pipefail
out=${OUT:-/tmp/gpu_check}
mkdir -p "$out"
root=/tmp/dslaunch-bundle
rm -rf "$root" && mkdir -p "$root"
tar -C "$root" -xJf .device/bundle.tar.xz || exit 1

# cuBLAS and NCCL from the machine: CUDA's toolkit, else PyTorch's wheels.
library_dir() {
  find /usr/local/cuda*/ /usr/lib/x86_64-linux-gnu /opt -name "$1" 2>/dev/null | head -1 | xargs -r dirname
}
cuda_path=""
for library in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  dir=$(library_dir "$library")
  if [ -z "$dir" ]; then
    echo "no $library on this machine" | tee "$out/environment.log"
    exit 1
  fi
  cuda_path+=":$dir"
done
machine_library_path=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$root/lib$cuda_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$root/bin:$root/ompi/bin:$PATH"
export OPAL_PREFIX="$root/ompi" PMIX_PREFIX="$root/pmix"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_show_load_errors=0 PMIX_MCA_pcompress_base_silence_warning=1
# PyTorch keeps the machine's libraries: a python3 first on PATH drops ours.
mkdir -p "$root/python"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$machine_library_path" \
  "$(command -v python3)" >"$root/python/python3"
chmod +x "$root/python/python3"
# Nsight Compute (profile) from the toolkit or its own folder.
PATH="$root/python:$PATH:/usr/local/cuda/bin"
for nsight in /opt/nvidia/nsight-compute/*/; do PATH+=":$nsight"; done
export PATH
# gpu_train_bench finds the PyTorch reference script as a runfile.
mkdir -p /tmp/dslaunch-runfiles && ln -sfn "$PWD" /tmp/dslaunch-runfiles/dslaunch
export RUNFILES_DIR=/tmp/dslaunch-runfiles

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(selftest job bench)

step() {  # step NAME SECONDS COMMAND...: runs it under a time limit, logged.
  local name=$1 seconds=$2
  shift 2
  echo "== $name ($(date +%T))"
  local started=$SECONDS
  timeout -k 10 "$seconds" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - started)) s"
}

{
  nvidia-smi
  nvidia-smi topo -m
  lscpu | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-200
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} >"$out/environment.log" 2>&1
head -20 "$out/environment.log"
step report 30 dslaunch report

for name in "${steps[@]}"; do
  case $name in
    selftest) step selftest 200 dslaunch selftest --device cuda ;;
    job)
      job_dir=/tmp/dslaunch-gpu-job
      rm -rf "$job_dir"
      step job 120 dslaunch run jobs/demo.yaml --job-dir "$job_dir" --progress plain \
        --set cluster.device=cuda --num_gpus 1 --set training.bf16.enabled=true
      step job_status 20 dslaunch status "$job_dir"
      ;;
    bench) step bench 200 gpu_train_bench --steps 5 --warmup 2 ;;
    offload) step offload 200 gpu_offload_bench --steps 3 --warmup 1 ;;
    profile)
      # Each kernel's time in one bf16 step of gpu_train_bench's model
      # (after its cuBLAS peak products), by Nsight Compute. The bench goes
      # on with its engine runs; the time limit stops it, and ncu prints
      # its summary as it ends.
      step profile 150 ncu --clock-control none --metrics gpu__time_duration.sum \
        --print-summary per-kernel --csv --launch-count 1500 \
        gpu_train_bench --steps 1 --warmup 0 --no-pytorch
      ;;
    pytorch)
      for precision in --bf16 ""; do
        step "pytorch$precision" 120 python3 tools/reference/gpt2_reference.py train-bench \
          --device cuda $precision --layers 12 --channels 768 --heads 12 --vocab 50304 \
          --seq 1024 --batch 8 --steps 5 --warmup 2
      done
      ;;
    *) echo "unknown step $name (selftest, job, bench, offload, profile or pytorch)" ;;
  esac
done
