#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/plan/local_machine.h"
#include "launcher/plan/memory_estimate.h"
#include "launcher/plan/workspace_estimate.h"
#include "core/spec/diagnostics.h"
#include "core/spec/job_spec.h"
#include "topology/host_filter.h"
#include "topology/placement.h"
#include "topology/process_grid.h"

namespace dslaunch::plan {

// What planning reads besides the spec; injectable so tests control it.
struct PlanInputs {
  LocalMachine machine;
  std::function<const char*(const char*)> getenv;  // for SLURM_* variables
};

// The checked plan of a job: which hosts and slots it uses, the resolved
// batch sizes, the process grid, where every rank runs, and what each rank
// holds in memory. Computed once by make_plan.
struct JobPlan {
  spec::Device device = spec::Device::kCuda;  // cpu or cuda, never auto
  // For cluster.device: auto, what it chose and why (DeviceChoice::reason).
  std::string device_choice;
  std::vector<topology::HostSlots> hosts;  // after filters, hostfile order
  spec::BatchSizes batch;                  // all 0 for a commbench
  // With training.elasticity: the data-parallel sizes its batch suits.
  std::vector<int64_t> elastic_data_sizes;

  topology::ProcessGrid grid{topology::GridShape{}};
  topology::Placement placement;
  std::vector<ModelStateBytes> memory_by_stage;  // index: pipeline stage; empty for a commbench
  // Per stage, its model chunks' blocks [begin, end) (several with
  // parallelism.virtual_stages); empty likewise.
  std::vector<std::vector<std::pair<int, int>>> stage_layers;
  std::vector<int64_t> activation_bytes_by_stage;  // per rank; empty likewise
  std::vector<WorkspaceBytes> workspace_by_stage;  // per rank; empty likewise
  // Training on GPUs as it runs today (spec::device_training_problem
  // accepts the job), counted by mirrored_state_bytes: without
  // offload_optimizer every model state on the GPU (with partial offload,
  // but for a share of the optimizer's states); with it the model
  // states and ZeRO's buffers in host memory, and on the GPU the model's
  // mirror. The activations are on the GPU either way.
  bool host_model_states = false;
  // The latter: ZeRO's workspaces and buffers are the host state's.
  bool workspace_in_host_memory = false;
  int64_t device_memory_bytes = 0;               // per rank; 0 when unknown
  int64_t padded_vocab_size = 0;
  int64_t total_parameters = 0;
  std::vector<std::string> warnings;
  // Every host is this machine (or its loopback names): what the local
  // runner can start.
  bool all_hosts_local = true;

  int world_size() const { return grid.world_size(); }
  // What of pipeline stage `stage`'s workspace is in the device's memory:
  // all of it on the CPU engine and with the model states on a GPU (ZeRO
  // stage 3's gathered parameters there), none where the model states are
  // in host memory (workspace_in_host_memory).
  int64_t workspace_on_device(size_t stage) const;
  // Precondition: memory_by_stage is not empty (a training job).
  const ModelStateBytes& memory_of_rank(int rank) const {
    return memory_by_stage[grid.coord_of(rank).pipeline];
  }
};

// Plans `spec` (already loaded without errors): finds the hosts (hostfile,
// inline hosts, the Slurm allocation unless the runner is local, or this
// machine), applies the filters, checks the world size against tensor x
// pipeline, resolves the batch sizes as DeepSpeed does, places the ranks and
// estimates their memory. cluster.device: auto is decided first
// (choose_device, from this machine's GPUs). Every
// problem goes to `diagnostics` with the location of the key it concerns;
// std::nullopt when there was any.
std::optional<JobPlan> make_plan(const spec::JobSpec& spec, const spec::SourceMap& locations,
                                 const PlanInputs& inputs, spec::Diagnostics& diagnostics);

}  // namespace dslaunch::plan
