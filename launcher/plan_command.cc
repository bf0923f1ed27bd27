#include "launcher/plan_command.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "core/errno_status.h"
#include "launcher/plan/plan_json.h"
#include "launcher/plan/plan_report.h"
#include "launcher/plan/planned_job.h"
#include "core/spec/diagnostics.h"

namespace dslaunch::launcher {
namespace {

constexpr int kInvalidInput = 2;

int report_problems(const spec::Diagnostics& diagnostics) {
  std::cerr << diagnostics.format();
  return kInvalidInput;
}

}  // namespace

int run_plan_command(const PlanCommandOptions& options) {
  spec::Diagnostics diagnostics;
  std::optional<plan::PlannedJob> planned =
      plan::load_and_plan(options.spec_path, options.load, diagnostics);
  if (!planned) return report_problems(diagnostics);
  const spec::JobSpec& job = planned->spec;
  const plan::JobPlan& job_plan = planned->plan;

  if (!options.rankfile.empty()) {
    std::ofstream rankfile(options.rankfile);
    if (rankfile) rankfile << topology::to_rankfile(job_plan.placement) << std::flush;
    if (!rankfile) {
      // Read errno before anything else can change it.
      const std::string reason = core::errno_text(errno);
      std::cerr << options.rankfile << ": cannot write the rankfile: " << reason << "\n";
      return kInvalidInput;
    }
  }
  if (options.json) {
    plan::write_plan_json(std::cout, job, job_plan);
  } else {
    std::cout << plan::plan_to_text(job, job_plan, options.max_rows);
  }
  return 0;
}

}  // namespace dslaunch::launcher
