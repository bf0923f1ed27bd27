#!/usr/bin/env bash
# Bazel workspace status: the version and git commit stamped into binaries.
# Outside a git checkout (for example a source tarball) the commit is "unknown".
set -u
cd "$(dirname "$0")/.."
echo "STABLE_DSLAUNCH_VERSION $(cat VERSION)"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null) || commit=unknown
if [ "$commit" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit="${commit}-dirty"
fi
echo "STABLE_GIT_COMMIT ${commit}"
