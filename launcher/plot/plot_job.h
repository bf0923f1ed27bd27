#pragma once

#include <chrono>
#include <string>

#include "core/status.h"
#include "launcher/plot/gnuplot_script.h"

namespace dslaunch::plot {

struct PlotOptions {
  std::string output;  // the PNG to write; "" for <job dir>/plot.png
  PlotSize size;
  // The gnuplot program, looked up on PATH; tests name a stand-in.
  std::string gnuplot = "gnuplot";
  std::chrono::seconds gnuplot_timeout{120};
};

// Draws the training of the job in `job_dir` (its metrics.jsonl and
// state.json) with gnuplot into a PNG and returns the PNG's path. gnuplot
// runs on files in a fresh temporary folder (removed after) and is started
// without a shell; the PNG replaces the output atomically, so a failure
// leaves an earlier plot as it was. Errors name the problem: no metrics (or
// no training step) yet, gnuplot not installed, gnuplot failing (with what
// it printed), a file that cannot be read or written. Blocks while gnuplot
// runs, at most `gnuplot_timeout`. Safe while the job runs: its files are
// only read, and a half-written last metrics line is ignored.
core::StatusOr<std::string> plot_job(const std::string& job_dir, const PlotOptions& options);

}  // namespace dslaunch::plot
