// `dslaunch plot`'s failures that need no gnuplot: an unknown job, a job
// without metrics, a gnuplot that is not installed, a gnuplot that fails (a
// stand-in script).
#include "launcher/plot/plot_job.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

#include "launcher/plot_command.h"
#include "tests/launcher/plot/synthetic_job.h"
#include "tests/support/temp_files.h"

namespace dslaunch::plot {
namespace {

using Catch::Matchers::Contains;
using dslaunch::testing::TempDir;
using dslaunch::testing::write_bytes;

// A job directory with a state.json and, when given, a metrics.jsonl.
std::string bare_job(const TempDir& temp, const std::string* metrics) {
  const std::string dir = temp.file("job");
  std::filesystem::create_directory(dir);
  write_bytes(dir + "/state.json", R"({"job_id": "job", "name": "bare", "attempts": []})");
  if (metrics != nullptr) write_bytes(dir + "/metrics.jsonl", *metrics);
  return dir;
}

}  // namespace

TEST_CASE("dslaunch plot of an unknown job says so and exits 2") {
  const TempDir temp;
  REQUIRE(setenv("DSLAUNCH_HOME", temp.path().c_str(), 1) == 0);
  CHECK(launcher::run_plot_command("no-such-job", std::nullopt) == 2);
}

TEST_CASE("a job without metrics.jsonl has nothing to plot yet") {
  const TempDir temp;
  const std::string dir = bare_job(temp, nullptr);
  const core::StatusOr<std::string> plotted = plot_job(dir, PlotOptions{});
  REQUIRE_FALSE(plotted.ok());
  CHECK_THAT(plotted.status().message(), Contains("no metrics yet: no " + dir + "/metrics.jsonl"));
  CHECK_FALSE(std::filesystem::exists(dir + "/plot.png"));
}

TEST_CASE("a job whose metrics hold no training step of rank 0 has nothing to plot yet") {
  const TempDir temp;
  const std::string metrics = R"({"rank":0,"step":0,"what":"memory","parameters_bytes":1.0})"
                              "\n"
                              R"({"rank":1,"step":1,"loss":5.0})"
                              "\n";
  const std::string dir = bare_job(temp, &metrics);
  const core::StatusOr<std::string> plotted = plot_job(dir, PlotOptions{});
  REQUIRE_FALSE(plotted.ok());
  CHECK_THAT(plotted.status().message(), Contains("no training step metrics of rank 0 yet"));
}

TEST_CASE("a missing gnuplot is named with the package that provides it") {
  const TempDir temp;
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job", "missing");
  PlotOptions options;
  options.gnuplot = "dslaunch-no-such-gnuplot";
  const core::StatusOr<std::string> plotted = plot_job(dir, options);
  REQUIRE_FALSE(plotted.ok());
  CHECK(plotted.status().code() == core::StatusCode::kFailedPrecondition);
  CHECK_THAT(plotted.status().message(),
             Contains("cannot run 'dslaunch-no-such-gnuplot'") &&
                 Contains("install gnuplot-nox (tools/setup.sh installs it)"));
}

TEST_CASE("a failing gnuplot is quoted, and no image is written") {
  const TempDir temp;
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job", "failing");
  // Stands in for gnuplot: complains like it and exits 1.
  const std::string fake = temp.file("fake-gnuplot");
  write_bytes(fake,
              "#!/bin/sh\n"
              "echo '\"plot.gp\" line 9: undefined variable: bogus' >&2\n"
              "exit 1\n");
  REQUIRE(chmod(fake.c_str(), 0755) == 0);
  PlotOptions options;
  options.gnuplot = fake;
  const core::StatusOr<std::string> plotted = plot_job(dir, options);
  REQUIRE_FALSE(plotted.ok());
  CHECK_THAT(plotted.status().message(),
             Contains("gnuplot failed (exit code 1)") &&
                 Contains("it said:\n  \"plot.gp\" line 9: undefined variable: bogus"));
  CHECK_FALSE(std::filesystem::exists(dir + "/plot.png"));
}

TEST_CASE("a gnuplot that draws nothing is an error, not an empty image") {
  const TempDir temp;
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job", "silent");
  const std::string fake = temp.file("fake-gnuplot");
  write_bytes(fake, "#!/bin/sh\nexit 0\n");
  REQUIRE(chmod(fake.c_str(), 0755) == 0);
  PlotOptions options;
  options.gnuplot = fake;
  const core::StatusOr<std::string> plotted = plot_job(dir, options);
  REQUIRE_FALSE(plotted.ok());
  CHECK_THAT(plotted.status().message(), Contains("gnuplot drew no image; it printed nothing"));
}

}  // namespace dslaunch::plot
