#pragma once

// `dslaunch selftest`'s third part: what a training job runs on the device.
// The engine trains a small GPT the way a one-rank GPU job does — the model
// on the device, ZeRO stage 2, two micro-batches a step, gradient clipping,
// a vocabulary-wide evaluation at the end — with the optimizer on the device
// (every model state there: worker/engine/device_model_state.cc) and
// offloaded (the states in host memory on a CPU backend, the model on a
// mirror: ZeRO-Offload), and the CPU engine trains it alone, from the same
// spec and tokens; the step losses, the final evaluation loss and the final
// parameters are compared, in fp32 and in bf16. Over several data ranks
// (dslaunch selftest under mpirun) both average over the data group, the
// device's run on the device (through NCCL where asked), and each rank
// compares its part of the parameters; every rank then reports the
// group's worst.

#include <string>
#include <vector>

#include "kernels/backend.h"
#include "worker/comm/communicator.h"

namespace dslaunch::worker::selftest {

struct EngineCheck {
  std::string precision;  // "fp32", "bf16"
  std::string optimizer;  // "GPU Adam" (no offload), "ZeRO-Offload" (offload_optimizer cpu)
  int steps = 0;
  // The largest |device - reference| / reference over the step losses and
  // the final evaluation loss (infinite for a NaN).
  double error = 0;
  double tolerance = 0;
  // The largest |device - reference| over the final parameters, over the
  // largest |reference| (infinite for a NaN).
  double parameter_error = 0;
  double parameter_tolerance = 0;
  double device_eval_loss = 0;
  double reference_eval_loss = 0;
  std::string failure;  // why a run stopped; "" when both ran
  bool losses_passed() const { return failure.empty() && error <= tolerance; }
  bool parameters_passed() const {
    return failure.empty() && parameter_error <= parameter_tolerance;
  }
  bool passed() const { return losses_passed() && parameters_passed(); }
};

// `device` must be a backend whose memory is not the host's (a GPU, or the
// emulator's guarded memory); `cpu` a CPU backend, which runs the reference
// and, in the device's offloaded run, the model states' math; `data_comm`
// the data group (MPI's), collective over it; `nccl`: the device's run
// averages its gradients over an NCCL communicator made from it (on GPUs),
// else through host staging.
std::vector<EngineCheck> check_engine(kernels::Backend& device, kernels::Backend& cpu,
                                      comm::Communicator& data_comm, int steps, bool nccl = false);

}  // namespace dslaunch::worker::selftest
