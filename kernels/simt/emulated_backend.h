#pragma once

// The CUDA backend's code on the CPU: SimtBackend's kernels run on the
// emulator of CUDA's thread model (emulator.h), the products through CBLAS
// in the same descriptors cuBLAS gets, in host memory. What it does not
// cover is the CUDA runtime itself (memory, streams, launches) and cuBLAS.
// Slow — every GPU thread is a fiber — so for tests that run the engine on
// the CUDA backend's path without a GPU (a few steps of a small model).

#include <memory>

#include "kernels/backend.h"
#include "kernels/simt/emulator.h"

namespace dslaunch::kernels::simt {

// Where the backend's memory lies: plain host memory, or guarded_memory.h's
// mappings, which the host can touch only inside the backend's own calls
// (and whose copies check that the device side is device memory): for tests
// that code keeps to the backend's rules, as a GPU requires.
enum class DeviceMemory { kHostAccessible, kGuarded };

std::unique_ptr<Backend> make_emulated_backend(const Schedule& schedule = {},
                                               DeviceMemory memory = DeviceMemory::kHostAccessible);

}  // namespace dslaunch::kernels::simt
