#!/usr/bin/env bash
# Fails when launcher/ includes a worker/ header, worker/ a launcher/ one, or
# core/ either (DESIGN.md: what both need lives in core/). Bazel visibility
# refuses such dependencies; this also catches an include that reaches a
# header without one (builds outside the sandbox can see the whole tree).
# Prints each offence as file:line: text.
#
# It reads the source tree itself (see mpi_confinement_test.sh for why and
# how it finds it): tagged `local` and `external`. DSLAUNCH_WORKSPACE
# overrides the root.
set -euo pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
root=${DSLAUNCH_WORKSPACE:-$(cd "$(dirname "$self")/../.." && pwd)}
if [ ! -f "$root/WORKSPACE" ] || [ ! -d "$root/core" ]; then
  echo "layering_test: cannot find the workspace (tried $root from $self)" >&2
  exit 2
fi
cd "$root"

# DIR and the top-level folders it must not include, one check per line.
rules=(
  "launcher worker"
  "worker launcher"
  "core launcher|worker"
)
offences=0
scanned=0
for rule in "${rules[@]}"; do
  dir=${rule%% *}
  forbidden=${rule#* }
  while IFS= read -r -d '' file; do
    scanned=$((scanned + 1))
    found=$(grep -nE "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"($forbidden)/" "$file" || true)
    [ -z "$found" ] && continue
    while IFS= read -r line; do
      echo "$file:${line%%:*}: ${line#*:}"
      offences=$((offences + 1))
    done <<<"$found"
  done < <(find "$dir" -type f \( -name '*.h' -o -name '*.cc' \) -print0 | sort -z)
done

if [ "$scanned" -lt 100 ]; then
  echo "layering_test: only $scanned source files under launcher/, worker/ and core/ in $root" >&2
  exit 2
fi
if [ "$offences" -gt 0 ]; then
  echo
  echo "FAIL: $offences include(s) cross between launcher/ and worker/ or from core/;" \
    "move what both need to core/"
  exit 1
fi
echo "PASS: $scanned files; launcher/ and worker/ do not include each other, core/ includes neither"
