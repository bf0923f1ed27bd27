// dslaunch: the command-line front end. Each subcommand is a small function;
// parsing and exit codes are handled here only.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "launcher/environment_report.h"
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kUsageError;
  }
  if (report->parsed()) return run_report(report_json);
  std::cerr << app.help() << "\ndslaunch: a subcommand is required\n";
  return kUsageError;
}
