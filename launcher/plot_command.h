#pragma once

#include <optional>
#include <string>

namespace dslaunch::launcher {

// `dslaunch plot JOB [--out FILE.png]`: draws the job's loss and evaluation
// loss, learning rate, tokens/s and gradient norm over the steps, with each
// restart marked where it resumed, into FILE.png (default: plot.png in the
// job directory) with gnuplot. JOB as for `dslaunch status` (see
// job_commands.h). Prints the path written and returns 0; otherwise says why
// on stderr and returns 2 (an unknown job) or 1 (no metrics yet, gnuplot
// missing or failing, the PNG not writable). Blocks while gnuplot runs.
int run_plot_command(const std::string& job, const std::optional<std::string>& out);

}  // namespace dslaunch::launcher
