#include "launcher/plot_command.h"

#include <iostream>

#include "launcher/job_commands.h"
#include "launcher/plot/plot_job.h"

namespace dslaunch::launcher {
namespace {

constexpr int kOk = 0;
constexpr int kFailed = 1;
constexpr int kBadInput = 2;

}  // namespace

int run_plot_command(const std::string& job, const std::optional<std::string>& out) {
  std::string error;
  const auto directory = find_job(job, error);
  if (!directory) {
    std::cerr << "dslaunch plot: " << error << "\n";
    return kBadInput;
  }
  plot::PlotOptions options;
  if (out) options.output = *out;
  const core::StatusOr<std::string> written = plot::plot_job(directory->path(), options);
  if (!written.ok()) {
    std::cerr << "dslaunch plot: job " << directory->job_id() << ": " << written.status().message()
              << "\n";
    return kFailed;
  }
  std::cout << written.value() << "\n";
  return kOk;
}

}  // namespace dslaunch::launcher
