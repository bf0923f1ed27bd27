#pragma once

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace dslaunch::spec {

// One `--set key.path=value` from the command line.
struct Override {
  std::string path;    // "training.zero_optimization.stage"
  YAML::Node value;    // the value parsed as YAML, so lists and maps work too
  std::string origin;  // "--set training.zero_optimization.stage=2", for messages
};

struct ParsedOverride {
  Override value;
  std::string error;  // set when `text` is not key.path=value
};

// Parses "key.path=value". The value is read as a YAML flow value
// (`[0.9, 0.95]`, `{device: cpu}`, `2`); text that is not valid YAML stays a
// plain string.
ParsedOverride parse_override(std::string_view text);

// Sets `root` at the override's path, creating mappings on the way (and
// `root` itself when it is empty). Returns an error (to be shown at the
// override's origin) when `root` or a key on the way holds something other
// than a mapping; "" on success.
std::string apply_override(YAML::Node& root, const Override& override_value);

}  // namespace dslaunch::spec
