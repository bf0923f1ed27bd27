#include "launcher/plan/plan_report.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/spec/training_support.h"

namespace dslaunch::plan {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

std::string precision(const spec::TrainingSpec& training) {
  if (training.fp16.enabled) return "fp16 mixed precision";
  if (training.bf16) return "bf16 mixed precision";
  return "fp32";
}

std::string device_name(spec::Device device) {
  return device == spec::Device::kCuda ? "cuda" : "cpu";
}

std::string cores_text(const std::vector<int>& cores) {
  if (cores.empty()) return "-";
  if (cores.back() - cores.front() + 1 == static_cast<int>(cores.size())) {
    return cores.size() == 1 ? std::to_string(cores.front())
                             : fmt::format("{}-{}", cores.front(), cores.back());
  }
  return fmt::format("{}", fmt::join(cores, ","));
}

void append_groups(std::string& out, const char* axis, const std::vector<std::vector<int>>& groups,
                   int max_rows) {
  out += fmt::format("  {:<8}", axis);
  const size_t shown = std::min<size_t>(groups.size(), static_cast<size_t>(max_rows));
  for (size_t i = 0; i < shown; ++i) out += fmt::format(" [{}]", fmt::join(groups[i], ","));
  if (shown < groups.size()) out += fmt::format(" ... {} more", groups.size() - shown);
  out += "\n";
}

}  // namespace

