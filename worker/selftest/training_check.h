#pragma once

// `dslaunch selftest`'s second part: a small GPT trained for a few steps on
// the backend under test and on the CPU backend from the same weights and
// data, in fp32 and in bf16, and the per-step losses compared.

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::selftest {

struct TrainingCheck {
  std::string precision;  // "fp32", "bf16"
  int steps = 0;
  // The largest |device loss - reference loss| / reference loss over the
  // steps; infinite when a run failed (error says why).
  double error = 0;
  double tolerance = 0;
  double device_final_loss = 0;
  double reference_final_loss = 0;
  std::string error_message;
  bool passed() const { return error_message.empty() && error <= tolerance; }
};

// Trains in a fresh directory under `scratch_dir` (removed afterwards) on
// `solo`, a data group of this process alone.
std::vector<TrainingCheck> check_training(kernels::Backend& device, kernels::Backend& reference,
                                          comm::Communicator& solo, int steps,
                                          const std::string& scratch_dir);

}  // namespace dslaunch::worker::selftest
