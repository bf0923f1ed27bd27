#include "launcher/environment_report.h"

#include <fstream>
#include <iterator>
#include <regex>

#include <catch2/catch.hpp>

#include "kernels/cpu/blas_info.h"
#include "tests/support/run_command.h"
#include "topology/machine_topology.h"

using dslaunch::kernels::BlasInfo;
using dslaunch::launcher::blas_advice;

namespace {

BlasInfo blas_with_core(const std::string& core) {
  BlasInfo info;
  info.core_name = core;
  return info;
}

}  // namespace

TEST_CASE("BLAS advice: generic kernels on an AVX-512 CPU point to SkylakeX") {
  for (const char* core : {"Prescott", "Haswell", "Zen"}) {
    const auto advice = blas_advice(blas_with_core(core), true, true);
    REQUIRE(advice.size() == 1);
    CHECK(advice[0].find(std::string("uses its ") + core + " kernels") != std::string::npos);
    CHECK(advice[0].find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
  }
}

TEST_CASE("BLAS advice: AVX-512 kernels on an AVX-512 CPU need nothing") {
  CHECK(blas_advice(blas_with_core("SkylakeX"), true, true).empty());
  CHECK(blas_advice(blas_with_core("skylakex"), true, true).empty());
  CHECK(blas_advice(blas_with_core("CooperLake"), true, true).empty());
}

TEST_CASE("BLAS advice: SSE kernels on an AVX2 CPU point to Haswell") {
  const auto advice = blas_advice(blas_with_core("Prescott"), true, false);
  REQUIRE(advice.size() == 1);
  CHECK(advice[0].find("OPENBLAS_CORETYPE=Haswell") != std::string::npos);
  CHECK(blas_advice(blas_with_core("Haswell"), true, false).empty());
  CHECK(blas_advice(blas_with_core("Zen"), true, false).empty());
}

TEST_CASE("BLAS advice: a CPU without AVX2 gets none") {
  CHECK(blas_advice(blas_with_core("Prescott"), false, false).empty());
}

TEST_CASE("the report describes this machine") {
  const auto report = dslaunch::launcher::collect_environment_report();
  const auto machine = dslaunch::topology::probe_machine_topology();
  CHECK(report.machine.cores == machine.cores);
  CHECK(report.machine.memory_bytes == machine.memory_bytes);
  CHECK(report.blas.core_name == dslaunch::kernels::query_blas_info().core_name);
  CHECK(std::regex_match(report.grpc_version, std::regex(R"(\d+\.\d+\.\d+)")));
  CHECK(std::regex_match(report.protobuf_version, std::regex(R"(\d+\.\d+\.\d+)")));
  CHECK(report.dslaunch_version.rfind("dslaunch ", 0) == 0);
  // tools/setup.sh installs mpirun; the shell's own PATH lookup must agree.
  const auto shell_lookup = dslaunch::testing::run_command("command -v mpirun");
  REQUIRE(shell_lookup.exit_code == 0);
  CHECK(report.mpirun_path + "\n" == shell_lookup.output);
  CHECK(report.mpirun_version.find("Open MPI") != std::string::npos);
  // What the kernel says this CPU can do.
  std::ifstream cpuinfo("/proc/cpuinfo");
  const std::string flags((std::istreambuf_iterator<char>(cpuinfo)),
                          std::istreambuf_iterator<char>());
  CHECK(report.cpu_has_avx512_bf16 == (flags.find(" avx512_bf16") != std::string::npos));
  CHECK(dslaunch::launcher::to_text(report).find(
            std::string("avx512_bf16 ") + (report.cpu_has_avx512_bf16 ? "yes" : "no")) !=
        std::string::npos);
  // bf16 products run on oneDNN exactly where the CPU has AVX512_BF16; fp16
  // always on OpenBLAS here.
  CHECK((report.bf16_matmul.rfind("oneDNN bf16", 0) == 0) == report.cpu_has_avx512_bf16);
  CHECK(report.fp16_matmul == "OpenBLAS sgemm on fp16-rounded operands");
  CHECK(dslaunch::launcher::to_text(report).find("matrix products   fp32 OpenBLAS sgemm; bf16 " +
                                                 report.bf16_matmul) != std::string::npos);
}

TEST_CASE("the CPU-only build says the CUDA backend is not built in") {
  const auto report = dslaunch::launcher::collect_environment_report();
  CHECK_FALSE(report.accelerators.cuda_backend_built);
  CHECK(report.accelerators.gpus.empty());
  CHECK(dslaunch::launcher::to_text(report).find(
            "cuda backend      not built in (build with --config=cuda)") != std::string::npos);
}

TEST_CASE("the JSON report carries the same values as the struct") {
  const auto report = dslaunch::launcher::collect_environment_report();
  const auto json = dslaunch::launcher::to_json(report);
  CHECK(json["host"]["cores"] == report.machine.cores);
  CHECK(json["host"]["memory_bytes"] == report.machine.memory_bytes);
  CHECK(json["openblas"]["core"] == report.blas.core_name);
  CHECK(json["mpi"]["mpirun"] == report.mpirun_path);
  CHECK(json["cuda"]["backend_built"] == false);
  CHECK(json["advice"].size() == report.advice.size());
}
