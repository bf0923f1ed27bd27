#pragma once

#include <string>

#include "core/spec/job_spec.h"

namespace dslaunch::spec {

// "" when this engine can train `spec` as written, otherwise what it cannot
// do yet and what to change. `dslaunch run` checks it before starting any
// rank; the worker checks it again.
std::string training_support_problem(const spec::JobSpec& spec);

// "" when the engine can train `spec` on a GPU (a backend whose memory is
// not the host's), otherwise what that path lacks so far: Adam or AdamW at
// ZeRO stages 0-3, with every model state on the GPU (the data group
// averaging there through NCCL), the optimizer's states offloaded whole
// (ZeRO-Offload: the model states in host memory, averaged over MPI there),
// or a share of them (partial_optimizer_offload()).
std::string device_training_problem(const spec::JobSpec& spec);

// offload_optimizer device cpu with a ratio below 1 (DeepSpeed's partial
// offload): on GPUs every model state stays there but for that share of the
// optimizer's, whose masters and moments CPU Adam updates in host memory.
inline bool partial_optimizer_offload(const spec::ZeroSpec& zero) {
  return zero.offload_optimizer.device == spec::OffloadDevice::kCpu &&
         zero.offload_optimizer.ratio < 1;
}

// Whether this build trains on CUDA devices (cluster.device: auto picks
// cuda only then).
bool cuda_training_built();

}  // namespace dslaunch::spec
