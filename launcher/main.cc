// dslaunch: the command-line front end. Each subcommand is a small function;
// parsing and exit codes are handled here only.
#include <cstdio>
#include <iostream>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/escaped_exception.h"
#include "launcher/controller/job_controller.h"
#include "launcher/environment_report.h"
#include "launcher/job_commands.h"
#include "launcher/job_dir_path.h"
#include "launcher/model_commands.h"
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

dslaunch::controller::ProgressDisplay::Mode progress_mode(const std::string& name) {
  using Mode = dslaunch::controller::ProgressDisplay::Mode;
  return name == "bar"     ? Mode::kTerminal
         : name == "plain" ? Mode::kPlain
         : name == "off"   ? Mode::kOff
                           : dslaunch::controller::ProgressDisplay::mode_for(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
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
                   "Override a spec value, as key.path=value or key.list[N].key=value (repeatable)")
      ->take_all();
  plan->add_option("--rankfile", plan_options.rankfile,
                   "Also write the placement as an Open MPI rankfile to this path");
  plan->add_flag("--json", plan_options.json, "Print one JSON object instead of text");

  dslaunch::controller::RunOptions run_options;
  std::string progress = "auto";
  CLI::App* run = app.add_subcommand(
      "run", "Start the job: every rank through the spec's runner, watched until it ends");
  run->add_option("spec", run_options.spec_path, "The job spec (YAML)")->required();
  CLI::Option* run_job_dir = run->add_option(
      "--job-dir", run_options.job_dir, "The job's directory (default: ~/.dslaunch/jobs/<job id>)");
  run->add_option("--hostfile", run_options.load.hostfile, "DeepSpeed hostfile");
  run->add_option("--include", run_options.load.include, "Only these hosts/slots");
  run->add_option("--exclude", run_options.load.exclude, "All but these hosts/slots");
  run->add_option("--set", run_options.load.overrides,
                  "Override a spec value, as key.path=value or key.list[N].key=value (repeatable)")
      ->take_all();
  run->add_option("--progress", progress, "auto (a bar on a terminal), bar, plain or off")
      ->check(CLI::IsMember({"auto", "bar", "plain", "off"}));

  std::string resume_job;
  std::string resume_progress = "auto";
  CLI::App* resume = app.add_subcommand(
      "resume", "Continue a job that is not running from its newest valid checkpoint");
  resume->add_option("job", resume_job, "A job id, a unique prefix of one, or a job directory")
      ->required();
  resume->add_option("--progress", resume_progress, "auto (a bar on a terminal), bar, plain or off")
      ->check(CLI::IsMember({"auto", "bar", "plain", "off"}));

  std::optional<std::string> status_job;
  bool status_json = false;
  CLI::App* status = app.add_subcommand(
      "status", "Where every job stands, or with JOB where each of its ranks stands");
  status->add_option("job", status_job, "A job id, a unique prefix of one, or a job directory");
  status->add_flag("--json", status_json, "Print JSON instead of a table");

  CLI::App* list = app.add_subcommand("list", "Every job: id, state and directory");

  std::string stop_job;
  bool stop_now = false;
  CLI::App* stop = app.add_subcommand(
      "stop", "Stop a running job: gracefully (the ranks finish their step), or --now");
  stop->add_option("job", stop_job, "The job")->required();
  stop->add_flag("--now", stop_now, "Kill the ranks at once");

  std::string checkpoint_job;
  CLI::App* checkpoint = app.add_subcommand(
      "checkpoint", "Ask a running training job for a checkpoint after its next step");
  checkpoint->add_option("job", checkpoint_job, "The job")->required();

  std::string logs_job;
  std::optional<int> logs_rank;
  bool logs_follow = false;
  CLI::App* logs = app.add_subcommand("logs", "Print a job's output (its latest attempt)");
  logs->add_option("job", logs_job, "The job")->required();
  logs->add_option("--rank", logs_rank, "Only this rank (stdout to stdout, stderr to stderr)");
  logs->add_flag("--follow,-f", logs_follow, "Keep printing new output until the job ends");

  std::string export_source;
  std::string export_out;
  CLI::App* export_command = app.add_subcommand(
      "export", "Write a job's (or a weights file's) model as Hugging Face GPT-2 safetensors");
  export_command->add_option("source", export_source, "A job, job directory or .safetensors file")
      ->required();
  export_command
      ->add_option("--out", export_out,
                   "The .safetensors file to write (config.json "
                   "goes beside it)")
      ->required();

  // The model runs in the worker: `eval` hands its arguments, --help
  // included, to `dsworker eval`, which defines and checks them.
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Mean cross-entropy of GPT-2 weights over consecutive windows of a token file "
      "(dslaunch eval --help lists its options)");
  eval->set_help_flag();
  eval->prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int code = app.exit(error);
    return code == 0 ? 0 : kUsageError;
  }
  if (report->parsed()) return run_report(report_json);
  if (plan->parsed()) return dslaunch::launcher::run_plan_command(plan_options);
  if (run->parsed()) {
    if (run_job_dir->count() > 0) {
      std::string error;
      const auto dir = dslaunch::launcher::normalized_job_dir(run_options.job_dir, error);
      if (!dir) {
        std::cerr << "dslaunch run: --job-dir: " << error << "\n";
        return kUsageError;
      }
      run_options.job_dir = *dir;
    }
    run_options.progress = progress_mode(progress);
    return dslaunch::controller::run_job(run_options);
  }
  if (resume->parsed()) {
    std::string error;
    const std::optional<std::string> dir = dslaunch::launcher::resumable_job_dir(resume_job, error);
    if (!dir) {
      std::cerr << "dslaunch resume: " << error << "\n";
      return kUsageError;
    }
    dslaunch::controller::RunOptions resume_options;
    resume_options.spec_path = *dir + "/spec.yaml";
    resume_options.job_dir = *dir;
    resume_options.progress = progress_mode(resume_progress);
    return dslaunch::controller::run_job(resume_options);
  }
  if (status->parsed()) return dslaunch::launcher::run_status_command(status_job, status_json);
  if (list->parsed()) return dslaunch::launcher::run_list_command();
  if (stop->parsed()) return dslaunch::launcher::run_stop_command(stop_job, stop_now);
  if (checkpoint->parsed()) return dslaunch::launcher::run_checkpoint_command(checkpoint_job);
  if (logs->parsed()) return dslaunch::launcher::run_logs_command(logs_job, logs_rank, logs_follow);
  if (export_command->parsed()) {
    return dslaunch::launcher::run_export_command(export_source, export_out);
  }
  if (eval->parsed()) return dslaunch::launcher::run_eval_command(argc, argv);
  std::cerr << app.help() << "\ndslaunch: a subcommand is required\n";
  return kUsageError;
}
catch (...) {
  return dslaunch::core::report_escaped_exception("dslaunch");
}
