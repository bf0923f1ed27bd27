#pragma once

#include <string>

#include "launcher/plan/job_plan.h"
#include "core/spec/job_spec.h"

namespace dslaunch::plan {

// `dslaunch plan` for people: batch, grid, a rank table, the groups, model
// states per stage and warnings. Tables longer than `max_rows` are cut,
// saying how much was left out (--json prints everything; see plan_json.h).
std::string plan_to_text(const spec::JobSpec& spec, const JobPlan& plan, int max_rows);

}  // namespace dslaunch::plan
