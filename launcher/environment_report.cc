#include "launcher/environment_report.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <google/protobuf/stubs/common.h>
#include <grpcpp/grpcpp.h>

#include "kernels/cpu/blas_setup.h"
#include "kernels/cpu/rounded_gemm.h"
#include "launcher/capture_output.h"
#include "tools/build_info/build_info.h"

namespace dslaunch::launcher {
namespace {

std::string hostname() {
  std::array<char, 256> buffer{};
  if (gethostname(buffer.data(), buffer.size() - 1) != 0) return "";
  return buffer.data();
}

std::string os_description() {
  utsname name{};
  if (uname(&name) != 0) return "";
  return fmt::format("{} {} {}", name.sysname, name.release, name.machine);
}

// The first directory on PATH holding an executable `program`.
std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::filesystem::path candidate = std::filesystem::path(dir) / program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return "";
}

// First non-empty line of `program --version`, or "" if it cannot run.
std::string first_line_of_version(const std::string& program) {
  const auto result = capture_output({program, "--version"});
  if (!result) return "";
  std::istringstream lines(result->output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty()) return line;
  }
  return "";
}

std::string gib(int64_t bytes) { return fmt::format("{:.1f} GiB", bytes / 1073741824.0); }

}  // namespace

std::vector<std::string> blas_advice(const kernels::BlasInfo& blas, bool cpu_has_avx2,
                                     bool cpu_has_avx512f) {
  const std::string best = cpu_has_avx512f ? "SkylakeX" : cpu_has_avx2 ? "Haswell" : "";
  if (best.empty() || kernels::openblas_core_satisfies(blas.core_name, best)) return {};
  return {fmt::format(
      "OpenBLAS uses its {} kernels on a CPU with {}: dsworker, `dslaunch eval` and the "
      "benchmarks switch to its {} kernels by themselves; other programs (PyTorch included) need "
      "OPENBLAS_CORETYPE={} set before they start (several times faster).",
      blas.core_name, cpu_has_avx512f ? "AVX-512" : "AVX2", best, best)};
}

EnvironmentReport collect_environment_report() {
  EnvironmentReport report;
  report.dslaunch_version = version_line("dslaunch");
  report.hostname = hostname();
  report.os = os_description();
  report.machine = topology::probe_machine_topology();
  __builtin_cpu_init();
  report.cpu_has_avx2 = __builtin_cpu_supports("avx2");
  report.cpu_has_avx512f = __builtin_cpu_supports("avx512f");
  report.cpu_has_avx512_bf16 = __builtin_cpu_supports("avx512bf16");
  report.blas = kernels::query_blas_info();
  report.bf16_matmul = kernels::cpu::RoundedGemm(core::DType::kBF16).kernel_name();
  report.fp16_matmul = kernels::cpu::RoundedGemm(core::DType::kF16).kernel_name();
  report.mpirun_path = find_on_path("mpirun");
  if (!report.mpirun_path.empty()) {
    report.mpirun_version = first_line_of_version(report.mpirun_path);
  }
  report.grpc_version = grpc::Version();
  report.protobuf_version = google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION);
  report.accelerators = kernels::probe_accelerators();

  report.advice = blas_advice(report.blas, report.cpu_has_avx2, report.cpu_has_avx512f);
  if (report.mpirun_path.empty()) {
    report.advice.push_back(
        "mpirun is not on PATH: install Open MPI (Debian: openmpi-bin) to start ranks.");
  }
  if (!report.machine.error.empty()) {
    report.advice.push_back("hwloc could not read the machine topology: " + report.machine.error);
  }
  for (const kernels::GpuInfo& gpu : report.accelerators.gpus) {
    if (!gpu.kernel_ran) {
      report.advice.push_back(fmt::format("GPU {} ({}) cannot run dslaunch's kernels: {}",
                                          gpu.index, gpu.name, gpu.error));
    }
  }
  return report;
}

