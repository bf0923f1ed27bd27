#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::worker {

struct SelftestOptions {
  // "cuda" (the first visible GPU; under mpirun, srun or torchrun the one
  // of the rank's local index) or "emulated" (the CUDA kernels' code on the
  // CPU emulator of CUDA's thread model, for any machine, in memory the
  // host can touch only through the backend).
  std::string device = "cuda";
  int steps = 20;  // of each training comparison, at least 1
  uint32_t seed = 1;
  bool json = false;
  // The CPU reference's compute threads; 0: OMP_NUM_THREADS, else the
  // rank's share of the cores.
  int threads = 0;
};

// `dsworker selftest`, which `dslaunch selftest` runs: every kernel on the
// device against the CPU backend in each precision, a short training run on
// both in fp32 and bf16, and a table of the largest errors with pass or fail
// (JSON with --json). Started by mpirun (srun, torchrun) as several ranks,
// each checks its own GPU, the engine's comparison trains over all of them
// as one data group (averaging through NCCL on GPUs), NCCL's collectives
// run over all of them, and rank 0 prints its table with every rank's count
// of failed checks. Exit status 0 when every check passed on every rank, 1
// when one failed, 2 when the device cannot be used (not built, no GPU).
int run_selftest_command(const SelftestOptions& options);

}  // namespace dslaunch::worker
