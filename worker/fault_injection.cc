#include "worker/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <spdlog/spdlog.h>

namespace dslaunch::worker {
namespace {

const char* name_of(spec::FaultKind kind) {
  switch (kind) {
    case spec::FaultKind::kExit:
      return "exit";
    case spec::FaultKind::kAbort:
      return "abort";
    case spec::FaultKind::kHang:
      return "hang";
    case spec::FaultKind::kStallStep:
      return "stall_step";
    case spec::FaultKind::kSlow:
      return "slow";
    case spec::FaultKind::kStallCollective:
      return "stall_collective";
    case spec::FaultKind::kNanGradient:
      return "nan_gradient";
  }
  return "unknown";
}

}  // namespace

void inject_fault(const std::optional<spec::FaultSpec>& fault, int rank, int attempt,
                  int64_t step, comm::Transport& transport) {
  if (!fault || fault->rank != rank || fault->attempt != attempt) return;
  const bool slow = fault->kind == spec::FaultKind::kSlow;
  if (step != fault->step && !(slow && step > fault->step)) return;
  if (slow) {
    std::this_thread::sleep_for(std::chrono::duration<double>(fault->seconds));
    return;
  }
  // The last line of stderr is what the root cause shows of a rank that died
  // (the logger writes each line through at once).
  spdlog::error("testing.fault {} injected at step {}", name_of(fault->kind), step);
  switch (fault->kind) {
    case spec::FaultKind::kExit:
      _exit(1);
    case spec::FaultKind::kAbort:
      std::abort();
    case spec::FaultKind::kHang:
      raise(SIGSTOP);
      return;
    case spec::FaultKind::kStallStep:
      // pause() returns after each handled signal (a stack dump request).
      while (true) pause();
    case spec::FaultKind::kStallCollective:
      transport.stall_from_next_collective();
      return;
    case spec::FaultKind::kSlow:
    case spec::FaultKind::kNanGradient:  // the trainer poisons the gradients (poisons_gradients)
      return;
  }
}

bool poisons_gradients(const std::optional<spec::FaultSpec>& fault, int rank, int attempt,
                       int64_t step) {
  return fault && fault->kind == spec::FaultKind::kNanGradient && fault->rank == rank &&
         fault->attempt == attempt && fault->step == step;
}

}  // namespace dslaunch::worker
