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
#include "launcher/plot_command.h"
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

// The spec's cluster keys DeepSpeed's launcher takes as flags, the command
// line winning over the spec, on `plan` and `run` alike.
void add_launcher_flags(CLI::App& command, dslaunch::spec::LoadOptions& load) {
  command.add_option("-H,--hostfile", load.hostfile,
                     "DeepSpeed hostfile (`host slots=N` lines); overrides cluster.hostfile");
  command.add_option("-i,--include", load.include,
                     "Only these hosts/slots, as host1:0,1@host2 (DeepSpeed syntax)");
  command.add_option("-e,--exclude", load.exclude,
                     "All but these hosts/slots, as host1:0,1@host2");
  command.add_option("--num_nodes", load.num_nodes, "Use the first N hosts (cluster.num_nodes)");
  command.add_option("--num_gpus", load.num_gpus,
                     "Ranks per host, or on this machine (cluster.num_gpus)");
  command.add_option("--master_addr", load.master_addr,
                     "MASTER_ADDR the ranks get (cluster.master_addr; default rank 0's host)");
  command.add_option("--master_port", load.master_port,
                     "MASTER_PORT the ranks get (cluster.master_port; default a free port)");
  command.add_option("--launcher", load.launcher,
                     "How ranks start: openmpi, slurm or local (cluster.runner)");
  command.add_option("--launcher_args", load.launcher_args,
                     "Extra arguments for mpirun or srun (cluster.launcher_args)");
  command
      .add_option("--set", load.overrides,
                  "Override a spec value, as key.path=value or key.list[N].key=value (repeatable)")
      ->take_all();
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
  add_launcher_flags(*plan, plan_options.load);
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
  add_launcher_flags(*run, run_options.load);
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
  std::optional<int> logs_attempt;
  bool logs_follow = false;
  CLI::App* logs = app.add_subcommand("logs", "Print a job's output (its latest attempt)");
  logs->add_option("job", logs_job, "The job")->required();
  logs->add_option("--rank", logs_rank, "Only this rank (stdout to stdout, stderr to stderr)");
  logs->add_option("--attempt", logs_attempt, "This attempt's output (0 = the first; default the latest)")
      ->check(CLI::NonNegativeNumber);
  logs->add_flag("--follow,-f", logs_follow, "Keep printing new output until the job ends");

  std::string plot_job;
  std::optional<std::string> plot_out;
  CLI::App* plot = app.add_subcommand(
      "plot", "Draw a job's loss, evaluation loss, learning rate and tokens/s over the steps");
  plot->add_option("job", plot_job, "The job")->required();
  plot->add_option("--out", plot_out, "The PNG to write (default: plot.png in the job directory)");

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
  // The same for `generate`, once a --weights naming a job is its directory.
  CLI::App* generate = app.add_subcommand(
      "generate",
      "Sample text (or tokens) from GPT-2 weights or a job's, with a KV cache "
      "(dslaunch generate --help lists its options)");
  generate->set_help_flag();
  generate->prefix_command();
  CLI::App* selftest = app.add_subcommand(
      "selftest",
      "Check a GPU (or --device emulated): every kernel and a short training run against the "
      "CPU backend (dslaunch selftest --help lists its options)");
  selftest->set_help_flag();
  selftest->prefix_command();

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
  if (logs->parsed()) {
    return dslaunch::launcher::run_logs_command(logs_job, logs_rank, logs_attempt, logs_follow);
  }
  if (plot->parsed()) return dslaunch::launcher::run_plot_command(plot_job, plot_out);
  if (export_command->parsed()) {
    return dslaunch::launcher::run_export_command(export_source, export_out);
  }
  if (eval->parsed()) return dslaunch::launcher::run_eval_command(argc, argv);
  if (generate->parsed()) return dslaunch::launcher::run_generate_command(argc, argv);
  if (selftest->parsed()) return dslaunch::launcher::run_selftest_command(argc, argv);
  std::cerr << app.help() << "\ndslaunch: a subcommand is required\n";
  return kUsageError;
}
catch (...) {
  return dslaunch::core::report_escaped_exception("dslaunch");
}
