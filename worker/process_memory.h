#pragma once

#include <cstdint>

namespace dslaunch::worker {

// This process's resident memory as the kernel counts it (everything: model
// states, activations, buffers, libraries), in bytes: now (/proc/self/statm)
// and at its peak so far (getrusage's ru_maxrss). 0 where unreadable.
int64_t resident_bytes();
int64_t peak_resident_bytes();

}  // namespace dslaunch::worker
