#pragma once

// Runs the kernels of kernels/simt on the CUDA thread-model emulator, for
// tests that hold them against the CPU backend.

#include "kernels/simt/emulator.h"

namespace dslaunch::kernels::testing {

// One launch of `kernel` with the shape it asks for.
template <class Kernel>
void emulate(const Kernel& kernel, const simt::Schedule& schedule = {}) {
  simt::emulate_launch(kernel.shape(), schedule, [&](simt::EmulatedThread& t) { kernel(t); });
}

}  // namespace dslaunch::kernels::testing
