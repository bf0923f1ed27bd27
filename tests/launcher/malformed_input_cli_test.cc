// Malformed inputs given to dslaunch as a careless user or an attacker would:
// each one exits non-zero with a message that names the file and what is
// wrong, never with a signal, an abort or exit 0 (issue 12).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "tests/support/run_command.h"

namespace {

namespace fs = std::filesystem;
using dslaunch::testing::run_command;
using dslaunch::testing::runfile;

fs::path work_dir() {
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "malformed";
  fs::create_directories(dir);
  return dir;
}

std::string write(const std::string& name, const std::string& text) {
  const fs::path path = work_dir() / name;
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

std::string nested_yaml_map(int depth) {
  std::string nested = "x";
  for (int i = 0; i < depth; ++i) nested = "{a: " + nested + "}";
  return nested;
}

std::string safetensors_with_header(const std::string& header) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return bytes + header;
}

struct Case {
  std::string what;
  std::string args;      // after `dslaunch`
  std::string file;      // the message names it
  std::string expected;  // and says this
};

}  // namespace

TEST_CASE("malformed inputs exit non-zero with a message naming the file") {
  const std::string minimal = "training: {steps: 1}\ndata: {train: demo}\ncluster: {device: cpu}\n";
  const std::string laughs = [] {
    std::string text = "x-a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 10; ++i) {
      text += "x-a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
      for (int j = 0; j < 10; ++j) text += (j ? ", *a" : "*a") + std::to_string(i - 1);
      text += "]\n";
    }
    return text;
  }();
  const std::string deep_json = "{\"x\": " + std::string(100, '[') + std::string(100, ']') + "}";
  const std::string deeper_json =
      "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  write("ds-deep.json", deep_json);
  write("ds-deeper.json", deeper_json);
  write("job/state.json", std::string(100000, '['));
  const std::string job = (work_dir() / "job").string();

  const Case cases[] = {
      {"a spec nested 100 deep", "plan " + write("deep.yaml", minimal + "model: " + nested_yaml_map(100) + "\n"),
       "deep.yaml", "nest deeper than 64 levels"},
      {"a billion laughs", "plan " + write("laughs.yaml", minimal + laughs), "laughs.yaml",
       "more than 1048576 values"},
      {"cores_per_host 2^31",
       "plan " + write("cores.yaml", "training: {steps: 1}\ndata: {train: demo}\n"
                                     "cluster: {device: cpu, topology: {cores_per_host: 2147483648}}\n"),
       "cores.yaml", "cores_per_host must be between 1 and 16384"},
      {"heartbeats of 1e9 s",
       "plan " + write("heartbeat.yaml", minimal + "fault_tolerance: {heartbeat_interval: 1e9, "
                                                   "heartbeat_timeout: 2e9}\n"),
       "heartbeat.yaml", "heartbeat_interval must be between 0.01 and 3600"},
      {"a DeepSpeed config nested 100 deep",
       "plan " + write("ds-deep.yaml", "deepspeed_config: ds-deep.json\n" + minimal), "ds-deep.json",
       "nest deeper than 64 levels"},
      {"a DeepSpeed config nested 100000 deep",
       "plan " + write("ds-deeper.yaml", "deepspeed_config: ds-deeper.json\n" + minimal),
       "ds-deeper.json", "nested deeper than 512 levels"},
      {"a safetensors header nested 100000 deep",
       "export " +
           write("deep.safetensors",
                 safetensors_with_header("{\"__metadata__\":" + std::string(100000, '[') +
                                         std::string(100000, ']') + "}")) +
           " --out " + (work_dir() / "out.safetensors").string(),
       "deep.safetensors", "nest deeper than 64 levels"},
      {"a state.json nested 100000 deep", "status " + job, "state.json",
       "nest deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const auto result = run_command(runfile("launcher/dslaunch") + " " + c.args);
    INFO(result.output);
    CHECK(result.exit_code > 0);
    CHECK(result.exit_code < 64);  // a usage or input error, not an escaped exception
    CHECK_THAT(result.output, Catch::Contains(c.file) && Catch::Contains(c.expected));
  }
}
