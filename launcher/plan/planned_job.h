#pragma once

#include <optional>
#include <string>

#include "launcher/plan/job_plan.h"
#include "core/spec/diagnostics.h"
#include "core/spec/job_spec.h"
#include "core/spec/spec_parser.h"

namespace dslaunch::plan {

// A job spec loaded and planned on this machine: what `dslaunch plan` shows
// and `dslaunch run` starts.
struct PlannedJob {
  spec::JobSpec spec;
  spec::SourceMap locations;
  JobPlan plan;
};

// Loads the spec at `path` with the command line's `options`, then plans it
// against this machine (hwloc, nvidia-smi) and the process environment (a
// Slurm allocation). std::nullopt when either step found a problem: every
// problem is in `diagnostics`. The spec's warnings lead the plan's.
std::optional<PlannedJob> load_and_plan(const std::string& path, const spec::LoadOptions& options,
                                        spec::Diagnostics& diagnostics);

}  // namespace dslaunch::plan
