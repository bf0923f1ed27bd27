#!/usr/bin/env bash
# Installs every Debian package that dslaunch's build, demo and tests need.
# Idempotent: when everything is installed it changes nothing and reaches no
# network; otherwise it runs `apt-get update` once and installs what is missing.
# Needs root, or sudo.
set -euo pipefail

packages=(
  # build
  bazel-bootstrap bazel-platforms g++ git python3
  # fuzzing (libFuzzer, sanitizers)
  clang libclang-rt-14-dev
  # libraries wrapped in WORKSPACE
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libopenmpi-dev openmpi-bin
  libyaml-cpp-dev libspdlog-dev libfmt-dev libopenblas-openmp-dev
  catch2 libcli11-dev nlohmann-json3-dev libxxhash-dev libhwloc-dev
  liburing-dev libdnnl-dev libssl-dev
  libpcre2-dev libcpp-httplib-dev libdw-dev
  # fibers for the CUDA thread-model emulator (kernels/simt)
  libboost-context-dev
  # `dslaunch plot`
  gnuplot-nox
  # test hosts for multi-host runs (tools/testhosts.sh): namespaces, links,
  # sshd, and a Slurm cluster on them
  iproute2 openssh-server openssh-client slurm-wlm munge
  # the independent PyTorch reference (tools/reference) for tests and benchmarks
  python3-torch python3-numpy
  # independent readers in tests: GPT-2's reference BPE (regex), TensorBoard
  # record checksums (crc32c)
  python3-regex python3-crc32c
)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)
  [ "$status" = installed ] || missing+=("$package")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

as_root=()
if [ "$(id -u)" != 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "setup: these packages are missing and installing them needs root: ${missing[*]}" >&2
    exit 1
  fi
  as_root=(sudo)
fi
# apt's own output goes to a log file, named if something fails: a fresh
# machine's set-up is a few lines, not pages.
log=$(mktemp "${TMPDIR:-/tmp}/dslaunch-setup.XXXXXX.log")
step() {
  local what=$1
  shift
  echo "setup: $what" >&2
  if ! "$@" >>"$log" 2>&1; then
    echo "setup: failed: $what; the last lines of $log:" >&2
    tail -n 20 "$log" >&2
    exit 1
  fi
}
step "updating the package lists (apt-get update)" "${as_root[@]}" apt-get update
step "installing ${#missing[@]} package(s): ${missing[*]}" \
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y --no-install-recommends "${missing[@]}"
echo "setup: done (apt's output: $log)" >&2
