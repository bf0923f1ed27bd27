#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "launcher/spec/diagnostics.h"
#include "launcher/spec/job_spec.h"

namespace dslaunch::spec {

// Command-line inputs that change the spec (`dslaunch plan|run`).
struct LoadOptions {
  std::vector<std::string> overrides;  // --set key.path=value, applied in order
  std::string hostfile;                // --hostfile (relative to the working directory)
  std::string include;                 // --include
  std::string exclude;                 // --exclude
};

// Reads, checks and types the job spec at `path`. Every problem is reported
// to `diagnostics` (all of them, each with its location and a fix); the
// returned spec holds the defaults wherever a value was missing or wrong, so
// callers must check diagnostics.has_errors(). `locations` receives where
// every key came from, for later checks that involve the hosts.
//
// Checked here: syntax, unknown keys (with the nearest valid key), types,
// ranges, choices, and rules between keys that do not depend on the hosts
// (fp16 with bf16, offload needing ZeRO stage 3, heads and hidden size
// divisible by tensor, layers by pipeline, ...). Relative paths in the spec
// are resolved against the spec's folder.
JobSpec load_job_spec(const std::string& path, const LoadOptions& options, Diagnostics& diagnostics,
                      SourceMap& locations);

// The same for spec text already in memory; `path` names it in messages and
// anchors its relative paths.
JobSpec parse_job_spec(std::string_view text, const std::string& path, const LoadOptions& options,
                       Diagnostics& diagnostics, SourceMap& locations);

}  // namespace dslaunch::spec
