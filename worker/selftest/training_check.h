#pragma once

// `dslaunch selftest`'s second part: a small GPT trained for a few steps on
// the backend under test and on the CPU backend from the same weights and
// tokens, in fp32 and in bf16, and the per-step losses compared. The loop
// is the model's forward and backward, the gradient's global norm and
// clipping, and AdamW, with every buffer in the backend's memory: what a
// training step asks of a device, without the engine's communication.

#include <string>
#include <vector>

#include "kernels/backend.h"

namespace dslaunch::worker::selftest {

struct TrainingCheck {
  std::string precision;  // "fp32", "bf16"
  int steps = 0;
  // The largest |device loss - reference loss| / reference loss over the
  // steps (infinite for a NaN).
  double error = 0;
  double tolerance = 0;
  double device_final_loss = 0;
  double reference_final_loss = 0;
  bool passed() const { return error <= tolerance; }
};

std::vector<TrainingCheck> check_training(kernels::Backend& device, kernels::Backend& reference,
                                          int steps);

}  // namespace dslaunch::worker::selftest
