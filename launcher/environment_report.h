#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/accelerator.h"
#include "kernels/cpu/blas_info.h"
#include "topology/machine_topology.h"

namespace dslaunch::launcher {

// Everything `dslaunch report` prints: what a job would run on here, and
// what stands in its way (like DeepSpeed's ds_report).
struct EnvironmentReport {
  std::string dslaunch_version;  // the --version line
  std::string hostname;
  std::string os;  // uname: system, release, machine
  topology::MachineTopology machine;
  bool cpu_has_avx2 = false;
  bool cpu_has_avx512f = false;
  // AVX512_BF16: bf16 matrix products at about twice fp32's rate (bench/matmul_bench).
  bool cpu_has_avx512_bf16 = false;
  kernels::BlasInfo blas;
  // What runs the engine's matrix products in bf16 and fp16 training here
  // (kernels/cpu/rounded_gemm.h); fp32 always runs on OpenBLAS.
  std::string bf16_matmul;
  std::string fp16_matmul;
  std::string mpirun_path;     // empty when mpirun is not on PATH
  std::string mpirun_version;  // first line of `mpirun --version`
  std::string grpc_version;
  std::string protobuf_version;
  kernels::AcceleratorReport accelerators;
  // Problems a user should fix before training here, each with the fix.
  std::vector<std::string> advice;
};

// Gathers the report. Runs `mpirun --version` as a child process and a probe
// kernel on each GPU (CUDA builds); takes well under a second otherwise.
EnvironmentReport collect_environment_report();

// The advice for this BLAS on this CPU: OpenBLAS falls back to generic SSE
// kernels on CPUs it does not recognise, many times slower than its AVX2 or
// AVX-512 ones. Empty when the kernels match the CPU.
std::vector<std::string> blas_advice(const kernels::BlasInfo& blas, bool cpu_has_avx2,
                                     bool cpu_has_avx512f);

nlohmann::json to_json(const EnvironmentReport& report);
std::string to_text(const EnvironmentReport& report);

}  // namespace dslaunch::launcher
