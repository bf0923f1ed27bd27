#!/bin/sh
echo "bazel coverage is not available in dslaunch's offline build (Bazel's coverage tools would have to be downloaded)." >&2
exit 1
