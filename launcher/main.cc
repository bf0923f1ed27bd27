// dslaunch: the command-line front end. Each subcommand is a small function;
// parsing and exit codes are handled here only.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "launcher/environment_report.h"
#include "launcher/plan_command.h"
#include "tools/build_info/build_info.h"

namespace {

// Exit code for a command line that could not be parsed (as argparse does).
constexpr int kUsageError = 2;

int run_report(bool as_json) {
  const auto report = dslaunch::launcher::collect_environment_report();
  if (as_json) {
    std::cout << dslaunch::launcher::to_json(report).dump(2) << "\n";
  } else {
    std::cout << dslaunch::launcher::to_text(report);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dslaunch starts and watches distributed GPT training jobs described by a YAML job spec.",
      "dslaunch"};
  app.set_version_flag("--version", dslaunch::version_line("dslaunch"),
                       "Print the version and git commit, then exit");
  app.require_subcommand(0, 1);

  bool report_json = false;
  CLI::App* report = app.add_subcommand(
      "report", "Print this machine's environment: CPU, memory, BLAS, MPI, CUDA, and fixes");
  report->add_flag("--json", report_json, "Print one JSON object instead of text");

  dslaunch::launcher::PlanCommandOptions plan_options;
  CLI::App* plan =
      app.add_subcommand("plan",
                         "Check a job spec and show where every rank would run, with batch sizes, "
                         "groups and memory");
  plan->add_option("spec", plan_options.spec_path, "The job spec (YAML)")->required();
  plan->add_option("--hostfile", plan_options.load.hostfile,
                   "DeepSpeed hostfile (`host slots=N` lines); overrides cluster.hostfile");
  plan->add_option("--include", plan_options.load.include,
                   "Only these hosts/slots, as host1:0,1@host2 (DeepSpeed syntax)");
  plan->add_option("--exclude", plan_options.load.exclude,
                   "All but these hosts/slots, as host1:0,1@host2");
  plan->add_option("--set", plan_options.load.overrides,
                   "Override a spec value, as key.path=value (repeatable)")
      ->take_all();
  plan->add_option("--rankfile", plan_options.rankfile,
                   "Also write the placement as an Open MPI rankfile to this path");
  plan->add_flag("--json", plan_options.json, "Print one JSON object instead of text");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kUsageError;
  }
  if (report->parsed()) return run_report(report_json);
  if (plan->parsed()) return dslaunch::launcher::run_plan_command(plan_options);
  std::cerr << app.help() << "\ndslaunch: a subcommand is required\n";
  return kUsageError;
}
