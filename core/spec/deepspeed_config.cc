#include "core/spec/deepspeed_config.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/spec/hjson_reader.h"
#include "core/spec/text_file.h"
#include "core/spec/yaml_document.h"

namespace dslaunch::spec {
namespace {

// DeepSpeed config keys with no meaning for dslaunch, as key paths: the one
// list, for the JSON config and the YAML training section alike. Only keys
// that change neither the model's math nor the plan belong here; a key that
// would (fp16_master_weights_and_grads)
// stays an unknown key, so nobody trains something else than they asked for.
const std::set<std::string, std::less<>>& ignored_deepspeed_keys() {
  static const std::set<std::string, std::less<>> keys = {
      // Profiling, autotuning, and features configured elsewhere here
      // (checkpoints and the pipeline layout come from the job spec).
      "dump_state",
      "memory_breakdown",
      "flops_profiler",
      "autotuning",
      "prescale_gradients",
      "gradient_predivide_factor",
      "sparse_gradients",
      "zero_allow_untested_optimizer",
      "zero_force_ds_cpu_optimizer",
      // io_uring submits from the thread that starts a transfer and reaps
      // completions when they are waited for: no threads, nothing to overlap.
      "aio.thread_count",
      "aio.overlap_events",
      "checkpoint",
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

// YAML keys written without quotes: those yaml-cpp reads back as the same
// string ("null" and its spellings would read as a null key).
bool is_plain_key(const std::string& key) {
  const auto word_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  };
  return !key.empty() && !(key[0] >= '0' && key[0] <= '9') && key[0] != '-' &&
         std::all_of(key.begin(), key.end(), word_char) && key != "null" && key != "Null" &&
         key != "NULL";
}

// `text` as a YAML double-quoted scalar: JSON's short escapes where JSON has
// them, so a string is no wider than the JSON string for it; other bytes,
// UTF-8 included, pass through as yaml-cpp keeps them.
std::string yaml_quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\x{:02x}", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Writes the config, read as Hjson, out again as YAML in flow style (JSON's
// shape) with every key and value at the line and column it has in the
// config, so that yaml-cpp, loading that text, marks each node with its
// place in the config: yaml-cpp offers no other way to give a node a
// position. Strings are written double-quoted, numbers as spelled (5e8 stays
// 5e8; the training checks read it as an integer), keys without quotes where
// they read back the same. Lines always match. A column moves right only
// where the YAML is wider than the config and something follows on the same
// line: an unquoted key with no blank before its value (`stage:2`), the
// first key of a root object written without braces when it starts the file
// (the '{' the YAML needs comes first), a '...' or '''multiline''' string with
// characters to escape.
class YamlLayout : public HjsonHandler {
 public:
  const std::string& text() const { return text_; }

  void begin_object(TextPosition at) override { open(at, "{"); }
  std::string key(const std::string& name, TextPosition at) override {
    start_entry(at);
    const bool plain = is_plain_key(name);
    // A plain key's ':' needs a blank after it; a quoted key's does not.
    write(plain ? name + ": " : yaml_quoted(name) + ":");
    after_key_ = true;
    return "";  // keys given twice are reported by drop_duplicate_keys, with their paths
  }
  void end_object() override { close("}"); }
  void begin_array(TextPosition at) override { open(at, "["); }
  void end_array() override { close("]"); }
  void scalar(const nlohmann::ordered_json& value, std::string_view spelling,
              TextPosition at) override {
    start_entry(at);
    if (value.is_string()) {
      write(yaml_quoted(value.get_ref<const std::string&>()));
    } else if (value.is_number()) {
      write(spelling);
    } else {
      write(value.dump());  // true, false, null
    }
  }

 private:
  // Separates an entry from the one before it in its container (a value
  // after its key needs no ',') and moves to where it starts.
  void start_entry(TextPosition at) {
    if (after_key_) {
      after_key_ = false;
    } else if (!has_entries_.empty()) {
      if (has_entries_.back()) write(",");
      has_entries_.back() = true;
    }
    if (at.line > line_) {
      text_.append(at.line - line_, '\n');
      line_ = at.line;
      column_ = 1;
    }
    if (at.column > column_) {
      text_.append(at.column - column_, ' ');
      column_ = at.column;
    }
  }
  void open(TextPosition at, std::string_view bracket) {
    // The root's bracket starts the text: a root object written without
    // braces has none, and its '{' must not take its first key's place.
    start_entry(has_entries_.empty() ? TextPosition{1, 1} : at);
    write(bracket);
    has_entries_.push_back(false);
  }
  void close(std::string_view bracket) {
    write(bracket);
    has_entries_.pop_back();
  }
  void write(std::string_view token) {
    text_ += token;
    column_ += static_cast<int>(token.size());
  }

  std::string text_;
  int line_ = 1;
  int column_ = 1;
  std::vector<bool> has_entries_;  // per open container, innermost last
  bool after_key_ = false;
};

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
  YamlLayout layout;
  if (const std::optional<HjsonError> syntax = parse_hjson(*contents, layout)) {
    config.error_location = Location{path, syntax->at.line, syntax->at.column, ""};
    config.error = fmt::format("'{}' is not valid JSON or Hjson: {}", path, syntax->message);
    return config;
  }
  YAML::Node root;
  try {
    root = YAML::Load(layout.text());
  } catch (const YAML::Exception& e) {
    // Hjson that yaml-cpp cannot read (nested beyond its depth limit).
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
