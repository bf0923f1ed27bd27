// What offload_optimizer.pin_memory buys on one GPU, pageable beside
// page-locked host memory in the same run:
// 1. the copies themselves, through the CUDA backend's copy calls (so with
//    their contract: a copy from page-locked memory waits until it has read
//    the host bytes): a partial offload chunk (4 Mi floats, 16 MiB) and
//    GPT-2 124M's fp32 parameters (124M floats, about 500 MB), each way,
//    in GB/s;
// 2. a one-rank GPT-2 124M bf16 job's tokens/s with ZeRO-Offload (stage 1,
//    offload_optimizer cpu: the model states in host memory, the GPU
//    mirroring the parameters and gradients, CPU Adam on every core) and
//    with partial offload (ratio 0.5), each pageable and pinned.
//
//   bazel run --config=cuda //bench:gpu_offload_bench [-- --batch B --seq T --steps S]
//
// Runs only where a GPU is visible; elsewhere it says so and exits 2.
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "bench/gpu_engine_job.h"
#include "bench/median_time.h"
#include "bench/test_hosts.h"
#include "core/layout/device_optimizer_bytes.h"
#include "core/spec/job_spec.h"
#include "kernels/accelerator.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "kernels/make_backend.h"
#include "kernels/pinned_host_memory.h"
#include "worker/comm/mpi_runtime.h"

namespace {

using namespace dslaunch;

// GB/s of `runs` copies of `floats` each way between host memory (pinned
// or not) and the GPU's, the median run's.
struct CopyRates {
  double to_device = 0;
  double to_host = 0;
};

CopyRates copy_rates(kernels::Backend& backend, int64_t floats, bool pin, int runs) {
  std::vector<float> host(floats, 1.0f);
  kernels::DeviceBuffer<float> device(backend, floats);
  const int64_t bytes = device.bytes();
  const kernels::PinnedHostMemory pinned =
      pin ? kernels::PinnedHostMemory(backend, host.data(), bytes) : kernels::PinnedHostMemory();
  if (pin && pinned.bytes() != bytes) {
    throw std::runtime_error(fmt::format("the driver did not page-lock {} bytes", bytes));
  }
  // One untimed copy each way first: the first touches map the pages.
  backend.copy_host_to_device(device.data(), host.data(), bytes);
  backend.copy_device_to_host(host.data(), device.data(), bytes);
  backend.synchronize();
  const auto rate = [bytes](double ms) { return static_cast<double>(bytes) / (ms * 1e6); };
  CopyRates rates;
  rates.to_device = rate(bench::median_ms(runs, [&] {
    backend.copy_host_to_device(device.data(), host.data(), bytes);
    backend.synchronize();
  }));
  rates.to_host = rate(bench::median_ms(
      runs, [&] { backend.copy_device_to_host(host.data(), device.data(), bytes); }));
  return rates;
}

std::string tokens(const std::optional<bench::Throughput>& t) {
  return t ? fmt::format("{:.0f}", t->tokens_per_second) : "-";
}

std::string speedup(const std::optional<bench::Throughput>& pinned,
                    const std::optional<bench::Throughput>& pageable) {
  return pinned && pageable
             ? fmt::format("{:.2f}x", pinned->tokens_per_second / pageable->tokens_per_second)
             : "-";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"offload_optimizer.pin_memory on one GPU: page-locked beside pageable host memory"};
  bench::Shape shape;
  int steps = 5;
  int warmup = 2;
  int copies = 20;
  app.add_option("--batch", shape.batch, "Sequences per step")->capture_default_str();
  app.add_option("--seq", shape.seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps (median reported)")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str();
  app.add_option("--copies", copies, "Timed copies per size (median reported)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto backend = kernels::make_backend(kernels::DeviceKind::kCuda, 1);
  if (!backend.ok()) {
    std::cerr << "gpu_offload_bench runs only with a GPU: " << backend.status().message() << "\n";
    return 2;
  }
  const kernels::AcceleratorReport accelerators = kernels::probe_accelerators();
  std::cout << fmt::format("{}; CUDA {}\nCPU Adam on {}, {} threads\n\n", (*backend)->name(),
                           accelerators.cuda_runtime_version, bench::cpu_model(),
                           std::thread::hardware_concurrency());
  std::cout << fmt::format("{:<34} {:>14} {:>14} {:>8} {:>14} {:>14} {:>8}\n", "copy",
                           "to GPU GB/s", "pinned GB/s", "pinned/", "to host GB/s", "pinned GB/s",
                           "pinned/");
  const int64_t gpt2_floats = 124'439'808;  // GPT-2 124M's parameters
  for (const auto& [name, floats] :
       {std::pair{"partial offload chunk (16 MiB)", core::kDeviceOptimizerChunk},
        std::pair{"GPT-2 124M fp32 parameters", gpt2_floats}}) {
    try {
      const CopyRates pageable = copy_rates(**backend, floats, false, copies);
      const CopyRates pinned = copy_rates(**backend, floats, true, copies);
      std::cout << fmt::format(
          "{:<34} {:>14.1f} {:>14.1f} {:>7.2f}x {:>14.1f} {:>14.1f} {:>7.2f}x\n", name,
          pageable.to_device, pinned.to_device, pinned.to_device / pageable.to_device,
          pageable.to_host, pinned.to_host, pinned.to_host / pageable.to_host);
    } catch (const std::exception& e) {
      std::cout << fmt::format("{:<34} {}\n", name, e.what());
    }
  }

  std::cout << fmt::format(
      "\nGPT-2 124M bf16, one rank, batch {} x {} tokens, median of {} steps\n{:<40} {:>16} "
      "{:>16} {:>8}\n",
      shape.batch, shape.seq, steps, "job", "pageable tok/s", "pinned tok/s", "pinned/");
  const core::Status mpi = worker::comm::mpi_init();
  for (const auto& [name, ratio] : {std::pair{"ZeRO-Offload, stage 1 (ratio 1)", 1.0},
                                    std::pair{"partial offload, stage 1 (ratio 0.5)", 0.5}}) {
    bench::EngineJob job{shape, true, 1, spec::OffloadDevice::kCpu, ratio};
    job.warmup = warmup;
    job.steps = steps;
    std::string pageable_error, pinned_error;
    const std::optional<bench::Throughput> pageable =
        bench::run_engine_job(**backend, job, mpi, pageable_error);
    job.pin_memory = true;
    const std::optional<bench::Throughput> pinned =
        bench::run_engine_job(**backend, job, mpi, pinned_error);
    std::cout << fmt::format("{:<40} {:>16} {:>16} {:>8}\n", name, tokens(pageable), tokens(pinned),
                             speedup(pinned, pageable));
    for (const std::string& e : {pageable_error, pinned_error}) {
      if (!e.empty()) std::cout << "  " << e << "\n";
    }
  }
  if (mpi.ok()) worker::comm::mpi_finalize();
  return 0;
}
