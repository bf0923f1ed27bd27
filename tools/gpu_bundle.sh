#!/usr/bin/env bash
# Stages, in .device/bundle.tar.xz, what a GPU machine that has CUDA's driver
# and toolkit but none of our Debian libraries needs to run the --config=cuda
# build: dslaunch, dsworker, gpu_train_bench and gpu_offload_bench; every
# shared library they or Open MPI load, except glibc, libstdc++ and CUDA's
# cuBLAS and NCCL, which such a machine has in newer versions; and Open MPI
# itself (mpirun, orted, its plugins and help texts), laid out to be
# relocated with OPAL_PREFIX. tools/gpu_check.sh unpacks and uses it there.
#
#   bazel build --config=cuda //launcher:dslaunch //worker:dsworker //bench:gpu_train_bench \
#     //bench:gpu_offload_bench
#   tools/gpu_bundle.sh
set -euo pipefail
cd "$(dirname "$0")/.."

stage=.device/stage
rm -rf .device && mkdir -p "$stage"/{bin,lib,ompi/bin,ompi/share,pmix/lib/pmix,pmix/share}

binaries=(bazel-bin/launcher/dslaunch bazel-bin/worker/dsworker bazel-bin/bench/gpu_train_bench
  bazel-bin/bench/gpu_offload_bench)
for binary in "${binaries[@]}"; do
  # grep reads all of objdump's output: -q would stop early and fail the pipe.
  if ! objdump -h "$binary" | grep '\.nv_fatbin' >/dev/null; then
    echo "$binary has no CUDA code: build it with --config=cuda first" >&2
    exit 1
  fi
  # Line tables stay out: they double the size and a GPU check reads no stacks.
  objcopy --strip-debug "$binary" "$stage/bin/$(basename "$binary")"
done

# Open MPI under a prefix of its own: Debian installs every path of it below
# /usr, so OPAL_PREFIX moves them all.
ompi_plugins=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
mkdir -p "$stage/ompi${ompi_plugins#/usr}"
cp -L /usr/bin/orterun /usr/bin/orted "$stage/ompi/bin/"
ln -s orterun "$stage/ompi/bin/mpirun"
cp -r /usr/share/openmpi "$stage/ompi/share/"
# Fabric plugins (InfiniBand verbs, UCX, libfabric, PSM) would bring their
# fabrics' libraries; one host's ranks talk through shared memory and TCP.
for plugin in "$ompi_plugins"/*.so; do
  case $(basename "$plugin") in
    *ucx* | *ofi* | *openib* | *psm*) ;;
    *) cp "$plugin" "$stage/ompi${ompi_plugins#/usr}/" ;;
  esac
done
pmix=/usr/lib/x86_64-linux-gnu/pmix2
cp "$pmix"/lib/pmix/*.so "$stage/pmix/lib/pmix/"
cp -r "$pmix"/share/pmix "$stage/pmix/share/"

# Every library those load, by the name the loader asks for.
provided_there='^(linux-vdso|ld-linux|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl|libnvidia-.*)\.so'
needed=$(for object in "$stage"/bin/* "$stage"/ompi/bin/orte* "$stage"/ompi/lib/*/openmpi/lib/openmpi3/*.so \
  "$stage"/pmix/lib/pmix/*.so; do ldd "$object"; done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u)
while read -r name path; do
  if [[ $name =~ $provided_there ]]; then continue; fi
  [ -e "$stage/lib/$name" ] || cp -L "$path" "$stage/lib/$name"
done <<<"$needed"
missing=$(for object in "$stage"/bin/* "$stage"/ompi/bin/orte*; do
  LD_LIBRARY_PATH="$stage/lib" ldd "$object"; done | grep 'not found' || true)
if [ -n "$missing" ]; then
  echo "unresolved libraries: $missing" >&2
  exit 1
fi

tar -C "$stage" -cf - . | xz -T0 -6 >.device/bundle.tar.xz
rm -rf "$stage"
ls -l .device/bundle.tar.xz
