#pragma once

#include <functional>
#include <optional>
#include <string>

#include "core/spec/job_spec.h"
#include "proto/controller_client.h"
#include "worker/comm/process_groups.h"
#include "worker/engine/trainer.h"

namespace dslaunch::worker {

// What the training workload needs from the rank around it.
struct TrainWorkloadContext {
  const spec::JobSpec* spec = nullptr;
  const comm::ProcessGroups* groups = nullptr;
  spec::BatchSizes batch;  // the plan's, from the registration
  proto::Session* session = nullptr;
  std::string job_directory;  // where the final weights go (weights/model.safetensors)
  // Where checkpoints go: <checkpoint_directory>/step_<8 digits>/rank_<r>.bin.
  std::string checkpoint_directory;
  std::optional<engine::ResumePoint> resume;   // unset: start at step 0
  std::function<bool()> checkpoint_requested;  // consumed: true once per request
  int compute_threads = 1;
  int gpu = 0;  // the plan's GPU index for this rank (device cuda:<index>)
  std::function<bool()> stop_requested;
  // Why it stopped: the signal's name ("SIGUSR1", "SIGTERM") when a signal
  // asked for it, "" for the controller's stop.
  std::function<std::string()> stop_reason;
  std::function<void(int64_t)> on_step_started;
  std::function<bool(int64_t)> poison_gradients;                // TrainerOptions::poison_gradients
  std::function<void(const engine::StepReport&)> on_step_done;  // on every rank
  std::function<void(const engine::MemoryReport&)> on_memory;
  // Training is over and the rank waits for its last checkpoint's write.
  std::function<void()> on_writing_checkpoint;
};

// `kind: train`: trains the spec's model with data parallelism over the data
// group. Data-parallel rank 0 of the first model replica reports every
// step's metrics to the controller (and prints them), and writes the final
// weights as Hugging Face GPT-2 safetensors with a config.json. Every rank
// writes its shard of each checkpoint in the background and reports it
// (KIND_CHECKPOINT_WRITTEN) once it is durable; a run stopped on request
// waits for its checkpoint and reports KIND_STOPPED. Errors go to the
// controller as an error event and to stderr. Returns 0 when training ended
// (all steps, or stopped on request) and 1 when it failed.
int run_train_workload(const TrainWorkloadContext& context);

}  // namespace dslaunch::worker
