#!/usr/bin/env bash
# Runs a program on N ranks on this host with Open MPI's mpirun:
#   tools/mpirun_local.sh N PROGRAM [ARGS...]
# Ranks may outnumber cores (CI has 2), and as root mpirun must be told that
# running as root is intended.
set -euo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 N PROGRAM [ARGS...]" >&2
  exit 2
fi
ranks=$1
shift
# Waiting ranks yield the core: Open MPI only does so by itself when one
# run's ranks outnumber the cores, and tests run side by side would otherwise
# spin against each other's ranks.
flags=(--oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -np "$ranks")
if [ "$(id -u)" = 0 ]; then flags+=(--allow-run-as-root); fi
exec mpirun "${flags[@]}" "$@"
