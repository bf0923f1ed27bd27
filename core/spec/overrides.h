#pragma once

#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace dslaunch::spec {

// One `--set key.path=value` from the command line.
struct Override {
  std::string path;    // "training.zero_optimization.stage", "cluster.hosts[0].slots"
  YAML::Node value;    // the value parsed as YAML, so lists and maps work too
  std::string origin;  // "--set training.zero_optimization.stage=2", for messages
};

struct ParsedOverride {
  Override value;
  std::string error;  // set when `text` is not key.path=value
};

// Parses "key.path=value". The path is keys joined by '.', each key
// optionally followed by list indices (`hosts[0]`). The value is read as a
// YAML flow value (`[0.9, 0.95]`, `{device: cpu}`, `2`, `"quoted"`); anything
// else stays the plain string as typed: text that is not valid YAML, text
// that YAML would read as a block mapping or list (`a: b`, `- x`), and text
// that YAML would read as null without saying so (`#5`, a comment). Only an
// empty value, `null` and `~` are null.
ParsedOverride parse_override(std::string_view text);

// Sets `root` at the override's path, creating mappings on the way (and
// `root` itself when it is empty). A list index must name an item the list
// already has. Returns an error (to be shown at the override's origin) when
// `root` or a key on the way holds something else than the path needs (a
// value instead of keys, keys instead of a list, an index past the end); ""
// on success.
std::string apply_override(YAML::Node& root, const Override& override_value);

}  // namespace dslaunch::spec