nlohmann::json to_json(const EnvironmentReport& report) {
  nlohmann::json gpus = nlohmann::json::array();
  for (const kernels::GpuInfo& gpu : report.accelerators.gpus) {
    gpus.push_back({
        {"index", gpu.index},
        {"name", gpu.name},
        {"compute_capability",
         fmt::format("{}.{}", gpu.compute_capability_major, gpu.compute_capability_minor)},
        {"memory_bytes", gpu.total_memory_bytes},
        {"multiprocessors", gpu.multiprocessors},
        {"kernel_ran", gpu.kernel_ran},
        {"error", gpu.error},
    });
  }
  const auto& accel = report.accelerators;
  return {
      {"dslaunch", report.dslaunch_version},
      {"host",
       {
           {"hostname", report.hostname},
           {"os", report.os},
           {"cpu_model", report.machine.cpu_model},
           {"packages", report.machine.packages},
           {"numa_nodes", report.machine.numa_nodes},
           {"cores", report.machine.cores},
           {"hardware_threads", report.machine.hardware_threads},
           {"memory_bytes", report.machine.memory_bytes},
           {"avx2", report.cpu_has_avx2},
           {"avx512f", report.cpu_has_avx512f},
           {"avx512_bf16", report.cpu_has_avx512_bf16},
       }},
      {"openblas",
       {
           {"core", report.blas.core_name},
           {"config", report.blas.config},
           {"threads", report.blas.threads},
           {"coretype_override", report.blas.coretype_override},
       }},
      {"matmul",
       {{"fp32", "OpenBLAS sgemm"}, {"bf16", report.bf16_matmul}, {"fp16", report.fp16_matmul}}},
      {"mpi", {{"mpirun", report.mpirun_path}, {"version", report.mpirun_version}}},
      {"grpc", report.grpc_version},
      {"protobuf", report.protobuf_version},
      {"cuda",
       {
           {"backend_built", accel.cuda_backend_built},
           {"runtime", accel.cuda_runtime_version},
           {"driver", accel.cuda_driver_version},
           {"cublas", accel.cublas_version},
           {"nccl", accel.nccl_version},
           {"gpus", gpus},
           {"error", accel.error},
       }},
      {"advice", report.advice},
  };
}

std::string to_text(const EnvironmentReport& report) {
  const auto or_none = [](const std::string& s) { return s.empty() ? std::string("-") : s; };
  std::string out;
  out += report.dslaunch_version + "\n\n";
  out += fmt::format("{:<18}{}\n", "host", or_none(report.hostname));
  out += fmt::format("{:<18}{}\n", "os", or_none(report.os));
  out += fmt::format("{:<18}{}\n", "cpu", or_none(report.machine.cpu_model));
  out += fmt::format("{:<18}{} package(s), {} NUMA node(s), {} cores, {} hardware threads\n",
                     "cpu layout", report.machine.packages, report.machine.numa_nodes,
                     report.machine.cores, report.machine.hardware_threads);
  out += fmt::format("{:<18}avx2 {}, avx512f {}, avx512_bf16 {}\n", "cpu features",
                     report.cpu_has_avx2 ? "yes" : "no", report.cpu_has_avx512f ? "yes" : "no",
                     report.cpu_has_avx512_bf16 ? "yes" : "no");
  out += fmt::format("{:<18}{}\n", "memory", gib(report.machine.memory_bytes));
  out += fmt::format("{:<18}{} kernels, {} threads{}\n", "openblas", report.blas.core_name,
                     report.blas.threads,
                     report.blas.coretype_override.empty()
                         ? ""
                         : " (OPENBLAS_CORETYPE=" + report.blas.coretype_override + ")");
  out += fmt::format("{:<18}fp32 OpenBLAS sgemm; bf16 {}; fp16 {}\n", "matrix products",
                     report.bf16_matmul, report.fp16_matmul);
  out += fmt::format("{:<18}{}\n", "mpirun",
                     report.mpirun_path.empty()
                         ? std::string("not found on PATH")
                         : report.mpirun_path + " (" + or_none(report.mpirun_version) + ")");
  out += fmt::format("{:<18}{}\n", "grpc", report.grpc_version);
  out += fmt::format("{:<18}{}\n", "protobuf", report.protobuf_version);

  const auto& accel = report.accelerators;
  if (!accel.cuda_backend_built) {
    out += fmt::format("{:<18}not built in (build with --config=cuda)\n", "cuda backend");
  } else {
    out += fmt::format("{:<18}runtime {}, driver {}, cuBLAS {}, NCCL {}\n", "cuda backend",
                       or_none(accel.cuda_runtime_version), or_none(accel.cuda_driver_version),
                       or_none(accel.cublas_version), or_none(accel.nccl_version));
    if (!accel.error.empty()) out += fmt::format("{:<18}{}\n", "", accel.error);
    for (const kernels::GpuInfo& gpu : accel.gpus) {
      out += fmt::format("{:<18}{} sm_{}{}, {}, {} SMs, kernel {}\n",
                         fmt::format("gpu {}", gpu.index), gpu.name, gpu.compute_capability_major,
                         gpu.compute_capability_minor, gib(gpu.total_memory_bytes),
                         gpu.multiprocessors, gpu.kernel_ran ? "ok" : "FAILED: " + gpu.error);
    }
  }
  if (!report.advice.empty()) {
    out += "\nadvice\n";
    for (const std::string& line : report.advice) out += "  - " + line + "\n";
  }
  return out;
}

}  // namespace dslaunch::launcher
