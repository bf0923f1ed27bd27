#include "core/spec/overrides.h"

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/spec/yaml_document.h"

namespace dslaunch::spec {
namespace {

// One step of an override's path: a mapping key, or a list index.
struct Step {
  std::string key;  // empty for an index
  size_t index = 0;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// "cluster.hosts[0].slots" -> cluster, hosts, [0], slots; nullopt when the
// path is malformed (empty keys, unclosed or empty brackets, text after ']').
std::optional<std::vector<Step>> split_path(std::string_view path) {
  std::vector<Step> steps;
  size_t i = 0;
  while (true) {
    const size_t start = i;
    while (i < path.size() && path[i] != '.' && path[i] != '[' && path[i] != ']') ++i;
    if (i == start) return std::nullopt;
    steps.push_back({std::string(path.substr(start, i - start)), 0});
    while (i < path.size() && path[i] == '[') {
      const size_t digits = ++i;
      while (i < path.size() && is_digit(path[i])) ++i;
      // Six digits is more items than any list in a spec.
      if (i == digits || i - digits > 6 || i >= path.size() || path[i] != ']') return std::nullopt;
      steps.push_back({"", static_cast<size_t>(std::stoul(std::string(path.substr(digits))))});
      ++i;
    }
    if (i == path.size()) return steps;
    if (path[i] != '.') return std::nullopt;
    ++i;
  }
}

// YAML reads these as null; any other text it reads as null (a comment such
// as "#5") was meant as a string.
bool spelled_null(std::string_view text) {
  return text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL";
}

// Whether `text` starts a flow collection ('[' or '{' after blanks): the
// only way --set gives a list or mapping.
bool flow_collection(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  return first != std::string_view::npos && (text[first] == '[' || text[first] == '{');
}

std::string holds(const YAML::Node& node) {
  return node.IsSequence() ? "a list" : node.IsMap() ? "keys" : "a single value";
}

}  // namespace

ParsedOverride parse_override(std::string_view text) {
  ParsedOverride parsed;
  parsed.value.origin = "--set " + std::string(text);
  const auto equals = text.find('=');
  const std::string_view path = text.substr(0, equals);
  if (equals == std::string_view::npos || !split_path(path)) {
    parsed.error = fmt::format(
        "--set takes key.path=value, for example --set training.steps=100 or --set "
        "cluster.hosts[0].slots=4; got '{}'",
        text);
    return parsed;
  }
  parsed.value.path = std::string(path);
  const std::string value(text.substr(equals + 1));
  YAML::Node node(value);  // the plain string, unless YAML says otherwise below
  try {
    const YAML::Node read = value.empty() ? YAML::Node(std::string()) : YAML::Load(value);
    if (const std::string problem = yaml_shape_problem(read); !problem.empty()) {
      parsed.error = fmt::format("--set {}: the value is too large: {}", path, problem);
      return parsed;
    }
    const bool structure = read.IsMap() || read.IsSequence();
    const bool accidental_null = !read.IsDefined() || (read.IsNull() && !spelled_null(value));
    if (!accidental_null && (!structure || flow_collection(value))) node = read;
  } catch (const YAML::Exception&) {
    // Not YAML: the text as typed.
  }
  parsed.value.value = node;
  return parsed;
}

std::string apply_override(YAML::Node& root, const Override& override_value) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // Replacing a list or scalar document would hide the error that it is not a spec.
  if (!root.IsMap()) {
    return "the job spec is not a mapping of keys, so nothing can be set in it";
  }
  const std::optional<std::vector<Step>> steps = split_path(override_value.path);
  if (!steps) return fmt::format("'{}' is not a key path", override_value.path);
  YAML::Node current = root;
  std::string walked;
  for (size_t i = 0; i < steps->size(); ++i) {
    const Step& step = (*steps)[i];
    const bool last = i + 1 == steps->size();
    const bool next_is_index = !last && (*steps)[i + 1].key.empty();
    YAML::Node next;
    if (!step.key.empty()) {
      if (!current.IsMap()) {
        return fmt::format("{} holds {}, not keys{}", walked, holds(current),
                           current.IsSequence() ? "; name an item, such as " + walked + "[0]" : "");
      }
      walked += (walked.empty() ? "" : ".") + step.key;
      if (last) {
        // A new entry rather than an assignment: the old value node may be
        // shared through an alias or a merge key (<<: *offload), and
        // assigning to it would change every mapping that shares it.
        while (current.remove(step.key)) {
        }
        current.force_insert(step.key, override_value.value);
        return "";
      }
      next = current[step.key];
      if (!next.IsDefined() || next.IsNull()) {
        if (next_is_index) {
          return fmt::format("{} has no list to index; set the whole list, such as --set {}=[...]",
                             walked, walked);
        }
        next = YAML::Node(YAML::NodeType::Map);
        current[step.key] = next;
      }
    } else {
      if (!current.IsSequence()) {
        return fmt::format("{} holds {}, not a list", walked, holds(current));
      }
      if (step.index >= current.size()) {
        return fmt::format(
            "{} has {} item{}, so [{}] is past its end; set the whole list, such as --set {}=[...]",
            walked, current.size(), current.size() == 1 ? "" : "s", step.index, walked);
      }
      walked += fmt::format("[{}]", step.index);
      if (last) {
        current[step.index] = override_value.value;
        return "";
      }
      next = current[step.index];
    }
    // yaml-cpp's operator= would copy into `current`; reset() rebinds it.
    current.reset(next);
  }
  return "";
}

}  // namespace dslaunch::spec
