#include "launcher/plot/gnuplot_script.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

namespace dslaunch::plot {
namespace {

constexpr char kRestartColor[] = "#cc0000";

// One panel: a column of kStepsFile.
struct Panel {
  const char* title;
  int column;
  double StepPoint::*value;
};

constexpr Panel kLoss{"loss", 2, &StepPoint::loss};
constexpr Panel kLearningRate{"learning rate", 3, &StepPoint::lr};
constexpr Panel kTokensPerSecond{"tokens/s", 4, &StepPoint::tokens_per_s};
constexpr Panel kGradientNorm{"gradient norm", 5, &StepPoint::grad_norm};

bool has_values(const std::vector<StepPoint>& steps, double StepPoint::*value) {
  return std::any_of(steps.begin(), steps.end(),
                     [&](const StepPoint& point) { return !std::isnan(point.*value); });
}

bool has_eval(const std::vector<StepPoint>& steps) {
  return std::any_of(steps.begin(), steps.end(),
                     [](const StepPoint& point) { return point.eval_loss.has_value(); });
}

std::string data_file(const char* name) { return fmt::format("folder.'/{}'", name); }

// The `plot` command of a panel, or a skip to the next one when it would
// have nothing to draw (gnuplot fails on a plot whose every value is NaN).
std::string panel_plot(const Panel& panel, const std::vector<StepPoint>& steps,
                       const std::string& style, bool with_eval) {
  std::vector<std::string> curves;
  if (has_values(steps, panel.value)) {
    // A key only where it tells two curves apart.
    curves.push_back(fmt::format("{} using 1:{} with {} lw 1.5 {}", data_file(kStepsFile),
                                 panel.column, style,
                                 with_eval ? fmt::format("title '{}'", panel.title) : "notitle"));
  }
  if (with_eval) {
    curves.push_back(
        fmt::format("{} using 1:2 with linespoints pt 7 title 'eval loss'", data_file(kEvalFile)));
  }
  if (curves.empty()) return "set multiplot next\n";
  return fmt::format("set title '{}'\nplot {}\n", panel.title, fmt::join(curves, ", "));
}

// The dashed line and label of every restart, drawn in each panel. Labels
// of restarts from the same step are set side by side rather than on top of
// each other.
std::string restart_markers(const std::vector<Restart>& restarts) {
  std::string script;
  std::map<int64_t, int> earlier_at_step;
  for (const Restart& restart : restarts) {
    const int beside = earlier_at_step[restart.from_step]++;
    script += fmt::format(
        "set arrow from {0}, graph 0 to {0}, graph 1 nohead lc rgb '{1}' dt 2 lw 1.5\n"
        "set label 'restart {2} (from step {0})' at {0}, graph 0.97 rotate by 90 right "
        "offset {3:.1f},0 tc rgb '{1}'\n",
        restart.from_step, kRestartColor, restart.attempt, -1.2 * (beside + 1));
  }
  return script;
}

}  // namespace

std::string steps_data(const std::vector<StepPoint>& steps) {
  std::string text = "# step loss lr tokens_per_s grad_norm\n";
  for (const StepPoint& point : steps) {
    text += fmt::format("{} {} {} {} {}\n", point.step, point.loss, point.lr, point.tokens_per_s,
                        point.grad_norm);
  }
  return text;
}

std::string eval_data(const std::vector<StepPoint>& steps) {
  std::string text = "# step eval_loss\n";
  for (const StepPoint& point : steps) {
    if (point.eval_loss) text += fmt::format("{} {}\n", point.step, *point.eval_loss);
  }
  return text;
}

std::string gnuplot_script(const std::vector<StepPoint>& steps,
                           const std::vector<Restart>& restarts, PlotSize size) {
  // The restarts widen the range: one from step 0 (no checkpoint) still shows.
  int64_t first = steps.front().step;
  int64_t last = steps.back().step;
  for (const Restart& restart : restarts) {
    first = std::min(first, restart.from_step);
    last = std::max(last, restart.from_step);
  }
  // gnuplot refuses an empty x range, as a single step would give.
  if (last == first) ++last;
  // One point draws no line.
  const std::string style = steps.size() > 1 ? "lines" : "points pt 7";

  std::string script = fmt::format(
      "# dslaunch plot; run as: gnuplot -c THIS_FILE FOLDER TITLE\n"
      "folder = ARG1\n"
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {{\n"
      "  set terminal pngcairo size {0},{1} noenhanced font ',10'\n"
      "}} else {{\n"
      "  set terminal png size {0},{1} noenhanced\n"
      "}}\n"
      "set output {2}\n"
      "set xrange [{3}:{4}]\n"
      "set xlabel 'step'\n"
      "set grid\n"
      // gnuplot's default tick format prints a constant learning rate's
      // ticks, 0.001 +- 1%, as the same number several times.
      "set format y '%g'\n"
      // A flat curve (a constant learning rate) would lie on the frame.
      "set offsets 0, 0, graph 0.05, graph 0.05\n",
      size.width, size.height, data_file(kImageFile), first, last);
  script += restart_markers(restarts);
  script += "set multiplot layout 2,2 title ARG2\n";
  script += panel_plot(kLoss, steps, style, has_eval(steps));
  for (const Panel& panel : {kLearningRate, kTokensPerSecond, kGradientNorm}) {
    script += panel_plot(panel, steps, style, false);
  }
  script += "unset multiplot\n";
  return script;
}

}  // namespace dslaunch::plot
