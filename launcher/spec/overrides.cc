#include "launcher/spec/overrides.h"

#include <fmt/format.h>

namespace dslaunch::spec {

ParsedOverride parse_override(std::string_view text) {
  ParsedOverride parsed;
  parsed.value.origin = "--set " + std::string(text);
  const auto equals = text.find('=');
  const std::string_view path = text.substr(0, equals);
  const bool bad_path = path.empty() || path.front() == '.' || path.back() == '.' ||
                        path.find("..") != std::string_view::npos;
  if (equals == std::string_view::npos || bad_path) {
    parsed.error = fmt::format(
        "--set takes key.path=value, for example --set training.steps=100; got '{}'", text);
    return parsed;
  }
  parsed.value.path = std::string(path);
  const std::string value(text.substr(equals + 1));
  try {
    parsed.value.value = value.empty() ? YAML::Node(std::string()) : YAML::Load(value);
  } catch (const YAML::Exception&) {
    parsed.value.value = YAML::Node(value);
  }
  return parsed;
}

std::string apply_override(YAML::Node& root, const Override& override_value) {
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  // Replacing a list or scalar document would hide the error that it is not a spec.
  if (!root.IsMap()) {
    return "the job spec is not a mapping of keys, so nothing can be set in it";
  }
  YAML::Node current = root;
  std::string walked;
  std::string_view rest = override_value.path;
  while (true) {
    const auto dot = rest.find('.');
    const std::string key(rest.substr(0, dot));
    if (dot == std::string_view::npos) {
      current[key] = override_value.value;
      return "";
    }
    walked += (walked.empty() ? "" : ".") + key;
    YAML::Node next = current[key];
    if (!next.IsDefined() || next.IsNull()) {
      next = YAML::Node(YAML::NodeType::Map);
      current[key] = next;
    } else if (!next.IsMap()) {
      return fmt::format("{} holds {}, not keys", walked,
                         next.IsSequence() ? "a list" : "a single value");
    }
    // yaml-cpp's operator= would copy into `current`; reset() rebinds it.
    current.reset(next);
    rest = rest.substr(dot + 1);
  }
}

}  // namespace dslaunch::spec
