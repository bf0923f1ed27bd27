#pragma once

#include <memory>

#include "core/status.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::comm {

// Whether this build has the NCCL communicator (--config=cuda).
bool nccl_built();

// A communicator over the ranks of `host` (an MPI communicator, which
// bootstraps it: rank 0's ncclUniqueId goes to the others over it) whose
// collectives run through NCCL on buffers in GPU memory, on a CUDA stream of
// its own, for the GPU that is current on the calling thread (the rank's).
// Each operation starts once the work queued on the default stream before
// it is done, and its Work completes when the stream has run it; wait()
// polls, so a peer that never joins is reported at the host communicator's
// timeout, as MPI's are; a failure or a deadline sticks, and the
// communicator is then aborted rather than destroyed. Its axis is the
// host's with "/nccl" after it; its ranks and timeout are the host's. Lone
// send() and recv() are refused (one NCCL stream would hold a send until
// its receive runs: exchange through all_to_all), and then()'s function
// runs on CUDA's thread, where it must not call CUDA. device_stream() is
// its stream, where callers queue kernels between its operations. Heartbeats count its
// collectives once it is attached to the process's Transport
// (Transport::attach; the trainer does so).
// Collective over `host`, which must outlive the result (duplicate() and
// split() make NCCL communicators over the host's duplicates and splits).
// kFailedPrecondition in a build without NCCL.
core::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator& host);

}  // namespace dslaunch::worker::comm
