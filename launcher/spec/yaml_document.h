#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "launcher/spec/diagnostics.h"

namespace dslaunch::spec {

// Parses `text` (the file at `path`) as one YAML document. A syntax error is
// reported at its line and column, and gives nullopt. A second document with
// content (after a '---') is an error at its start, since yaml-cpp's Load
// would drop it without a word; the first document is still returned, so its
// own problems are reported too. An empty second document (a trailing '---')
// loses nothing and is fine. An empty text gives a null node.
std::optional<YAML::Node> read_yaml_document(std::string_view text, const std::string& path,
                                             Diagnostics& diagnostics);

}  // namespace dslaunch::spec
