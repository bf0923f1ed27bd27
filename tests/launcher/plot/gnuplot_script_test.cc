#include "launcher/plot/gnuplot_script.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::plot {
namespace {

std::vector<StepPoint> steps_from(int64_t first, int64_t last) {
  std::vector<StepPoint> steps;
  for (int64_t step = first; step <= last; ++step) {
    StepPoint point;
    point.step = step;
    point.loss = 5.0 - 0.25 * static_cast<double>(step);
    point.lr = 0.001;
    point.tokens_per_s = 250;
    point.grad_norm = 1.5;
    steps.push_back(point);
  }
  return steps;
}

size_t count(const std::string& text, const std::string& part) {
  size_t found = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) {
    ++found;
  }
  return found;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("the script marks each restart once, at the step it resumed from") {
  const std::string script =
      gnuplot_script(steps_from(1, 100), {{1, 40}, {2, 75}}, PlotSize{800, 600});
  INFO(script);
  CHECK(count(script, "set arrow") == 2);
  CHECK(count(script, "set arrow from 40, graph 0 to 40, graph 1 nohead") == 1);
  CHECK(count(script, "set arrow from 75, graph 0 to 75, graph 1 nohead") == 1);
  CHECK(count(script, "set label") == 2);
  CHECK(count(script, "set label 'restart 1 (from step 40)' at 40, graph") == 1);
  CHECK(count(script, "set label 'restart 2 (from step 75)' at 75, graph") == 1);
}

TEST_CASE("a job without restarts has no marker") {
  const std::string script = gnuplot_script(steps_from(1, 10), {}, PlotSize{});
  CHECK_FALSE(contains(script, "set arrow"));
  CHECK_FALSE(contains(script, "set label"));
}

TEST_CASE("labels of restarts from the same step are set apart") {
  const std::string script = gnuplot_script(steps_from(1, 50), {{1, 40}, {2, 40}}, PlotSize{});
  INFO(script);
  CHECK(contains(script,
                 "'restart 1 (from step 40)' at 40, graph 0.97 rotate by 90 right "
                 "offset -1.2,0"));
  CHECK(contains(script,
                 "'restart 2 (from step 40)' at 40, graph 0.97 rotate by 90 right "
                 "offset -2.4,0"));
}

TEST_CASE("the x range spans the steps and every restart, one from step 0 included") {
  CHECK(contains(gnuplot_script(steps_from(41, 90), {{1, 40}}, PlotSize{}), "set xrange [40:90]"));
  CHECK(contains(gnuplot_script(steps_from(1, 90), {{1, 0}}, PlotSize{}), "set xrange [0:90]"));
  // A single step still gets a range gnuplot accepts, and a point to show.
  const std::string single = gnuplot_script(steps_from(7, 7), {}, PlotSize{});
  CHECK(contains(single, "set xrange [7:8]"));
  CHECK(contains(single, "with points"));
}

TEST_CASE("the script draws four panels at the size asked, title and output from its arguments") {
  const std::string script = gnuplot_script(steps_from(1, 10), {}, PlotSize{640, 480});
  INFO(script);
  CHECK(contains(script, "set terminal pngcairo size 640,480"));
  CHECK(contains(script, "set terminal png size 640,480"));
  CHECK(contains(script, "set output folder.'/plot.png'"));
  CHECK(contains(script, "set multiplot layout 2,2 title ARG2"));
  CHECK(count(script, "\nplot ") == 4);
  for (const char* title : {"loss", "learning rate", "tokens/s", "gradient norm"}) {
    CHECK(contains(script, std::string("set title '") + title + "'"));
  }
  // No evaluation step: no evaluation curve (gnuplot fails on an empty file).
  CHECK_FALSE(contains(script, "eval.dat"));
}

TEST_CASE("the evaluation loss is drawn with the loss when some step has one") {
  std::vector<StepPoint> steps = steps_from(1, 10);
  steps[4].eval_loss = 4.5;
  const std::string script = gnuplot_script(steps, {}, PlotSize{});
  INFO(script);
  CHECK(contains(script,
                 "folder.'/steps.dat' using 1:2 with lines lw 1.5 title 'loss', "
                 "folder.'/eval.dat' using 1:2 with linespoints pt 7 title 'eval loss'"));
}

TEST_CASE("a panel without any value is left blank rather than failing gnuplot") {
  std::vector<StepPoint> steps = steps_from(1, 10);
  for (StepPoint& point : steps) point.grad_norm = kMissing;
  const std::string script = gnuplot_script(steps, {}, PlotSize{});
  CHECK(count(script, "\nplot ") == 3);
  CHECK(count(script, "set multiplot next") == 1);
  CHECK_FALSE(contains(script, "using 1:5"));
}

TEST_CASE("the data files hold every step, gaps as nan, and the evaluation steps alone") {
  std::vector<StepPoint> steps = steps_from(1, 3);
  steps[1].grad_norm = kMissing;
  steps[2].eval_loss = 4.125;
  CHECK(steps_data(steps) ==
        "# step loss lr tokens_per_s grad_norm\n"
        "1 4.75 0.001 250 1.5\n"
        "2 4.5 0.001 250 nan\n"
        "3 4.25 0.001 250 1.5\n");
  CHECK(eval_data(steps) == "# step eval_loss\n3 4.125\n");
}

}  // namespace dslaunch::plot