std::string plan_to_text(const spec::JobSpec& spec, const JobPlan& plan, int max_rows) {
  const topology::GridShape& shape = plan.grid.shape();
  std::string out;
  out += fmt::format("job {}: {} rank(s) on {} host(s), device {}\n", spec.name, plan.world_size(),
                     plan.hosts.size(), device_name(plan.device));
  if (!plan.device_choice.empty()) {
    out += fmt::format("cluster.device auto: {}\n", plan.device_choice);
  }
  if (spec.kind == spec::JobKind::kCommbench) {
    out += fmt::format("commbench: {} on the {} group(s), {} to {} bytes\n",
                       fmt::join(spec.commbench.collectives, ", "),
                       fmt::join(spec.commbench.groups, ", "), spec.commbench.min_bytes,
                       spec.commbench.max_bytes);
  } else {
    out += fmt::format(
        "model: {} layers, hidden {}, {} heads, vocab {} (padded {}), seq {}: "
        "{:.1f}M parameters\n",
        spec.model.num_layers, spec.model.hidden_size, spec.model.num_attention_heads,
        spec.model.vocab_size, plan.padded_vocab_size, spec.model.seq_length,
        plan.total_parameters / 1e6);
    out += fmt::format("batch: train_batch_size {} = micro {} x accumulation {} x data {}",
                       plan.batch.train_batch_size, plan.batch.micro_batch_per_gpu,
                       plan.batch.gradient_accumulation_steps, shape.data);
    if (spec.training.elasticity.enabled) {
      out +=
          fmt::format(" (elasticity {}: data-parallel sizes {})", spec.training.elasticity.version,
                      fmt::join(plan.elastic_data_sizes, ", "));
    }
    out += "\n";
  }
  out += fmt::format("grid: pipeline {} x data {} x tensor {}\n\n", shape.pipeline, shape.data,
                     shape.tensor);

  out += fmt::format("{:>6}  {:<20} {:>4}  {:>8} {:>4} {:>6}  {:>5}  {:<8} {}\n", "rank", "host",
                     "slot", "pipeline", "data", "tensor", "local", "device", "cores");
  const int shown = std::min(plan.world_size(), max_rows);
  for (int r = 0; r < shown; ++r) {
    const topology::RankPlacement& rank = plan.placement.ranks[r];
    out += fmt::format("{:>6}  {:<20} {:>4}  {:>8} {:>4} {:>6}  {:>5}  {:<8} {}\n", rank.rank,
                       rank.host, rank.slot, rank.coord.pipeline, rank.coord.data,
                       rank.coord.tensor, rank.local_rank, rank.device, cores_text(rank.cpu_cores));
  }
  if (shown < plan.world_size()) {
    out += fmt::format("   ... {} more ranks (--json lists all)\n", plan.world_size() - shown);
  }

  out += "\ngroups\n";
  append_groups(out, "tensor", plan.grid.tensor_groups(), max_rows);
  append_groups(out, "data", plan.grid.data_groups(), max_rows);
  append_groups(out, "pipeline", plan.grid.pipeline_groups(), max_rows);

  if (!plan.memory_by_stage.empty()) {
    out += fmt::format("\nmemory per rank ({}, ZeRO stage {}, data-parallel {})\n",
                       precision(spec.training), spec.training.zero.stage, shape.data);
    out += fmt::format("{:>6}  {:>9}  {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
                       "stage", "blocks", "parameters", "gradients", "optimizer",
                       plan.device == spec::Device::kCuda ? "on device" : "in memory", "offloaded",
                       "activations", "buffers", "total");
    for (size_t stage = 0; stage < plan.memory_by_stage.size(); ++stage) {
      const ModelStateBytes& bytes = plan.memory_by_stage[stage];
      std::string blocks;
      for (const auto& [begin, end] : plan.stage_layers[stage]) {
        blocks += fmt::format("{}{}-{}", blocks.empty() ? "" : ",", begin, end - 1);
      }
      const int64_t activations = plan.activation_bytes_by_stage[stage];
      const int64_t buffers = plan.workspace_by_stage[stage].total();
      const int64_t total = bytes.device_total() + activations + plan.workspace_on_device(stage);
      out += fmt::format("{:>6}  {:>9}  {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n",
                         stage, blocks, gib(bytes.parameters), gib(bytes.gradients),
                         gib(bytes.optimizer_states), gib(bytes.device_total()),
                         gib(bytes.offloaded_to_host + bytes.offloaded_to_nvme), gib(activations),
                         gib(buffers), gib(total));
    }
    out +=
        "buffers: ZeRO's gathered parameters (stage 3), gradient workspace (stages 2-3) and "
        "communication buffers at their largest\n";
    if (plan.host_model_states && spec::partial_optimizer_offload(spec.training.zero)) {
      out += fmt::format(
          "on GPUs with offload_optimizer ratio {} every model state stays on the GPU, in fp32, "
          "but that share of the optimizer's states (fp32 masters and moments), which CPU Adam "
          "updates in host memory (\"offloaded\"); with several data ranks \"on device\" "
          "includes the gradient reduction's buffers there\n",
          spec.training.zero.offload_optimizer.ratio);
    } else if (plan.host_model_states) {
      const bool all_on_gpu = plan.memory_by_stage.front().offloaded_to_host == 0 &&
                              plan.memory_by_stage.front().offloaded_to_nvme == 0;
      out += all_on_gpu
                 ? "on GPUs with the optimizer there every model state stays on the GPU, in fp32 "
                   "(the 16-bit weights as their fp32 values); with several data ranks \"on "
                   "device\" includes the gradient reduction's buffers there\n"
                 : "on GPUs the model states and buffers stay in host memory: the GPU holds the "
                   "model's fp32 parameters and gradients, the activations and, without "
                   "offload_optimizer, the optimizer's states, the total\n";
    }
    int64_t weight_copy = 0;
    for (const ModelStateBytes& bytes : plan.memory_by_stage) {
      weight_copy = std::max(weight_copy, bytes.weight_copy);
    }
    if (weight_copy > 0) {
      out += fmt::format(
          "in memory includes the bf16 products' copy of the weights: up to {} per rank (2 bytes a "
          "parameter, where the CPU multiplies bf16)\n",
          gib(weight_copy));
    }
    // A CPU rank's model states live in host memory: the budget is its
    // share of the host's, not a device's.
    if (plan.device_memory_bytes > 0 && plan.device == spec::Device::kCuda) {
      out += fmt::format("device memory per rank: {}\n", gib(plan.device_memory_bytes));
    } else if (plan.device_memory_bytes > 0) {
      out += fmt::format("host memory per rank: {} ({})\n", gib(plan.device_memory_bytes),
                         spec.cluster.topology.device_memory_gb > 0
                             ? "cluster.topology.device_memory_gb"
                             : "this machine's memory shared by the ranks of the busiest host");
    }
  }
  if (!plan.warnings.empty()) {
    out += "\nwarnings\n";
    for (const std::string& warning : plan.warnings) out += "  - " + warning + "\n";
  }
  return out;
}

}  // namespace dslaunch::plan
