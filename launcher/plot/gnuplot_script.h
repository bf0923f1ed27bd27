#pragma once

#include <string>
#include <vector>

#include "launcher/plot/training_series.h"

// The files gnuplot is given to draw a job: its data and its script. Pure
// text generation, thread-safe; plot_job.h writes and runs them.
namespace dslaunch::plot {

// The picture's size in pixels.
struct PlotSize {
  int width = 1200;
  int height = 900;
};

// The names the script gives the files in its folder.
inline constexpr char kStepsFile[] = "steps.dat";
inline constexpr char kEvalFile[] = "eval.dat";
inline constexpr char kImageFile[] = "plot.png";

// kStepsFile: "step loss lr tokens_per_s grad_norm" a line, "nan" where a
// value is missing (gnuplot leaves a gap).
std::string steps_data(const std::vector<StepPoint>& steps);

// kEvalFile: "step eval_loss" for the evaluation steps only.
std::string eval_data(const std::vector<StepPoint>& steps);

// A script drawing `steps` in four panels (loss with the evaluation loss,
// learning rate, tokens/s, gradient norm; a panel with no value is left
// blank), with a dashed vertical line at each restart's step in every panel,
// labelled "restart K (from step S)". Run it as
//   gnuplot -c SCRIPT FOLDER TITLE
// it reads FOLDER/kStepsFile (and FOLDER/kEvalFile when a step has an
// evaluation loss) and writes FOLDER/kImageFile with the pngcairo terminal,
// or png where gnuplot was built without cairo. The title, text from the
// job's spec, arrives only as ARG2: gnuplot never parses it as a command, so
// it needs no quoting. Precondition: `steps` is not empty.
std::string gnuplot_script(const std::vector<StepPoint>& steps,
                           const std::vector<Restart>& restarts, PlotSize size);

}  // namespace dslaunch::plot
