#pragma once

#include <cstdint>
#include <optional>

#include "core/spec/job_spec.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker {

// Applies the spec's testing.fault when it strikes this rank in this attempt
// (DSL_RESTART_COUNT) as `step` begins: exit and abort end the process, hang
// stops it (SIGSTOP: its heartbeats stop too), stall_step blocks the calling
// thread for good while the heartbeat thread goes on, stall_collective lets
// the step run until it starts its first collective (on `transport`), where
// it blocks for good the same way, slow sleeps before this step and every
// later one, and nan_gradient only says so (poisons_gradients). Call on the
// training thread as each step begins; returns at
// once when no fault applies.
void inject_fault(const std::optional<spec::FaultSpec>& fault, int rank, int attempt,
                  int64_t step, comm::Transport& transport);

// Whether the fault is nan_gradient striking this rank in this attempt at
// `step`: its gradients of that step are to be NaN (the trainer's
// TrainerOptions::poison_gradients).
bool poisons_gradients(const std::optional<spec::FaultSpec>& fault, int rank, int attempt,
                       int64_t step);

}  // namespace dslaunch::worker
