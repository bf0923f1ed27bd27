#pragma once

#include <string>

#include "core/spec/spec_parser.h"

namespace dslaunch::launcher {

struct PlanCommandOptions {
  std::string spec_path;
  spec::LoadOptions load;
  bool json = false;
  std::string rankfile;  // "" = do not write one
  int max_rows = 64;     // rows per table in the text output
};

// `dslaunch plan`: loads and checks the spec, plans the job on the hosts it
// names, prints the plan, and writes the Open MPI rankfile when asked.
// Returns the process exit code: 0, or 2 after printing every problem.
int run_plan_command(const PlanCommandOptions& options);

}  // namespace dslaunch::launcher
