#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/spec/diagnostics.h"
#include "core/spec/job_spec.h"

namespace dslaunch::spec {

// Command-line inputs that change the spec (`dslaunch plan|run`).
struct LoadOptions {
  std::vector<std::string> overrides;  // --set key.path=value, applied in order
  std::string hostfile;                // --hostfile (relative to the working directory)
  // --include / --exclude: either one replaces both of the spec's
  // cluster.include and cluster.exclude (the command line wins).
  std::string include;
  std::string exclude;
  // DeepSpeed's launcher flags, as given ("" = absent): --num_nodes,
  // --num_gpus, --master_addr, --master_port, --launcher (cluster.runner)
  // and --launcher_args, each set over the spec's key.
  std::string num_nodes;
  std::string num_gpus;
  std::string master_addr;
  std::string master_port;
  std::string launcher;
  std::string launcher_args;
};

// Reads, checks and types the job spec at `path`. Every problem is reported
// to `diagnostics` (all of them, each with its location and a fix); the
// returned spec holds the defaults wherever a value was missing or wrong, so
// callers must check diagnostics.has_errors(). `locations` receives where
// every key came from, for later checks that involve the hosts.
//
// Checked here: syntax (one YAML document; merge keys `<<` expanded;
// top-level `x-` keys ignored), unknown keys (with the nearest valid key;
// DeepSpeed keys dslaunch does not use are warnings), types, ranges,
// choices, and rules between keys that do not depend on the hosts (fp16 with
// bf16, offload needing ZeRO stage 3, heads and hidden size divisible by
// tensor, layers by pipeline, inline hosts valid and distinct, ...). A rule
// between keys is skipped when one of its keys could not be read, so one
// mistake gives one error. Relative paths are resolved against the folder of
// the file that holds them (the spec, or the DeepSpeed config); values from
// `options` against the working directory.
JobSpec load_job_spec(const std::string& path, const LoadOptions& options, Diagnostics& diagnostics,
                      SourceMap& locations);

// The same for spec text already in memory; `path` names it in messages and
// anchors its relative paths.
JobSpec parse_job_spec(std::string_view text, const std::string& path, const LoadOptions& options,
                       Diagnostics& diagnostics, SourceMap& locations);

// Sets cluster.device to what the planner chose for `auto`, in the struct
// and in resolved_yaml (which the ranks and the job directory receive).
void set_planned_device(JobSpec& spec, Device device);

}  // namespace dslaunch::spec
