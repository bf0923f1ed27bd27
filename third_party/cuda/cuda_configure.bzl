"""Finds the local CUDA toolkit (nvcc, cudart, cuBLAS, NCCL) without downloading.

The toolkit is looked up at $CUDA_PATH, else /usr/local/cuda. When it is there,
@cuda exposes nvcc and the libraries; when it is not, every @cuda target is a
genrule that fails and says how to fix it, so the CPU-only default build (which
never depends on @cuda) is unaffected.
"""

def _cuda_configure_impl(ctx):
    root = ctx.os.environ.get("CUDA_PATH", "/usr/local/cuda")
    nvcc = ctx.path(root + "/bin/nvcc")
    if not nvcc.exists:
        ctx.template("BUILD.bazel", ctx.attr._missing_tpl, {"%{root}": root})
        return
    # Link the whole toolkit in: nvcc finds cicc, ptxas and its headers
    # relative to its own location.
    for entry in ctx.path(root).readdir():
        ctx.symlink(entry, entry.basename)
    ctx.template("BUILD.bazel", ctx.attr._build_tpl, {"%{root}": root})

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
    attrs = {
        "_build_tpl": attr.label(default = "//third_party/cuda:BUILD.cuda.tpl"),
        "_missing_tpl": attr.label(default = "//third_party/cuda:BUILD.missing.tpl"),
    },
)
