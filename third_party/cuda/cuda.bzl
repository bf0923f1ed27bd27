"""cuda_library: compiles .cu files with the toolkit's nvcc into a static library.

Bazel 4 has no CUDA rules, so nvcc runs in a genrule and the archive it makes
is wrapped in a cc_library that also links cudart, cuBLAS and NCCL.
"""

load("@rules_cc//cc:defs.bzl", "cc_library")

# Devices dslaunch targets: A100 (sm_80) and H100/H200 (sm_90). PTX for
# compute_90 is embedded too, so newer GPUs can JIT-compile the kernels.
CUDA_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=[sm_90,compute_90]",
]

# Skips a target in the default, CPU-only build, so `bazel build //...` never
# needs a CUDA toolkit.
CUDA_ONLY = select({
    "//:cuda_enabled": [],
    "//conditions:default": ["@platforms//:incompatible"],
})

def cuda_library(name, srcs, hdrs = [], includes_hdrs = [], deps = [], nvcc_flags = [], **kwargs):
    """A cc_library made from CUDA sources.

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: this library's public headers.
      includes_hdrs: other project headers the .cu files include (nvcc runs
        outside Bazel's C++ rules, so they must be listed).
      deps: cc_library dependencies for users of this library.
      nvcc_flags: more nvcc options for these sources.
      **kwargs: passed to the cc_library (visibility, tags).
    """
    archive = "lib%s_device.a" % name
    native.genrule(
        name = name + "_nvcc",
        srcs = srcs + hdrs + includes_hdrs,
        outs = [archive],
        target_compatible_with = CUDA_ONLY,
        tools = [
            "@cuda//:nvcc",
            "@cuda//:toolkit",
        ],
        cmd = " ".join([
            "$(location @cuda//:nvcc)",
            "-lib",
            "-std=c++20",
            "-O3",
            "-I.",
            "-I$(GENDIR)",
            "-Xcompiler=-fPIC,-Wall,-Wextra",
            "--Werror=all-warnings",
        ] + CUDA_GENCODE + nvcc_flags + [
            "-o $@",
        ] + ["$(location %s)" % s for s in srcs]),
    )
    cc_library(
        name = name,
        srcs = [":" + archive],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cuda_runtime"],
        # Keep every object: kernels are reached through registration, not
        # always through a symbol the linker sees referenced.
        alwayslink = True,
        target_compatible_with = CUDA_ONLY,
        **kwargs
    )
