#pragma once

#include <ostream>

#include "launcher/plan/job_plan.h"
#include "core/spec/job_spec.h"

namespace dslaunch::plan {

// Writes `dslaunch plan --json`: one JSON object with name, device,
// world_size, hosts (host -> slots, in hostfile order), batch, grid, ranks,
// groups, model, memory (per rank, bytes by category), device_memory_bytes
// and warnings. Indented at the top level, one compact record per line in
// the long lists.
//
// Streamed rather than built as an nlohmann::json document: for 131,072
// ranks the document took 2 s to build (an ordered object with 16,384 hosts
// is quadratic to fill) and 49 MB to print indented; streamed, it takes a
// small fraction of that. nlohmann still escapes every string.
void write_plan_json(std::ostream& out, const spec::JobSpec& spec, const JobPlan& plan);

}  // namespace dslaunch::plan
