// Planning at scale: a 16,384-host x 8-GPU hostfile (131,072 ranks), tensor 8
// x pipeline 16 x data 1024. Prints the median time of each phase beside the
// issue's target (2 s for the whole plan on a 2-core machine) and beside the
// floor of merely parsing the hostfile, all measured in this run.
//
//   bazel run //bench:plan_bench [-- RUNS]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/median_time.h"

#include "launcher/capture_output.h"
#include "launcher/plan/job_plan.h"
#include "launcher/plan/plan_json.h"
#include "core/spec/spec_parser.h"
#include "topology/hostfile.h"

namespace {

using dslaunch::bench::median_ms;

namespace fs = std::filesystem;

constexpr int kHosts = 16384;
constexpr int kSlots = 8;
constexpr double kTargetMs = 2000;

std::string write_inputs(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream hostfile(dir / "hostfile");
  for (int h = 0; h < kHosts; ++h) hostfile << fmt::format("node{:05d} slots={}\n", h, kSlots);
  std::ofstream spec(dir / "job.yaml");
  spec << R"(name: scale
cluster:
  runner: openmpi
  device: cuda
  hostfile: hostfile
  topology: {cores_per_host: 96, numa_nodes_per_host: 2, device_memory_gb: 80,
             gpu_islands: [[0, 1, 2, 3, 4, 5, 6, 7]]}
parallelism: {tensor: 8, pipeline: 16}
model: {num_layers: 96, hidden_size: 12288, num_attention_heads: 96, seq_length: 2048}
data: {train: demo}
training:
  train_batch_size: 4096
  train_micro_batch_size_per_gpu: 1
  steps: 1000
  bf16: {enabled: true}
  zero_optimization: {stage: 1}
)";
  return (dir / "job.yaml").string();
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const char* tmp = std::getenv("TMPDIR");
  const fs::path dir = fs::path(tmp ? tmp : "/tmp") / "dslaunch_plan_bench";
  const std::string spec_path = write_inputs(dir);
  std::stringstream hostfile_text;
  hostfile_text << std::ifstream(dir / "hostfile").rdbuf();

  dslaunch::spec::Diagnostics diagnostics;
  dslaunch::spec::SourceMap locations;
  dslaunch::spec::JobSpec spec;
  const dslaunch::plan::PlanInputs inputs{{}, [](const char*) -> const char* { return nullptr; }};
  std::optional<dslaunch::plan::JobPlan> plan;
  std::string json;

  const double parse_ms = median_ms(runs, [&] {
    const auto parsed = dslaunch::topology::parse_hostfile(hostfile_text.str());
    if (parsed.hosts.size() != kHosts) std::abort();
  });
  const double spec_ms = median_ms(runs, [&] {
    diagnostics = {};
    spec = dslaunch::spec::load_job_spec(spec_path, {}, diagnostics, locations);
  });
  if (diagnostics.has_errors()) {
    std::cerr << diagnostics.format();
    return 1;
  }
  const double plan_ms = median_ms(
      runs, [&] { plan = dslaunch::plan::make_plan(spec, locations, inputs, diagnostics); });
  if (!plan || plan->world_size() != kHosts * kSlots) {
    std::cerr << diagnostics.format();
    return 1;
  }
  const double json_ms = median_ms(runs, [&] {
    std::ostringstream out;
    dslaunch::plan::write_plan_json(out, spec, *plan);
    json = out.str();
  });
  // The whole command as a user runs it (bazel run starts in the runfiles tree).
  const double cli_ms = median_ms(runs, [&] {
    const auto result = dslaunch::launcher::capture_output(
        {"launcher/dslaunch", "plan", spec_path, "--rankfile", (dir / "rankfile").string()});
    if (!result || result->exit_code != 0) std::abort();
  });
  const double cli_json_ms = median_ms(runs, [&] {
    const auto result =
        dslaunch::launcher::capture_output({"launcher/dslaunch", "plan", spec_path, "--json"});
    if (!result || result->exit_code != 0) std::abort();
  });

  std::cout << fmt::format(
      "dslaunch plan at scale: {} hosts x {} slots = {} ranks (pipeline {} x data {} x tensor {})\n"
      "median of {} runs on this machine\n\n",
      kHosts, kSlots, plan->world_size(), plan->grid.shape().pipeline,
      plan->grid.shape().data, plan->grid.shape().tensor, runs);
  std::cout << fmt::format("{:<54}{:>10}\n", "phase", "ms");
  const auto row = [](const std::string& name, double ms) {
    std::cout << fmt::format("{:<54}{:>10.1f}\n", name, ms);
  };
  row("reference floor: parse the hostfile text only", parse_ms);
  row("load and check the spec (reads the DeepSpeed keys)", spec_ms);
  row("make_plan: hostfile, filters, grid, placement, memory", plan_ms);
  row(fmt::format("plan as JSON ({:.1f} MB)", json.size() / 1e6), json_ms);
  row("dslaunch plan (process, text + rankfile)", cli_ms);
  row("dslaunch plan --json (process, everything printed)", cli_json_ms);
  std::cout << fmt::format(
      "\ntarget: the whole plan under {:.0f} ms; dslaunch plan took {:.1f} ms "
      "({:.1f}x under the target), {:.1f}x the hostfile-parsing floor\n",
      kTargetMs, cli_ms, kTargetMs / cli_ms, cli_ms / parse_ms);
  return cli_ms < kTargetMs ? 0 : 1;
}
