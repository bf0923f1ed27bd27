#pragma once

#include <string>

#include <yaml-cpp/yaml.h>

#include "core/spec/diagnostics.h"

namespace dslaunch::spec {

// Expands YAML merge keys throughout `root`, in place, as YAML 1.1's merge
// type defines them (yaml-cpp leaves `<<` as an ordinary key):
//
//   x-offload: &offload {device: cpu, pin_memory: true}
//   offload_param:
//     <<: *offload       # a mapping, or a list of mappings [*a, *b]
//     pin_memory: false  # keys written out win over merged ones
//
// Each mapping's `<<` entries are replaced by the keys of the mappings they
// name that it lacks; from a list, the earlier mapping wins. Merged values
// are the anchored nodes themselves, so problems in them are located where
// they were written. A `<<` whose value is not a mapping or a list of
// mappings is an error (located in `file`) and is dropped. A quoted "<<" is
// an ordinary key. Handles aliases to enclosing nodes (cycles) and shared
// nodes, each expanded once.
void expand_merge_keys(YAML::Node& root, const std::string& file, Diagnostics& diagnostics);

}  // namespace dslaunch::spec
