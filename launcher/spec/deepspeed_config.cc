#include "launcher/spec/deepspeed_config.h"

#include "launcher/spec/text_file.h"

#include <functional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace dslaunch::spec {
namespace {

// Top-level DeepSpeed config keys with no meaning for dslaunch: monitoring,
// profiling, autotuning and features that are configured elsewhere here
// (checkpoints and pipeline layout come from the job spec).
const std::set<std::string>& ignored_deepspeed_keys() {
  static const std::set<std::string> keys = {
      "steps_per_print",
      "wall_clock_breakdown",
      "dump_state",
      "memory_breakdown",
      "tensorboard",
      "wandb",
      "csv_monitor",
      "comet",
      "flops_profiler",
      "comms_logger",
      "autotuning",
      "elasticity",
      "prescale_gradients",
      "gradient_predivide_factor",
      "sparse_gradients",
      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer",
      "activation_checkpointing",
      "aio",
      "checkpoint",
      "data_efficiency",
      "compression_training",
      "amp",
      "communication_data_type",
      "seq_parallel_communication_data_type",
      "pipeline",
      "timers",
      "graph_harvesting",
      "use_data_before_expert_parallelism",
      "disable_allgather",
  };
  return keys;
}

YAML::Node to_yaml(const nlohmann::json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::object: {
      YAML::Node map(YAML::NodeType::Map);
      for (const auto& [key, item] : value.items()) map[key] = to_yaml(item);
      return map;
    }
    case nlohmann::json::value_t::array: {
      YAML::Node list(YAML::NodeType::Sequence);
      for (const auto& item : value) list.push_back(to_yaml(item));
      return list;
    }
    case nlohmann::json::value_t::null:
      return YAML::Node(YAML::NodeType::Null);
    case nlohmann::json::value_t::string:
      return YAML::Node(value.get<std::string>());
    case nlohmann::json::value_t::number_float:
      return YAML::Node(fmt::format("{}", value.get<double>()));
    default:
      return YAML::Node(value.dump());  // integers and booleans as JSON spells them
  }
}

Location position_in(const std::string& path, const std::string& text, size_t byte) {
  Location where;
  where.file = path;
  where.line = 1;
  where.column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++where.line;
      where.column = 1;
    } else {
      ++where.column;
    }
  }
  return where;
}

}  // namespace

DeepSpeedConfig load_deepspeed_config(const std::string& path) {
  DeepSpeedConfig config;
  config.error_location.file = path;
  const std::optional<std::string> contents =
      read_text_file(path, "DeepSpeed config", config.error);
  if (!contents) return config;
  const std::string& text = *contents;
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    config.error_location = position_in(path, text, e.byte);
    config.error = fmt::format("'{}' is not valid JSON: {}", path, e.what());
    return config;
  }
  if (!json.is_object()) {
    config.error = fmt::format("'{}' must hold one JSON object of DeepSpeed keys", path);
    return config;
  }
  config.training = YAML::Node(YAML::NodeType::Map);
  for (const auto& [key, value] : json.items()) {
    if (ignored_deepspeed_keys().count(key) > 0) {
      config.ignored.push_back(key);
      continue;
    }
    config.training[key] = to_yaml(value);
  }
  return config;
}

YAML::Node merge_training(const YAML::Node& json, const YAML::Node& spec,
                          const std::function<void(const std::string&)>& on_json_value,
                          std::vector<std::string>& overridden) {
  std::function<YAML::Node(const YAML::Node&, const YAML::Node&, const std::string&)> merge =
      [&](const YAML::Node& from_json, const YAML::Node& from_spec, const std::string& prefix) {
        // The spec's mappings are extended in place, not copied: a copy would
        // lose their positions in the file, which later errors point at.
        YAML::Node merged = from_spec.IsMap() ? from_spec : YAML::Node(YAML::NodeType::Map);
        for (const auto& entry : from_json) {
          const std::string key = entry.first.Scalar();
          const std::string path = prefix.empty() ? key : prefix + "." + key;
          const YAML::Node mine = from_spec.IsMap() ? from_spec[key] : YAML::Node();
          if (!mine.IsDefined() || mine.IsNull()) {
            merged[key] = entry.second;
            on_json_value(path);
          } else if (mine.IsMap() && entry.second.IsMap()) {
            merge(entry.second, mine, path);
          } else {
            overridden.push_back(path);
          }
        }
        return merged;
      };
  return merge(json, spec, "");
}

}  // namespace dslaunch::spec
