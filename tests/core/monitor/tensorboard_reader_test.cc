// The writer's files read by an independent reader: read_tensorboard_events.py
// decodes the records and protobufs by hand and checks the CRCs with
// Debian's python3-crc32c, sharing no code with the writer.

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/monitor/tensorboard_writer.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_files.h"

namespace dslaunch::core {
namespace {

using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

constexpr double kStart = 1700000000.25;

struct Scalar {
  std::string tag;
  int64_t step;
  float value;
  double wall_time;
};

// Debian's interpreter: python3-crc32c is installed for it, not for
// whichever python3 comes first on PATH.
testing::CommandResult read_events(const std::string& path) {
  return testing::run_command(
      fmt::format("/usr/bin/python3 '{}' '{}'",
                  testing::runfile("tests/core/monitor/read_tensorboard_events.py"), path));
}

std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> lines;
  std::istringstream stream(output);
  for (std::string line; std::getline(stream, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// The reader prints floats as Python's repr(), which round-trips exactly.
double parse_double(const nlohmann::json& repr) {
  return std::strtod(repr.get<std::string>().c_str(), nullptr);
}

std::string write_file(const TempDir& dir, const std::vector<Scalar>& scalars) {
  auto writer = TensorBoardWriter::create(dir.path(), kStart);
  REQUIRE(writer.ok());
  for (const Scalar& scalar : scalars) {
    REQUIRE(writer->add_scalar(scalar.tag, scalar.step, scalar.value, scalar.wall_time).ok());
  }
  REQUIRE(writer->close().ok());
  return writer->path();
}

TEST_CASE("the independent reader gets back exactly the scalars written") {
  const std::vector<Scalar> scalars = {
      {"Train/Samples/train_loss", 1, 10.828125f, kStart + 1.5},
      {"Train/Samples/lr", 1, 6.0e-5f, kStart + 1.5},
      {"Train/Samples/train_loss", 2, 0.1f, kStart + 2.75},
      {"zero", 0, 0.0f, kStart + 3},
      {"negative zero", 3, -0.0f, kStart + 4},
      {"denormal", 4, std::numeric_limits<float>::denorm_min(), kStart + 5},
      {"largest", 5, std::numeric_limits<float>::max(), kStart + 6},
      {"infinity", 6, -std::numeric_limits<float>::infinity(), kStart + 7},
      {"nan", 7, std::numeric_limits<float>::quiet_NaN(), kStart + 8},
      {"negative step", -1, 1.0f, kStart + 9},
      {"huge step", std::numeric_limits<int64_t>::max(), 2.0f, kStart + 10},
      {"Unicode/\xce\xbb", 8, 3.0f, kStart + 11},
  };
  const TempDir dir;
  const std::string path = write_file(dir, scalars);

  const testing::CommandResult result = read_events(path);
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  const std::vector<nlohmann::json> lines = json_lines(result.output);
  REQUIRE(lines.size() == scalars.size() + 1);
  CHECK(lines[0]["file_version"] == "brain.Event:2");
  CHECK(parse_double(lines[0]["wall_time"]) == kStart);
  CHECK(lines[0]["step"] == 0);
  for (size_t i = 0; i < scalars.size(); ++i) {
    const Scalar& scalar = scalars[i];
    const nlohmann::json& line = lines[i + 1];
    INFO(line.dump());
    CHECK(line["tag"] == scalar.tag);
    CHECK(line["step"] == scalar.step);
    CHECK(parse_double(line["wall_time"]) == scalar.wall_time);
    // Bits, not values: NaN equals nothing and -0 equals 0.
    CHECK(line["value_bits"] == fmt::format("{:08x}", std::bit_cast<uint32_t>(scalar.value)));
    if (!std::isnan(scalar.value)) CHECK(parse_double(line["value"]) == scalar.value);
  }
}

TEST_CASE("the independent reader rejects a file with any one byte changed") {
  const TempDir dir;
  const std::string file =
      read_bytes(write_file(dir, {{"loss", 1, 0.5f, kStart + 1}, {"lr", 2, 1e-4f, kStart + 2}}));
  const std::string corrupt = dir.file("corrupt");
  // Every byte is under one of the CRCs, and a CRC-32 catches every error
  // within 32 adjacent bits: no position may slip through.
  for (size_t i = 0; i < file.size(); ++i) {
    std::string changed = file;
    changed[i] = static_cast<char>(changed[i] ^ 0xFF);
    write_bytes(corrupt, changed);
    const testing::CommandResult result = read_events(corrupt);
    INFO("byte " << i << ": " << result.output);
    CHECK(result.exit_code == 1);
    CHECK_THAT(result.output, Catch::Contains("checksum mismatch"));
  }
}

TEST_CASE("the independent reader rejects a torn last record") {
  const TempDir dir;
  const std::string file = read_bytes(write_file(dir, {{"loss", 1, 0.5f, kStart + 1}}));
  const std::string torn = dir.file("torn");
  write_bytes(torn, file.substr(0, file.size() - 1));
  const testing::CommandResult result = read_events(torn);
  INFO(result.output);
  CHECK(result.exit_code == 1);
  CHECK_THAT(result.output, Catch::Contains("torn"));
}

}  // namespace
}  // namespace dslaunch::core
