#include "core/spec/deepspeed_config.h"

#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/spec/text_file.h"
#include "core/spec/yaml_document.h"

namespace dslaunch::spec {
namespace {

// DeepSpeed config keys with no meaning for dslaunch, as key paths: the one
// list, for the JSON config and the YAML training section alike. Only keys
// that change neither the model's math nor the plan belong here; a key that
// would (fp16_master_weights_and_grads, the offload ratio)
// stays an unknown key, so nobody trains something else than they asked for.
const std::set<std::string, std::less<>>& ignored_deepspeed_keys() {
  static const std::set<std::string, std::less<>> keys = {
      // Monitoring, profiling, autotuning, and features configured elsewhere
      // here (checkpoints and the pipeline layout come from the job spec).
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
      "prescale_gradients",
      "gradient_predivide_factor",
      "sparse_gradients",
      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer",
      "aio",
      "checkpoint",
      "data_efficiency",
      "compression_training",
      "amp",
      "seq_parallel_communication_data_type",
      "pipeline",
      "timers",
      "graph_harvesting",
      "use_data_before_expert_parallelism",
      "disable_allgather",
      "nebula",
      // How DeepSpeed's ZeRO implementation communicates, buffers and saves.
      "zero_optimization.allgather_partitions",
      "zero_optimization.reduce_scatter",
      "zero_optimization.round_robin_gradients",
      "zero_optimization.stage3_max_reuse_distance",
      "zero_optimization.max_reuse_distance",
      "zero_optimization.stage3_gather_16bit_weights_on_model_save",
      "zero_optimization.stage3_gather_fp16_weights_on_model_save",
      "zero_optimization.gather_16bit_weights_on_model_save",
      "zero_optimization.load_from_fp32_weights",
      "zero_optimization.elastic_checkpoint",
      "zero_optimization.ignore_unused_parameters",
      "zero_optimization.memory_efficient_linear",
      "zero_optimization.offload_optimizer.buffer_size",
      "zero_optimization.offload_optimizer.fast_init",
      "zero_optimization.offload_optimizer.max_in_cpu",
      "zero_optimization.offload_optimizer.pipeline",
      "zero_optimization.offload_optimizer.pipeline_read",
      "zero_optimization.offload_optimizer.pipeline_write",
      "zero_optimization.offload_param.buffer_count",
      "zero_optimization.offload_param.buffer_size",
      "zero_optimization.offload_param.fast_init",
      "zero_optimization.offload_param.max_in_cpu",
      "zero_optimization.offload_param.pipeline",
      "zero_optimization.offload_param.pipeline_read",
      "zero_optimization.offload_param.pipeline_write",
      // Precision and optimizer knobs of DeepSpeed's implementation.
      "fp16.auto_cast",
      "bf16.immediate_grad_update",
      "optimizer.params.torch_adam",
  };
  return keys;
}

// Checks JSON syntax without building a document: nlohmann reports the byte
// where the syntax breaks, which yaml-cpp (accepting far more than JSON)
// would not.
class JsonSyntax : public nlohmann::json_sax<nlohmann::json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& error) override {
    byte = position;
    message = error.what();
    return false;
  }

  size_t byte = 0;
  std::string message;
};

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

Location mark_in(const std::string& path, const YAML::Mark& mark) {
  if (mark.is_null()) return Location{path, 0, 0, ""};
  return Location{path, mark.line + 1, mark.column + 1, ""};
}

// No DeepSpeed key is nested this deep; it bounds the recursion.
constexpr int kMaxDepth = 512;

// Reports keys given twice in one JSON object (DeepSpeed refuses them too)
// and keeps only the first, so the merge and the checks see one value.
void drop_duplicate_keys(YAML::Node node, const std::string& prefix, const std::string& path,
                         int depth, std::vector<Diagnostic>& problems) {
  if (depth > kMaxDepth) return;
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      drop_duplicate_keys(node[i], fmt::format("{}[{}]", prefix, i), path, depth + 1, problems);
    }
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, std::pair<YAML::Node, YAML::Node>> first;
  std::set<std::string> repeated;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const std::string key_path = prefix.empty() ? key : prefix + "." + key;
    const auto [it, inserted] = first.try_emplace(key, entry.first, entry.second);
    if (inserted) {
      drop_duplicate_keys(entry.second, key_path, path, depth + 1, problems);
      continue;
    }
    problems.push_back({Diagnostic::Severity::kError, mark_in(path, entry.first.Mark()),
                        fmt::format("{} is given twice (first at {}); keep one", key_path,
                                    mark_in(path, it->second.first.Mark()).to_string())});
    repeated.insert(key);
  }
  for (const std::string& key : repeated) {
    while (node.remove(key)) {
    }
    node.force_insert(first.at(key).first, first.at(key).second);
  }
}

}  // namespace

bool is_ignored_deepspeed_key(std::string_view path) {
  return ignored_deepspeed_keys().count(path) > 0;
}

std::string ignored_deepspeed_key_warning(std::string_view path) {
  return fmt::format("DeepSpeed key '{}' has no effect in dslaunch and is ignored", path);
}

DeepSpeedConfig load_deepspeed_config(const std::string& path) {
  DeepSpeedConfig config;
  config.error_location.file = path;
  const std::optional<std::string> contents =
      read_text_file(path, "DeepSpeed config", config.error);
  if (!contents) return config;
  const std::string& text = *contents;
  JsonSyntax syntax;
  if (!nlohmann::json::sax_parse(text, &syntax)) {
    config.error_location = position_in(path, text, syntax.byte);
    config.error = fmt::format("'{}' is not valid JSON: {}", path, syntax.message);
    return config;
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    // Valid JSON that yaml-cpp cannot read (nested beyond its depth limit).
    config.error_location = mark_in(path, e.mark);
    config.error = fmt::format("'{}' cannot be read: {}", path, e.msg);
    return config;
  }
  if (const std::string problem = yaml_shape_problem(root); !problem.empty()) {
    config.error = fmt::format("'{}' is too large: {}", path, problem);
    return config;
  }
  if (!root.IsMap()) {
    config.error = fmt::format("'{}' must hold one JSON object of DeepSpeed keys", path);
    return config;
  }
  drop_duplicate_keys(root, "", path, 0, config.problems);
  config.training = root;
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
            // The JSON's own key node, so that its position is kept too.
            if (mine.IsDefined()) merged.remove(key);
            merged.force_insert(entry.first, entry.second);
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
