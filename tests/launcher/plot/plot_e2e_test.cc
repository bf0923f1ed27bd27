// `dslaunch plot` for real: a job directory with a restart drawn by the
// installed gnuplot (tagged requires-gnuplot; tools/setup.sh installs it).
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

#include "launcher/plot/plot_job.h"
#include "launcher/plot_command.h"
#include "tests/launcher/plot/synthetic_job.h"
#include "tests/support/temp_files.h"

namespace dslaunch::plot {
namespace {

using Catch::Matchers::Contains;
using dslaunch::testing::read_bytes;
using dslaunch::testing::TempDir;

bool gnuplot_installed() {
  const char* path = std::getenv("PATH");
  std::istringstream folders(path != nullptr ? path : "");
  for (std::string folder; std::getline(folders, folder, ':');) {
    if (!folder.empty() && access((folder + "/gnuplot").c_str(), X_OK) == 0) return true;
  }
  return false;
}

// Where the test command cannot install gnuplot it leaves this target out by
// its tag and reports it skipped; run anyway, the cases fail saying why.
void require_gnuplot() {
  INFO("gnuplot is not on PATH: install gnuplot-nox (tools/setup.sh installs it)");
  REQUIRE(gnuplot_installed());
}

uint32_t big_endian_u32(const std::string& bytes, size_t at) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}

// Checks that `path` is a PNG of `width` x `height` with some drawing in it.
void check_png(const std::string& path, uint32_t width, uint32_t height) {
  const std::string png = read_bytes(path);
  REQUIRE(png.size() > 24);
  CHECK(png.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  // The first chunk: its length (13), "IHDR", the width and the height.
  CHECK(big_endian_u32(png, 8) == 13);
  CHECK(png.substr(12, 4) == "IHDR");
  CHECK(big_endian_u32(png, 16) == width);
  CHECK(big_endian_u32(png, 20) == height);
  // Four panels of curves, axes and labels: a blank picture compresses to
  // a few kilobytes.
  CHECK(png.size() > 20000);
}

// What `run` printed on stdout.
template <typename Run>
std::string stdout_of(Run run) {
  std::ostringstream captured;
  std::streambuf* const original = std::cout.rdbuf(captured.rdbuf());
  run();
  std::cout.rdbuf(original);
  return captured.str();
}

}  // namespace

TEST_CASE("a job with a restart is drawn into a PNG of the size asked, in its directory") {
  require_gnuplot();
  const TempDir temp;
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job-1", "restarted");
  PlotOptions options;
  options.size = PlotSize{800, 600};
  const core::StatusOr<std::string> plotted = plot_job(dir, options);
  INFO(plotted.status().message());
  REQUIRE(plotted.ok());
  CHECK(plotted.value() == dir + "/plot.png");
  check_png(dir + "/plot.png", 800, 600);
}

TEST_CASE("dslaunch plot writes where --out says and prints the path") {
  require_gnuplot();
  const TempDir temp;
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job-2", "restarted");
  const std::string out = temp.file("curves.png");
  int code = -1;
  const std::string printed = stdout_of([&] { code = launcher::run_plot_command(dir, out); });
  CHECK(code == 0);
  CHECK(printed == out + "\n");
  // The default size.
  check_png(out, 1200, 900);
  CHECK_FALSE(std::filesystem::exists(dir + "/plot.png"));
}

TEST_CASE("a job name gnuplot would read as syntax is only ever a title") {
  require_gnuplot();
  const TempDir temp;
  const std::string planted = temp.file("planted.png");
  const std::string name = "it's a \"job\"_name'; set output '" + planted + "'; #";
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job-3", name);
  const core::StatusOr<std::string> plotted = plot_job(dir, PlotOptions{});
  INFO(plotted.status().message());
  REQUIRE(plotted.ok());
  check_png(plotted.value(), 1200, 900);
  CHECK_FALSE(std::filesystem::exists(planted));
}

TEST_CASE("an output in a folder that does not exist is refused, naming it") {
  require_gnuplot();
  const TempDir temp;
  const std::string dir = testing::write_two_attempt_job(temp.path(), "job-4", "restarted");
  PlotOptions options;
  options.output = temp.file("no-such-folder/plot.png");
  const core::StatusOr<std::string> plotted = plot_job(dir, options);
  REQUIRE_FALSE(plotted.ok());
  CHECK(plotted.status().code() == core::StatusCode::kIoError);
  CHECK_THAT(plotted.status().message(), Contains(temp.file("no-such-folder")));
}

}  // namespace dslaunch::plot
