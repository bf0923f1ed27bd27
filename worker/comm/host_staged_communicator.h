#pragma once

#include <memory>

#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::comm {

// A communicator over buffers in `device`'s memory whose collectives run on
// `host`, a communicator over host memory (MPI's), through staging copies:
// each operation copies what it sends to the host, runs `host`'s collective
// and waits for it, and copies what it received back into device memory
// (only the blocks it received: the rest of an output buffer stays as it
// was). Host memory holds what one operation sends and receives, kept for
// the next. What MPI without CUDA support does for a GPU, and how the
// engine's device-resident data parallelism runs on the CUDA emulator,
// where NCCL cannot.
//
// Every call returns once its operation is complete (a Work already done),
// so nothing overlaps: a collective past `host`'s timeout ends in its
// WaitPolicy (in the worker, a hang report) or in the failed Work. Ranks,
// axis, timeout, statistics and the count of collectives started are
// `host`'s, which counts the bytes. Lone send() and recv() are refused, as
// NCCL's communicator refuses them (an exchange goes through all_to_all), so
// code that runs on one runs on the other. Thread-safe: operations run one
// at a time. `host` and `device` must outlive it; duplicate() and split()
// wrap `host`'s duplicates and splits, which they own.
std::unique_ptr<Communicator> make_host_staged_communicator(Communicator& host,
                                                            kernels::Backend& device);

}  // namespace dslaunch::worker::comm
