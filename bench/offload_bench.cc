// ZeRO-Infinity's optimizer offload at GPT-2 124M's size, one rank: the CPU
// AdamW step with the moments in memory, beside PyTorch's AdamW (foreach) on
// as many parameters and beside the memory bound (Adam's 28 bytes a
// parameter at the rate the engine's in-place add streams memory); and the
// step with the moments swapped to a folder (offload_optimizer
// nvme), its swap traffic beside dd's direct reads and writes of as many
// bytes in the same folder. Measured in the same run.
//
//   bazel run //bench:offload_bench -- --dir /path/on/nvme
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/command_output.h"
#include "bench/median_time.h"
#include "bench/runfile.h"
#include "core/layout/model_config.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "core/swap_file.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_setup.h"
#include "topology/machine_topology.h"
#include "worker/engine/optimizer.h"

namespace {

using dslaunch::bench::median_ms;

// What `command` prints, or "" when it fails.
std::string run(const std::string& command) {
  const dslaunch::bench::CommandOutput output = dslaunch::bench::run_command(command);
  return output.status == 0 ? output.text : "";
}

[[noreturn]] void fail(const std::string& message) {
  std::cerr << "offload_bench: " << message << "\n";
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  dslaunch::kernels::ensure_fast_blas(argv);
  namespace engine = dslaunch::worker::engine;
  CLI::App app{"CPU Adam and optimizer offload to NVMe, beside PyTorch, memory and dd"};
  std::string dir = "/tmp";
  int threads = 2;
  int runs = 3;
  int64_t group = 8 << 20;
  int buffers = 4;
  app.add_option("--dir", dir, "Folder for the swap file (on the NVMe drive)");
  app.add_option("--threads", threads, "Compute threads");
  app.add_option("--runs", runs, "Timed steps (median reported)");
  app.add_option("--sub-group-size", group, "Elements per swap group");
  app.add_option("--buffer-count", buffers, "Swap buffers");
  dslaunch::core::SwapFile::Io io;
  app.add_option("--block-size", io.block_size, "aio.block_size: bytes per I/O request");
  app.add_option("--queue-depth", io.queue_depth, "aio.queue_depth: requests in flight");
  CLI11_PARSE(app, argc, argv);
  dslaunch::kernels::set_compute_threads(threads);
  auto backend = dslaunch::kernels::make_cpu_backend(threads);

  const dslaunch::spec::ModelSpec gpt2;  // the defaults: GPT-2 124M
  const dslaunch::core::ParameterTable table(dslaunch::core::model_config(gpt2, 1));
  const int64_t n = table.total();
  std::vector<float> params(n), grads(n);
  std::mt19937 engine_rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (int64_t i = 0; i < n; ++i) {
    params[i] = normal(engine_rng);
    grads[i] = normal(engine_rng) * 0.05f;
  }
  dslaunch::spec::OptimizerSpec spec;
  spec.weight_decay = 0.1;
  const auto step_ms = [&](engine::AdamW& adam) {
    if (!adam.step(*backend, params.data(), grads.data(), 1e-4).ok()) fail("warm-up step failed");
    return median_ms(runs, [&] {
      if (!adam.step(*backend, params.data(), grads.data(), 1e-4).ok()) fail("step failed");
    });
  };
  engine::AdamW in_memory(spec, table, 0, n);
  const double memory_ms = step_ms(in_memory);

  // The bus, with the engine's own vectorised kernel on the same threads: an
  // in-place add (read two arrays, write one back where it was read, so no
  // extra write-allocate traffic) moves 12 bytes an element. Adam moves 28
  // a parameter (parameters, gradients and both moments read, three of them
  // written), so at the bus's rate a step takes no less than 28/12 of it.
  const double add_ms = median_ms(
      runs, [&] { backend->residual_forward(grads.data(), grads.data(), params.data(), n); });
  const double bus_gb_s = 12.0 * static_cast<double>(n) / (add_ms * 1e6);
  const double bound_ms = 28.0 * static_cast<double>(n) / (bus_gb_s * 1e6);
  // The gradients grew by the parameters each time: back to small values.
  for (int64_t i = 0; i < n; ++i) grads[i] = normal(engine_rng) * 0.05f;

  engine::AdamW swapped(spec, table, 0, n);
  engine::MomentSwap swap;
  swap.folder = dir;
  swap.group_elements = group;
  swap.buffer_count = buffers;
  swap.io = io;
  if (dslaunch::core::Status status = swapped.swap_moments(swap); !status.ok()) {
    fail(status.message());
  }
  const double swap_ms = step_ms(swapped);
  const double swap_bytes = 2.0 * 2.0 * 4.0 * static_cast<double>(n);  // both moments, in and out

  // dd on the same folder: the moments' bytes written and read directly.
  const std::string source = dir + "/offload-bench-source.bin";
  const std::string target = dir + "/offload-bench-dd.bin";
  {
    std::ofstream out(source, std::ios::binary);
    // Both moments' bytes, from the parameters (data, not zeros a virtual
    // disk could skip).
    for (int64_t written = 0; written < 8 * n;) {
      const int64_t chunk = std::min<int64_t>(8 * n - written, 4 * n);
      out.write(reinterpret_cast<const char*>(params.data()), chunk);
      written += chunk;
    }
  }
  (void)run(fmt::format("cat {} > /dev/null", source));
  const double dd_write_ms = median_ms(runs, [&] {
    (void)run(
        fmt::format("dd if={} of={} bs=8M oflag=direct conv=fsync status=none", source, target));
  });
  const double dd_read_ms = median_ms(runs, [&] {
    (void)run(fmt::format("dd if={} of=/dev/null bs=8M iflag=direct status=none", target));
  });
  std::filesystem::remove(source);
  std::filesystem::remove(target);
  const double moment_bytes = 8.0 * static_cast<double>(n);
  const double dd_gb_s = 2 * moment_bytes / ((dd_write_ms + dd_read_ms) * 1e6);

  const std::string script = dslaunch::bench::runfile(argv[0], "tools/reference/gpt2_reference.py");
  const std::string torch_output =
      run(fmt::format("/usr/bin/python3 {} adam-bench --params {} --threads {} --steps {}", script,
                      n, threads, runs));
  const nlohmann::json torch = nlohmann::json::parse(
      torch_output.substr(std::min(torch_output.rfind('{'), torch_output.size())), nullptr, false);

  const dslaunch::topology::MachineTopology machine = dslaunch::topology::probe_machine_topology();
  std::cout << fmt::format("{} ({} threads); {} parameters (GPT-2 124M); median of {}\n\n",
                           machine.cpu_model.empty() ? "an unnamed CPU" : machine.cpu_model,
                           threads, n, runs);
  const auto per_s = [n](double ms) { return static_cast<double>(n) / (ms * 1e3); };
  std::cout << fmt::format("{:<46} {:>10} {:>14}\n", "AdamW step", "ms", "Mparams/s");
  std::cout << fmt::format("{:<46} {:>10.1f} {:>14.1f}\n", "dslaunch, moments in memory", memory_ms,
                           per_s(memory_ms));
  if (!torch.is_discarded() && torch.contains("params_per_s")) {
    const double torch_rate = torch["params_per_s"].get<double>() / 1e6;
    std::cout << fmt::format("{:<46} {:>10.1f} {:>14.1f}   (dslaunch {:.2f}x)\n",
                             "PyTorch AdamW (foreach)", n / (torch_rate * 1e3), torch_rate,
                             per_s(memory_ms) / torch_rate);
  } else {
    std::cout << "PyTorch AdamW: not measured (/usr/bin/python3 with torch is missing)\n";
  }
  std::cout << fmt::format("{:<46} {:>10.1f} {:>14.1f}   ({:.1f} GB/s; Adam at {:.0f}%)\n",
                           "its 28 bytes/param through an in-place add", bound_ms, per_s(bound_ms),
                           bus_gb_s, 100 * bound_ms / memory_ms);
  std::cout << fmt::format(
      "{:<46} {:>10.1f} {:>14.1f}   ({:.2f}x in memory)\n",
      fmt::format("dslaunch, moments swapped ({} x {}M)", buffers, group >> 20), swap_ms,
      per_s(swap_ms), swap_ms / memory_ms);
  std::cout << fmt::format(
      "\nswap traffic {:.2f} GB/s (both moments read and written each step) beside dd's "
      "{:.2f} GB/s (direct write {:.2f}, read {:.2f}) in {}: {:.0f}%\n",
      swap_bytes / (swap_ms * 1e6), dd_gb_s, moment_bytes / (dd_write_ms * 1e6),
      moment_bytes / (dd_read_ms * 1e6), dir, 100 * (swap_bytes / (swap_ms * 1e6)) / dd_gb_s);
  return 0;
}
