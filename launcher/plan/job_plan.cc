#include "launcher/plan/job_plan.h"

#include "core/layout/pipeline_partition.h"

#include <unistd.h>

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/spec/elasticity.h"
#include "core/spec/text_file.h"
#include "core/spec/training_support.h"
#include "launcher/plan/device_choice.h"
#include "topology/hostfile.h"
#include "topology/slurm_nodelist.h"

namespace dslaunch::plan {
namespace {

using spec::Location;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// The hosts the job may use, before filters, from the first source that has
// them: hostfile, inline hosts, the Slurm allocation, this machine.
std::optional<std::vector<topology::HostfileEntry>> host_entries(const spec::JobSpec& spec,
                                                                 const spec::SourceMap& locations,
                                                                 const PlanInputs& inputs,
                                                                 spec::Diagnostics& diagnostics) {
  const spec::ClusterSpec& cluster = spec.cluster;
  if (!cluster.hostfile.empty()) {
    std::string error;
    const std::optional<std::string> text =
        spec::read_text_file(cluster.hostfile, "hostfile", error);
    if (!text) {
      diagnostics.error(locations.find("cluster.hostfile"), error);
      return std::nullopt;
    }
    topology::ParsedHostfile parsed = topology::parse_hostfile(*text);
    for (const topology::LineError& error : parsed.errors) {
      diagnostics.error(Location{cluster.hostfile, error.line, 0, ""}, error.message);
    }
    if (!parsed.errors.empty()) return std::nullopt;
    return parsed.hosts;
  }
  if (!cluster.hosts.empty()) {
    // The spec parser has checked the names, counts and duplicates.
    std::vector<topology::HostfileEntry> entries;
    for (const spec::InlineHost& host : cluster.hosts) {
      entries.push_back({host.host, host.slots, host.line});
    }
    return entries;
  }
  // A local runner starts ranks on this machine only, so a Slurm allocation
  // around it does not name its hosts (DeepSpeed's launcher without a
  // hostfile also runs on localhost).
  std::optional<topology::SlurmHosts> slurm;
  if (cluster.runner != spec::Runner::kLocal) {
    slurm = topology::hosts_from_slurm_environment(inputs.getenv);
  }
  if (slurm) {
    if (!slurm->error.empty()) {
      diagnostics.error(locations.find("cluster.runner"), "Slurm allocation: " + slurm->error);
      return std::nullopt;
    }
    // One rank per GPU: a node cannot run more CUDA ranks than Slurm gave it
    // GPUs (--gpus-per-node).
    for (const topology::HostfileEntry& host : slurm->hosts) {
      if (cluster.device != spec::Device::kCuda || slurm->gpus_per_node == 0 ||
          host.slots <= slurm->gpus_per_node) {
        continue;
      }
      diagnostics.error(locations.find("cluster.runner"),
                        fmt::format("Slurm allocation: node {} runs {} tasks but has {} GPU(s) "
                                    "(SLURM_GPUS_ON_NODE); a CUDA job runs one rank per GPU, so "
                                    "ask for as many GPUs as tasks per node (--gpus-per-node)",
                                    host.host, host.slots, slurm->gpus_per_node));
      return std::nullopt;
    }
    return slurm->hosts;
  }
  if (cluster.runner == spec::Runner::kSlurm) {
    diagnostics.error(locations.find("cluster.runner"),
                      "runner slurm needs a Slurm allocation (SLURM_JOB_NODELIST is not set): "
                      "run inside salloc or sbatch, or give cluster.hostfile");
    return std::nullopt;
  }
  if (cluster.runner == spec::Runner::kOpenMpi) {
    diagnostics.error(locations.find("cluster.runner"),
                      "runner openmpi needs the hosts: give cluster.hostfile (or --hostfile) "
                      "or cluster.hosts");
    return std::nullopt;
  }
  // This machine alone: num_gpus ranks, else every GPU, else one CPU rank
  // (as torchrun's --nproc-per-node defaults to 1).
  int slots = cluster.num_gpus;
  const int gpus = inputs.machine.gpus;
  if (cluster.device == spec::Device::kCuda && gpus > 0 && slots > gpus) {
    diagnostics.error(locations.find("cluster.num_gpus"),
                      fmt::format("cluster.num_gpus is {} but this machine has {} GPU(s); a local "
                                  "job runs on this machine only",
                                  slots, gpus));
    return std::nullopt;
  }
  if (slots < 1) slots = cluster.device == spec::Device::kCuda ? gpus : 1;
  if (slots < 1) {
    diagnostics.error(locations.find("cluster.device"),
                      "cluster.device is cuda but this machine shows no GPUs (nvidia-smi found "
                      "none): set cluster.device: cpu, or cluster.num_gpus for the ranks to start");
    return std::nullopt;
  }
  return std::vector<topology::HostfileEntry>{{"localhost", slots, 0}};
}

// The key a resource-selection error is about: select_resources starts its
// messages with the filter's name ("include: ...", "num_gpus is ...").
Location filter_location(const std::string& error, const spec::ClusterSpec& cluster,
                         const spec::SourceMap& locations) {
  for (const char* key : {"include", "exclude", "num_nodes", "num_gpus"}) {
    if (error.starts_with(key)) return locations.find(std::string("cluster.") + key);
  }
  if (!cluster.include.empty()) return locations.find("cluster.include");
  if (!cluster.exclude.empty()) return locations.find("cluster.exclude");
  if (cluster.num_nodes != -1) return locations.find("cluster.num_nodes");
  if (cluster.num_gpus != -1) return locations.find("cluster.num_gpus");
  return locations.find("cluster");
}

topology::HostTopology host_topology(const spec::JobSpec& spec, const LocalMachine& machine) {
  const spec::TopologyHint& hint = spec.cluster.topology;
  topology::HostTopology topo;
  topo.cores = hint.cores_per_host > 0 ? hint.cores_per_host : machine.cores;
  topo.numa_nodes = hint.numa_nodes_per_host > 0 ? hint.numa_nodes_per_host : machine.numa_nodes;
  if (!hint.gpu_islands.empty()) {
    topo.gpu_islands = hint.gpu_islands;
  } else if (machine.gpu_topology.error.empty()) {
    topo.gpu_islands = machine.gpu_topology.islands;
    // This machine's GPU NUMA nodes only describe hosts with its NUMA layout,
    // not one the hint gives.
    if (hint.numa_nodes_per_host <= 0) {
      topo.gpu_numa_node = machine.gpu_topology.numa_node;
      // nvidia-smi prints N/A (-1) for the NUMA node on single-node machines.
      for (int& node : topo.gpu_numa_node) node = std::max(node, 0);
    }
  }
  return topo;
}

// Bytes a rank may use for model states: the hint, else the local GPU's
// memory, else (CPU ranks) this machine's memory shared by the ranks of the
// busiest host. 0 when unknown.
int64_t device_memory(const spec::JobSpec& spec, const LocalMachine& machine,
                      const topology::Placement& placement) {
  if (spec.cluster.topology.device_memory_gb > 0) {
    return static_cast<int64_t>(spec.cluster.topology.device_memory_gb * kGiB);
  }
  if (spec.cluster.device == spec::Device::kCuda) return machine.gpu_memory_bytes;
  int busiest = 1;
  for (const topology::RankPlacement& rank : placement.ranks) {
    busiest = std::max(busiest, rank.local_world_size);
  }
  return machine.memory_bytes / busiest;
}

// Remote hosts are described by the spec's topology hint, else assumed to be
// like this machine; say so when that assumption is made, since a login node
// often differs from the compute nodes.
void add_assumed_topology_warning(const spec::JobSpec& spec, JobPlan& plan) {
  const bool remote =
      std::any_of(plan.hosts.begin(), plan.hosts.end(),
                  [](const topology::HostSlots& h) { return h.host != "localhost"; });
  const spec::TopologyHint& hint = spec.cluster.topology;
  std::vector<std::string> assumed;
  if (hint.cores_per_host == 0) assumed.push_back("cores_per_host");
  if (hint.numa_nodes_per_host == 0) assumed.push_back("numa_nodes_per_host");
  if (spec.cluster.device == spec::Device::kCuda) {
    if (hint.gpu_islands.empty()) assumed.push_back("gpu_islands");
    if (hint.device_memory_gb == 0) assumed.push_back("device_memory_gb");
  }
  if (!remote || assumed.empty()) return;
  plan.warnings.push_back(fmt::format(
      "the hosts' insides are assumed to be like this machine's for cluster.topology.{}; set "
      "them in the spec if the hosts differ",
      fmt::join(assumed, ", cluster.topology.")));
}

bool is_this_machine(const std::string& host) {
  std::array<char, 256> name{};
  gethostname(name.data(), name.size() - 1);
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == name.data();
}

// The local runner starts mpirun on this machine only: hosts elsewhere would
// not get their ranks.
void add_local_runner_warning(const spec::JobSpec& spec, JobPlan& plan) {
  if (spec.cluster.runner != spec::Runner::kLocal) return;
  for (const topology::HostSlots& host : plan.hosts) {
    if (is_this_machine(host.host)) continue;
    plan.warnings.push_back(fmt::format(
        "runner local starts ranks on this machine only, but the hosts include '{}': set "
        "cluster.runner to openmpi (mpirun over ssh) or slurm to run there",
        host.host));
    return;
  }
}

// Without TLS the token and every message cross the network in clear text:
// anyone on the path can read the token and then act as the job's ranks.
void add_plaintext_control_plane_warning(const spec::JobSpec& spec, JobPlan& plan) {
  if (plan.hosts.size() < 2 || spec.cluster.tls.enabled()) return;
  plan.warnings.push_back(
      "the control plane is plaintext: the job token and every controller message cross the "
      "network unencrypted between the hosts; set cluster.tls (cert, key, ca) to encrypt them");
}

// ZeRO-Offload's limit is the host's memory: on the GPU path the model
// states and ZeRO's buffers of every rank of a host share it.
void add_host_memory_warnings(const LocalMachine& machine, JobPlan& plan) {
  if (!plan.host_model_states || machine.memory_bytes == 0) return;
  int busiest = 1;
  for (const topology::RankPlacement& rank : plan.placement.ranks) {
    busiest = std::max(busiest, rank.local_world_size);
  }
  const int64_t share = machine.memory_bytes / busiest;
  for (size_t stage = 0; stage < plan.memory_by_stage.size(); ++stage) {
    // With the optimizer on the GPU nothing is here.
    const ModelStateBytes& bytes = plan.memory_by_stage[stage];
    if (bytes.offloaded_to_host == 0 && bytes.offloaded_to_nvme == 0) continue;
    const int64_t need =
        bytes.offloaded_to_host +
        (plan.workspace_in_host_memory ? plan.workspace_by_stage[stage].total() : 0);
    if (need <= share) continue;
    plan.warnings.push_back(fmt::format(
        "pipeline stage {}: the model states and ZeRO's buffers in host memory need {:.2f} GiB "
        "per rank, more than the {:.2f} GiB each of a host's {} ranks has of its memory (this "
        "machine's); use offload_optimizer nvme, more hosts, or fewer ranks per host",
        stage, need / kGiB, share / kGiB, busiest));
  }
}

void add_memory_warnings(const spec::JobSpec& spec, JobPlan& plan) {
  if (plan.device_memory_bytes == 0) {
    plan.warnings.push_back(
        spec.cluster.device == spec::Device::kCuda
            ? "GPU memory is unknown here (no nvidia-smi): set cluster.topology.device_memory_gb "
              "to check that model states fit"
            : "host memory is unknown here: set cluster.topology.device_memory_gb to check that "
              "model states fit");
    return;
  }
  for (size_t stage = 0; stage < plan.memory_by_stage.size(); ++stage) {
    // On the GPU path ZeRO's buffers are in host memory with the model states.
    const int64_t need = plan.memory_by_stage[stage].device_total() +
                         plan.activation_bytes_by_stage[stage] + plan.workspace_on_device(stage);
    if (need <= plan.device_memory_bytes) continue;
    if (plan.host_model_states) {
      // The GPU holds the model's fp32 parameters and gradients (8 bytes a
      // parameter at stages 0-2), the activations, and without offload the
      // optimizer's states and the gradient reduction's buffers.
      const ModelStateBytes& bytes = plan.memory_by_stage[stage];
      const bool optimizer_on_gpu = bytes.optimizer_states > 0;
      // Over several data ranks stage 1 partitions the optimizer's states,
      // stage 2 the gradients too, stage 3 the parameters too.
      const int zero_stage = spec.training.zero.stage;
      const bool partitions_more = zero_stage != 3 && plan.grid.shape().data > 1;
      std::string remedies;
      if (optimizer_on_gpu) {
        remedies += spec::partial_optimizer_offload(spec.training.zero)
                        ? fmt::format("raise offload_optimizer.ratio ({}), ",
                                      spec.training.zero.offload_optimizer.ratio)
                        : std::string("offload the optimizer (offload_optimizer device cpu), ");
      }
      if (optimizer_on_gpu && partitions_more) {
        remedies += fmt::format("raise zero_optimization.stage ({}) up to 3, ", zero_stage);
      }
      if (bytes.communication_buffers > 0) {
        remedies += fmt::format(
            "lower zero_optimization.reduce_bucket_size (its buffers take "
            "{:.2f} GiB), ",
            bytes.communication_buffers / kGiB);
      }
      plan.warnings.push_back(fmt::format(
          "pipeline stage {}: the model's fp32 parameters and gradients{}{} and the activations "
          "need {:.2f} GiB per rank, more than the {:.2f} GiB a GPU has; {}checkpoint "
          "activations, or split the model over more tensor or pipeline ranks",
          stage, optimizer_on_gpu ? ", the optimizer's states" : "",
          bytes.communication_buffers > 0 ? ", the gradient reduction's buffers" : "", need / kGiB,
          plan.device_memory_bytes / kGiB, remedies));
      continue;
    }
    plan.warnings.push_back(fmt::format(
        "pipeline stage {}: model states, activations and ZeRO's buffers need {:.2f} GiB per "
        "rank, more than the {:.2f} GiB {} "
        "has (ZeRO stage {}); raise zero_optimization.stage, offload, checkpoint activations, or "
        "use more ranks",
        stage, need / kGiB, plan.device_memory_bytes / kGiB,
        spec.cluster.device == spec::Device::kCuda ? "a GPU" : "a rank's share of the host",
        spec.training.zero.stage));
  }
}

// make_plan for a spec whose device is cpu or cuda.
std::optional<JobPlan> plan_on_device(const spec::JobSpec& spec, const spec::SourceMap& locations,
                                      const PlanInputs& inputs, spec::Diagnostics& diagnostics) {
  const auto entries = host_entries(spec, locations, inputs, diagnostics);
  if (!entries) return std::nullopt;
  const spec::ClusterSpec& cluster = spec.cluster;
  topology::ResourceSelection selection = topology::select_resources(
      *entries, cluster.include, cluster.exclude, cluster.num_nodes, cluster.num_gpus);
  for (const std::string& error : selection.errors) {
    diagnostics.error(filter_location(error, cluster, locations), error);
  }
  if (!selection.errors.empty()) return std::nullopt;

  JobPlan plan;
  plan.device = cluster.device;
  plan.hosts = std::move(selection.hosts);
  int64_t world = 0;
  for (const topology::HostSlots& host : plan.hosts) world += host.slots.size();

  const int tensor = spec.parallelism.tensor;
  const int pipeline = spec.parallelism.pipeline;
  if (world % (static_cast<int64_t>(tensor) * pipeline) != 0) {
    diagnostics.error(
        locations.find(tensor > 1 ? "parallelism.tensor" : "parallelism.pipeline"),
        fmt::format("world size {} ({} host(s)) is not divisible by tensor {} x pipeline {} = {}; "
                    "change the parallel sizes or the hosts and slots",
                    world, plan.hosts.size(), tensor, pipeline,
                    static_cast<int64_t>(tensor) * pipeline));
    return std::nullopt;
  }
  const int data = static_cast<int>(world / (static_cast<int64_t>(tensor) * pipeline));
  if (spec.testing.fault && spec.testing.fault->rank >= world) {
    diagnostics.error(locations.find("testing.fault.rank"),
                      fmt::format("testing.fault.rank {} is not a rank of this job: its ranks are "
                                  "0..{}",
                                  spec.testing.fault->rank, world - 1));
    return std::nullopt;
  }

  const bool training = spec.kind == spec::JobKind::kTrain;
  if (training) {
    const spec::BatchInput& batch = spec.training.batch;
    const spec::BatchResolution resolution =
        spec::training_batch_sizes(spec.training, static_cast<int>(world), tensor * pipeline);
    if (!resolution.sizes) {
      diagnostics.error(
          locations.find(spec.training.elasticity.enabled ? "training.elasticity"
                         : batch.train_batch_size         ? "training.train_batch_size"
                         : batch.micro_batch_per_gpu ? "training.train_micro_batch_size_per_gpu"
                                                     : "training"),
          resolution.error);
      return std::nullopt;
    }
    plan.batch = *resolution.sizes;
    if (spec.training.elasticity.enabled) {
      plan.elastic_data_sizes =
          spec::elastic_batch(spec.training.elasticity, static_cast<int>(world), tensor * pipeline)
              .valid_data_parallel_sizes;
    }
    if (pipeline > 1 && plan.batch.gradient_accumulation_steps < pipeline) {
      diagnostics.error(
          locations.find("parallelism.pipeline"),
          fmt::format("pipeline parallelism over {} stages needs at least {} micro-batches per "
                      "step, and gradient_accumulation_steps is {} (train_batch_size {} = "
                      "micro-batch {} x accumulation {} x data-parallel {}); raise "
                      "train_batch_size or lower train_micro_batch_size_per_gpu",
                      pipeline, pipeline, plan.batch.gradient_accumulation_steps,
                      plan.batch.train_batch_size, plan.batch.micro_batch_per_gpu,
                      plan.batch.gradient_accumulation_steps, data));
      return std::nullopt;
    }
    const int hpz = spec.training.zero.hpz_partition_size;
    if (hpz > 1 && data % hpz != 0) {
      diagnostics.error(
          locations.find("training.zero_optimization.zero_hpz_partition_size"),
          fmt::format("zero_hpz_partition_size {} must divide the data-parallel size {} (its "
                      "groups are that many consecutive data ranks, a host's); use a divisor "
                      "of {}, such as the ranks per host",
                      hpz, data, data));
      return std::nullopt;
    }
    const int virtual_stages = spec.parallelism.virtual_stages;
    if (pipeline > 1 && virtual_stages > 1 &&
        plan.batch.gradient_accumulation_steps % pipeline != 0) {
      diagnostics.error(
          locations.find("parallelism.virtual_stages"),
          fmt::format("the interleaved schedule (parallelism.virtual_stages {}) runs "
                      "micro-batches in groups of the {} stages, and "
                      "gradient_accumulation_steps is {} (train_batch_size {} = micro-batch {} x "
                      "accumulation {} x data-parallel {}); make the accumulation steps a "
                      "multiple of {}",
                      virtual_stages, pipeline, plan.batch.gradient_accumulation_steps,
                      plan.batch.train_batch_size, plan.batch.micro_batch_per_gpu,
                      plan.batch.gradient_accumulation_steps, data, pipeline));
      return std::nullopt;
    }
  }

  plan.grid = topology::ProcessGrid(topology::GridShape{pipeline, data, tensor});
  plan.placement =
      topology::place_ranks(plan.grid, plan.hosts, host_topology(spec, inputs.machine),
                            cluster.device == spec::Device::kCuda ? topology::DeviceKind::kCuda
                                                                  : topology::DeviceKind::kCpu);
  for (const std::string& error : plan.placement.errors) {
    diagnostics.error(locations.find("cluster"), error);
  }
  if (!plan.placement.errors.empty()) return std::nullopt;
  plan.warnings = plan.placement.warnings;
  add_assumed_topology_warning(spec, plan);
  add_local_runner_warning(spec, plan);
  add_plaintext_control_plane_warning(spec, plan);
  for (const topology::HostSlots& host : plan.hosts) {
    plan.all_hosts_local = plan.all_hosts_local && is_this_machine(host.host);
  }

  if (!training) return plan;  // a commbench holds no model
  plan.padded_vocab_size = padded_vocab_size(spec.model, tensor);
  plan.total_parameters = total_parameters(spec.model);
  const std::vector<std::pair<int, int>> virtual_stages =
      stage_layers(spec.model, spec.parallelism);
  // A job the GPU path takes is estimated as that path holds it; another
  // as DeepSpeed would hold it.
  plan.host_model_states =
      spec.cluster.device == spec::Device::kCuda && spec::device_training_problem(spec).empty();
  // That path without offload (or with a share offloaded) keeps every state on the GPU, with its
  // reduction's buffers (communication_buffers) and no ZeRO workspace but
  // stage 3's gathered parameters.
  const bool all_on_gpu =
      plan.host_model_states &&
      (spec.training.zero.offload_optimizer.device == spec::OffloadDevice::kNone ||
       spec::partial_optimizer_offload(spec.training.zero));
  plan.workspace_in_host_memory = plan.host_model_states && !all_on_gpu;
  for (int stage = 0; stage < pipeline; ++stage) {
    plan.stage_layers.push_back(core::rank_chunks(virtual_stages, pipeline, stage));
    const int64_t psi = parameters_per_rank(spec.model, spec.parallelism, stage);
    plan.memory_by_stage.push_back(
        plan.host_model_states
            ? mirrored_state_bytes(psi, spec.training, data,
                                   mirror_bytes(spec.model, spec.parallelism, spec.training, data,
                                                stage, kGpuPageBytes))
            : model_state_bytes(psi, spec.training, data, spec.cluster.device));
    plan.activation_bytes_by_stage.push_back(activation_bytes_per_rank(
        spec.model, spec.parallelism, spec.training, plan.batch.micro_batch_per_gpu,
        plan.batch.gradient_accumulation_steps, stage, spec.cluster.device));
    plan.workspace_by_stage.push_back(
        all_on_gpu ? device_workspace_bytes_per_rank(spec.model, spec.parallelism, spec.training,
                                                     data, stage)
                   : workspace_bytes_per_rank(spec.model, spec.parallelism, spec.training, data,
                                              plan.batch.micro_batch_per_gpu, stage));
  }
  plan.device_memory_bytes = device_memory(spec, inputs.machine, plan.placement);
  add_memory_warnings(spec, plan);
  add_host_memory_warnings(inputs.machine, plan);
  return plan;
}

}  // namespace

int64_t JobPlan::workspace_on_device(size_t stage) const {
  return workspace_in_host_memory ? 0 : workspace_by_stage[stage].total();
}

std::optional<JobPlan> make_plan(const spec::JobSpec& spec, const spec::SourceMap& locations,
                                 const PlanInputs& inputs, spec::Diagnostics& diagnostics) {
  if (spec.cluster.device != spec::Device::kAuto) {
    return plan_on_device(spec, locations, inputs, diagnostics);
  }
  // A commbench trains nothing: what training on GPUs lacks is not its concern.
  const DeviceChoice choice =
      choose_device(inputs.machine.gpus, spec::cuda_training_built(),
                    spec.kind == spec::JobKind::kTrain ? spec::device_training_problem(spec) : "");
  spec::JobSpec decided = spec;
  decided.cluster.device = choice.device;
  std::optional<JobPlan> plan = plan_on_device(decided, locations, inputs, diagnostics);
  if (plan) plan->device_choice = choice.reason;
  return plan;
}

}  // namespace dslaunch::plan
