#!/usr/bin/env bash
# Fails when code outside the MPI communicator (worker/comm/mpi_*) includes
# <mpi.h> or uses an MPI identifier: only worker/comm/mpi_* may call MPI
# (DESIGN: one progress thread makes every MPI call). Prints each offence as
# file:line: text.
#
# Where the sources come from: Bazel cannot glob across packages, and the
# packages scanned export no filegroup of their sources, so this test reads
# the source tree itself. Its own script is a runfiles symlink that resolves
# (readlink -f, through the sandbox's and the runfiles' links) to
# <workspace>/tests/worker/comm/mpi_confinement_test.sh: three directories up
# is the workspace. The BUILD file tags the test `local` (no sandbox) and
# `external` (never cached), since the files it reads are not its inputs.
# DSLAUNCH_WORKSPACE overrides the root (to run it by hand).
set -euo pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
root=${DSLAUNCH_WORKSPACE:-$(cd "$(dirname "$self")/../../.." && pwd)}
if [ ! -f "$root/WORKSPACE" ] || [ ! -d "$root/worker/comm" ]; then
  echo "mpi_confinement_test: cannot find the workspace (tried $root from $self)" >&2
  exit 2
fi
cd "$root"

dirs=(worker launcher core kernels topology proto)
include='#[[:space:]]*include[[:space:]]*[<"]mpi\.h[>"]'
identifier='\bMPI_[A-Za-z_]+\(|\bMPI_Comm\b|\bMPI_Request\b'
pattern="$include|$identifier"

# Lines of FILE using MPI, as "line:text", comment lines (// first) left out.
mpi_lines() {
  grep -nE -- "$pattern" "$1" | grep -vE '^[0-9]+:[[:space:]]*//' || true
}

# The check must see MPI where it is allowed, or it sees nothing anywhere.
if [ -z "$(mpi_lines worker/comm/mpi_communicator.cc)" ]; then
  echo "mpi_confinement_test: no MPI use found in worker/comm/mpi_communicator.cc;" \
    "the pattern or the scanned tree is wrong" >&2
  exit 2
fi

existing=()
for d in "${dirs[@]}"; do [ -d "$d" ] && existing+=("$d"); done
scanned=0
offences=0
offending_files=()
while IFS= read -r -d '' file; do
  file=${file#./}
  case "$file" in
    worker/comm/mpi_*) continue ;;
  esac
  scanned=$((scanned + 1))
  found=$(mpi_lines "$file")
  if [ -n "$found" ]; then
    offending_files+=("$file")
    while IFS= read -r line; do
      echo "$file:${line%%:*}: ${line#*:}"
      offences=$((offences + 1))
    done <<<"$found"
  fi
done < <(find "${existing[@]}" -type f \( -name '*.h' -o -name '*.cc' \) -print0 | sort -z)

if [ "$scanned" -eq 0 ]; then
  echo "mpi_confinement_test: no .h or .cc files under ${dirs[*]} in $root" >&2
  exit 2
fi
if [ "$offences" -gt 0 ]; then
  echo
  echo "FAIL: $offences line(s) in ${#offending_files[@]} file(s) use MPI outside worker/comm/mpi_*:"
  printf '  %s\n' "${offending_files[@]}"
  echo "Use worker/comm/communicator.h (Communicator, ProcessGroups) instead."
  exit 1
fi
echo "PASS: $scanned files under ${existing[*]} use no MPI outside worker/comm/mpi_*"
