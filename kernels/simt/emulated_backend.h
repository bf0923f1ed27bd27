#pragma once

// The CUDA backend's code on the CPU: SimtBackend's kernels run on the
// emulator of CUDA's thread model (emulator.h), the products through CBLAS
// in the same descriptors cuBLAS gets, in host memory. What it does not
// cover is the CUDA runtime itself (memory, launches) and cuBLAS; streams
// it emulates on request (StreamOrder::kDeferred).
// Slow — every GPU thread is a fiber — so for tests that run the engine on
// the CUDA backend's path without a GPU (a few steps of a small model).

#include <cstdint>
#include <functional>
#include <memory>

#include "kernels/backend.h"
#include "kernels/simt/emulator.h"

namespace dslaunch::kernels::simt {

// Where the backend's memory lies: plain host memory, or guarded_memory.h's
// mappings, which the host can touch only inside the backend's own calls
// (and whose copies check that the device side is device memory): for tests
// that code keeps to the backend's rules, as a GPU requires.
enum class DeviceMemory { kHostAccessible, kGuarded };

// When a stream's work runs.
// - kProgram: at once, in the order of the calls (every stream is one).
// - kDeferred: each stream's work waits in its queue until the host needs
//   it: copy_device_to_host() runs the current stream's, synchronize(event)
//   the event's stream up to it, synchronize() and deallocate() (which
//   cudaFree does) every stream's. A stream's wait(event) runs the event's
//   stream up to it when the waiting stream gets there. Sparse memory's
//   released pages go back when the current stream gets to the release
//   (sparse_memory.h), so a stream that still reads them unordered faults. So work that reads
//   another stream's results without waiting for them reads them before
//   they are written, and host code that uses a result before
//   synchronizing uses it before it exists — what a GPU may do, made
//   certain. Guarded memory only (host code cannot see device memory
//   otherwise either); the default stream is as deferred as the others.
// - kEagerDefault: the default stream runs at once, as under kProgram, and
//   every other stream defers as under kDeferred: work on the default
//   stream that reads another stream's results without waiting for them
//   reads them before they are written (under kDeferred the host's waits
//   often run the other stream first and hide it).
enum class StreamOrder { kProgram, kDeferred, kEagerDefault };

std::unique_ptr<Backend> make_emulated_backend(const Schedule& schedule = {},
                                               DeviceMemory memory = DeviceMemory::kHostAccessible,
                                               StreamOrder order = StreamOrder::kProgram);

// The bytes the emulated backend copied between host memory and its own,
// from or into host memory pinned (Backend::pin_host_memory) or not, and
// the ranges pinned now: what a test checks the offload's copies against.
struct HostCopyTally {
  struct Bytes {
    int64_t pinned = 0;
    int64_t pageable = 0;
  };
  Bytes to_device;  // copy_host_to_device()
  Bytes to_host;    // copy_device_to_host()
  int64_t pinned_ranges = 0;
};
// The emulated backend's so far; zeros for another backend.
HostCopyTally host_copy_tally(Backend& backend);

// Makes the emulated backend (guarded memory) refuse a pin that would take
// the host memory it holds pinned past `bytes`, as CUDA's
// cudaHostRegister fails past the limit on locked memory
// (RLIMIT_MEMLOCK): for tests of what the engine does when the driver
// pins less than it asks. Unlimited until called; another backend is left
// as it is.
void limit_pinned_bytes(Backend& backend, int64_t bytes);

// What a library that queues its own work on a GPU's streams (NCCL) does,
// for tests that emulate one on the deferred emulator.
class DeferredStreams {
 public:
  virtual ~DeferredStreams() = default;
  // Queues `host` on `stream` after the work queued on the default stream
  // so far (as NCCL's communicator orders its operations); it runs with the
  // device's memory open to it. The event marks its end.
  virtual std::unique_ptr<Event> enqueue_after_default(Stream& stream,
                                                       std::function<void()> host) = 0;
  // Whether the event's work has run (cudaEventQuery).
  virtual bool done(const Event& event) const = 0;
};

// The emulated backend's, where it defers streams; nullptr otherwise.
DeferredStreams* deferred_streams(Backend& backend);

}  // namespace dslaunch::kernels::simt
