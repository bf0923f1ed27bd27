#pragma once

#include <cstdint>
#include <string>

namespace dslaunch::worker {

struct SelftestOptions {
  // "cuda" (the rank's first visible GPU) or "emulated" (the CUDA kernels'
  // code on the CPU emulator of CUDA's thread model, for any machine, in
  // memory the host can touch only through the backend).
  std::string device = "cuda";
  int steps = 20;  // of each training comparison, at least 1
  uint32_t seed = 1;
  bool json = false;
  int threads = 0;  // the CPU reference's compute threads; 0: every core
};

// `dsworker selftest`, which `dslaunch selftest` runs: every kernel on the
// device against the CPU backend in each precision, a short training run on
// both in fp32 and bf16, and a table of the largest errors with pass or fail
// (JSON with --json). Exit status 0 when every check passed, 1 when one
// failed, 2 when the device cannot be used (not built, no GPU).
int run_selftest_command(const SelftestOptions& options);

}  // namespace dslaunch::worker
