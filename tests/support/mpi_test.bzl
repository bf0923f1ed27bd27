"""mpi_test: a Catch2 test run under real mpirun at one or more world sizes."""

load("@rules_cc//cc:defs.bzl", "cc_binary")

def mpi_test(name, srcs, deps = [], ranks = [2], size = "small", **kwargs):
    """Defines <name>_np<N> for each N in ranks, all running one test binary.

    Args:
      name: base name.
      srcs: test sources (Catch2 TEST_CASEs; main() comes from catch_mpi_main).
      deps: libraries under test.
      ranks: world sizes to run at.
      size: Bazel test size; runs of more ranks than CI's two cores get at
        least "medium", as oversubscribed ranks beside other tests can run
        several times slower than alone.
      **kwargs: passed to each sh_test (tags, timeout).
    """
    binary = name + "_bin"
    cc_binary(
        name = binary,
        srcs = srcs,
        testonly = True,
        deps = deps + [
            "//tests/support:catch_mpi_main",
            "@openmpi",
        ],
    )
    for n in ranks:
        native.sh_test(
            name = "%s_np%d" % (name, n),
            srcs = ["//tools:mpirun_local.sh"],
            args = [str(n), "$(location :%s)" % binary],
            data = [":" + binary],
            size = "medium" if n > 2 and size == "small" else size,
            **kwargs
        )
