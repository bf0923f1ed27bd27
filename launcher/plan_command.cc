#include "launcher/plan_command.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>

#include "launcher/plan/job_plan.h"
#include "launcher/plan/plan_json.h"
#include "launcher/plan/plan_report.h"
#include "launcher/spec/diagnostics.h"

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
  spec::SourceMap locations;
  const spec::JobSpec job =
      spec::load_job_spec(options.spec_path, options.load, diagnostics, locations);
  if (diagnostics.has_errors()) return report_problems(diagnostics);

  const plan::PlanInputs inputs{plan::probe_local_machine(),
                                [](const char* name) { return std::getenv(name); }};
  std::optional<plan::JobPlan> job_plan = plan::make_plan(job, locations, inputs, diagnostics);
  if (!job_plan) return report_problems(diagnostics);
  const std::vector<std::string> spec_warnings = diagnostics.warnings();
  job_plan->warnings.insert(job_plan->warnings.begin(), spec_warnings.begin(), spec_warnings.end());

  if (!options.rankfile.empty()) {
    std::ofstream rankfile(options.rankfile);
    if (rankfile) rankfile << topology::to_rankfile(job_plan->placement) << std::flush;
    if (!rankfile) {
      // Read errno before anything else can change it.
      const std::string reason = std::strerror(errno);
      std::cerr << options.rankfile << ": cannot write the rankfile: " << reason << "\n";
      return kInvalidInput;
    }
  }
  if (options.json) {
    plan::write_plan_json(std::cout, job, *job_plan);
  } else {
    std::cout << plan::plan_to_text(job, *job_plan, options.max_rows);
  }
  return 0;
}

}  // namespace dslaunch::launcher
