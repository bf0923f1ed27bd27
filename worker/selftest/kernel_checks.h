#pragma once

// `dslaunch selftest`'s first part: every kernel of kernels/backend.h run on
// the backend under test and on the CPU backend with the same random inputs,
// in each precision the kernel has, and the results compared.

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace dslaunch::worker::selftest {

struct KernelCheck {
  std::string kernel;     // "matmul_backward"
  std::string precision;  // "fp32", "bf16 products", "fp16 copy", ...
  // max |device - reference| over the largest |reference|, the worst of the
  // kernel's outputs; infinite when an output has a NaN or the sizes differ.
  double error = 0;
  double tolerance = 0;
  bool passed() const { return error <= tolerance; }
};

// Runs every check; the backends are left at fp32 products.
std::vector<KernelCheck> check_kernels(kernels::Backend& device, kernels::Backend& reference,
                                       uint32_t seed);

}  // namespace dslaunch::worker::selftest
