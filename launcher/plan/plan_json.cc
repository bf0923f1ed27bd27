#include "launcher/plan/plan_json.h"

#include <iterator>
#include <string>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace dslaunch::plan {
namespace {

// Bytes that are not UTF-8 (a warning quoting odd input) become U+FFFD
// rather than an exception.
std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

template <typename... Args>
void append(fmt::memory_buffer& out, fmt::format_string<Args...> format, Args&&... args) {
  fmt::format_to(std::back_inserter(out), format, std::forward<Args>(args)...);
}

// `name: [\n  item,\n  item\n]` with one item per line, each written by `item`.
template <typename Items, typename WriteItem>
void write_lines(fmt::memory_buffer& out, const char* name, const Items& items,
                 WriteItem write_item) {
  append(out, "  \"{}\": [", name);
  bool first = true;
  for (const auto& item : items) {
    append(out, "{}\n    ", first ? "" : ",");
    write_item(item);
    first = false;
  }
  append(out, "{}],\n", first ? "" : "\n  ");
}

void write_groups(fmt::memory_buffer& out, const char* axis,
                  const std::vector<std::vector<int>>& groups, bool last) {
  append(out, "    \"{}\": [", axis);
  for (size_t i = 0; i < groups.size(); ++i) {
    append(out, "{}\n      [{}]", i == 0 ? "" : ",", fmt::join(groups[i], ", "));
  }
  append(out, "\n    ]{}\n", last ? "" : ",");
}

}  // namespace

void write_plan_json(std::ostream& stream, const spec::JobSpec& spec, const JobPlan& plan) {
  fmt::memory_buffer out;
  // Host names repeat once per rank; escape each once.
  std::unordered_map<std::string, std::string> host_json;
  for (const topology::HostSlots& host : plan.hosts) host_json[host.host] = json_string(host.host);

  append(out, "{{\n  \"name\": {},\n", json_string(spec.name));
  append(out, "  \"kind\": \"{}\",\n", spec.kind == spec::JobKind::kTrain ? "train" : "commbench");
  append(out, "  \"device\": \"{}\",\n", plan.device == spec::Device::kCuda ? "cuda" : "cpu");
  if (!plan.device_choice.empty()) {
    append(out, "  \"device_choice\": {},\n", json_string(plan.device_choice));
  }
  append(out, "  \"host_model_states\": {},\n", plan.host_model_states);
  append(out, "  \"world_size\": {},\n", plan.world_size());
  append(out, "  \"hosts\": {{");
  for (size_t i = 0; i < plan.hosts.size(); ++i) {
    append(out, "{}\n    {}: [{}]", i == 0 ? "" : ",", host_json[plan.hosts[i].host],
           fmt::join(plan.hosts[i].slots, ", "));
  }
  append(out, "\n  }},\n");
  append(out,
         "  \"batch\": {{\"train_batch_size\": {}, \"train_micro_batch_size_per_gpu\": {}, "
         "\"gradient_accumulation_steps\": {}}},\n",
         plan.batch.train_batch_size, plan.batch.micro_batch_per_gpu,
         plan.batch.gradient_accumulation_steps);
  const topology::GridShape& shape = plan.grid.shape();
  append(out, "  \"grid\": {{\"pipeline\": {}, \"data\": {}, \"tensor\": {}}},\n", shape.pipeline,
         shape.data, shape.tensor);

  write_lines(out, "ranks", plan.placement.ranks, [&](const topology::RankPlacement& rank) {
    append(out,
           "{{\"rank\": {}, \"host\": {}, \"slot\": {}, \"pipeline\": {}, \"data\": {}, "
           "\"tensor\": {}, "
           "\"local_rank\": {}, \"local_world_size\": {}, \"device\": \"{}\", \"numa_node\": {}, "
           "\"cpu_cores\": [{}]}}",
           rank.rank, host_json[rank.host], rank.slot, rank.coord.pipeline, rank.coord.data,
           rank.coord.tensor, rank.local_rank, rank.local_world_size, rank.device, rank.numa_node,
           fmt::join(rank.cpu_cores, ", "));
  });

  append(out, "  \"groups\": {{\n");
  write_groups(out, "pipeline", plan.grid.pipeline_groups(), false);
  write_groups(out, "data", plan.grid.data_groups(), false);
  write_groups(out, "tensor", plan.grid.tensor_groups(), true);
  append(out, "  }},\n");
  append(out, "  \"model\": {{\"parameters\": {}, \"padded_vocab_size\": {}}},\n",
         plan.total_parameters, plan.padded_vocab_size);
  append(out, "  \"stages\": [");
  for (size_t stage = 0; stage < plan.stage_layers.size(); ++stage) {
    const std::vector<std::pair<int, int>>& chunks = plan.stage_layers[stage];
    std::string blocks;
    for (const auto& [begin, end] : chunks) {
      blocks += fmt::format("{}[{}, {}]", blocks.empty() ? "" : ", ", begin, end);
    }
    // layer_begin and layer_end: the stage's one range, when it has one.
    const std::string range = chunks.size() == 1
                                  ? fmt::format("\"layer_begin\": {}, \"layer_end\": {}, ",
                                                chunks.front().first, chunks.front().second)
                                  : "";
    const WorkspaceBytes& workspace = plan.workspace_by_stage[stage];
    append(out,
           "{}{{\"stage\": {}, {}\"chunks\": [{}], \"activation_bytes\": {}, "
           "\"parameter_workspace_bytes\": {}, \"gradient_workspace_bytes\": {}, "
           "\"communication_buffer_bytes\": {}}}",
           stage == 0 ? "" : ", ", stage, range, blocks, plan.activation_bytes_by_stage[stage],
           workspace.parameter_workspace, workspace.gradient_workspace, workspace.communication);
  }
  append(out, "],\n");

  const std::vector<topology::RankPlacement> no_ranks;
  const auto& with_memory = plan.memory_by_stage.empty() ? no_ranks : plan.placement.ranks;
  write_lines(out, "memory", with_memory, [&](const topology::RankPlacement& rank) {
    const ModelStateBytes& bytes = plan.memory_of_rank(rank.rank);
    append(out,
           "{{\"rank\": {}, \"parameters\": {}, \"gradients\": {}, \"optimizer_states\": {}, "
           "\"swap_buffers\": {}, \"weight_copy\": {}, \"communication_buffers\": {}, "
           "\"device_total\": {}, \"offloaded_to_host\": {}, \"offloaded_to_nvme\": {}}}",
           rank.rank, bytes.parameters, bytes.gradients, bytes.optimizer_states, bytes.swap_buffers,
           bytes.weight_copy, bytes.communication_buffers, bytes.device_total(),
           bytes.offloaded_to_host, bytes.offloaded_to_nvme);
  });
  append(out, "  \"device_memory_bytes\": {},\n", plan.device_memory_bytes);
  append(out, "  \"warnings\": [");
  for (size_t i = 0; i < plan.warnings.size(); ++i) {
    append(out, "{}\n    {}", i == 0 ? "" : ",", json_string(plan.warnings[i]));
  }
  append(out, "{}]\n}}\n", plan.warnings.empty() ? "" : "\n  ");
  stream.write(out.data(), static_cast<std::streamsize>(out.size()));
}

}  // namespace dslaunch::plan
