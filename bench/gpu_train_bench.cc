// GPT-2 124M training throughput on one GPU through the CUDA backend:
// forward, backward and AdamW steps in bf16 (operands rounded to bf16 on
// tensor cores, fp32 masters, AdamW writing the bf16-rounded weights in the
// same pass) and in fp32; tokens/s and MFU against the cuBLAS bf16 GEMM rate
// measured in the same run, beside PyTorch training the same model on the
// same GPU (bf16 autocast) when it is installed there; and the engine's
// one-rank job at ZeRO stage 0 beside the same job at stage 3, whose
// parameters are gathered into a sparse workspace (CUDA's virtual memory)
// around each block's use: what stage 3's mapping and gathers cost; and at
// stage 3 with half the optimizer's states offloaded (offload_optimizer cpu,
// ratio 0.5: CPU Adam steps that half in host memory): what partial offload
// costs.
//
//   bazel run --config=cuda //bench:gpu_train_bench [-- --batch B --seq T --steps S]
//
// Runs only where a GPU is visible; elsewhere it says so and exits 2.
#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/command_output.h"
#include "bench/gpu_engine_job.h"
#include "bench/median_time.h"
#include "bench/runfile.h"
#include "core/dtype.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "kernels/accelerator.h"
#include "kernels/backend.h"
#include "kernels/cuda/gemm_peak.h"
#include "kernels/device_buffer.h"
#include "kernels/make_backend.h"
#include "worker/comm/mpi_runtime.h"
#include "worker/model/gpt2_model.h"

namespace {

using namespace dslaunch;
using core::DType;

using bench::Shape;
using bench::Throughput;

// Steps on random tokens with the model and the optimizer state in the
// GPU's memory; the tokens are copied in by forward(), as the trainer's are.
Throughput ours(kernels::Backend& backend, const Shape& shape, DType precision, int warmup,
                int steps) {
  core::Gpt2Config config;
  config.num_layers = 12;
  config.channels = 768;
  config.num_heads = 12;
  config.vocab_size = 50257;
  config.padded_vocab_size = 50304;
  config.max_seq_len = shape.seq;
  const core::ParameterTable table(config);
  const int64_t n = table.total();
  const bool mixed = precision != DType::kF32;
  std::vector<float> host(n);
  worker::model::init_gpt2_parameters(table, 1, host.data());
  kernels::DeviceBuffer<float> masters(backend, n), weights(backend, mixed ? n : 0);
  kernels::DeviceBuffer<float> grads(backend, n), m(backend, n), v(backend, n);
  backend.copy_host_to_device(masters.data(), host.data(), n * 4);
  if (mixed) backend.round_to(weights.data(), masters.data(), n, precision);
  backend.memset_zero(m.data(), n * 4);
  backend.memset_zero(v.data(), n * 4);
  float* model_weights = mixed ? weights.data() : masters.data();
  backend.set_matmul_precision(precision);
  worker::model::Gpt2Model model(table, backend, shape.batch, shape.seq);
  std::mt19937 engine(7);
  std::vector<int32_t> inputs(shape.batch * shape.seq), targets(inputs.size());
  for (auto& t : inputs) t = static_cast<int32_t>(engine() % config.vocab_size);
  for (auto& t : targets) t = static_cast<int32_t>(engine() % config.vocab_size);
  kernels::Backend::AdamWParams hyper;
  hyper.lr = 1e-4;
  hyper.weight_decay = 0.1;
  hyper.rounded_dtype = mixed ? precision : DType::kBF16;
  Throughput t;
  const auto step = [&] {
    backend.memset_zero(grads.data(), n * 4);
    t.last_loss = model.forward(model_weights, inputs.data(), targets.data(), shape.batch);
    model.backward(model_weights, grads.data(), 1.0f, {});
    if (mixed) backend.round_to(grads.data(), grads.data(), n, precision);
    backend.adamw_update(masters.data(), grads.data(), m.data(), v.data(), n, hyper,
                         mixed ? weights.data() : nullptr);
    ++hyper.step;
    backend.synchronize();
  };
  for (int i = 0; i < warmup; ++i) step();
  t.step_ms = bench::median_ms(steps, step);
  t.tokens_per_second = shape.batch * shape.seq / (t.step_ms * 1e-3);
  t.tflops = model.flops_per_token() * t.tokens_per_second / 1e12;
  backend.set_matmul_precision(DType::kF32);
  return t;
}

// PyTorch on the same GPU, through tools/reference/gpt2_reference.py.
std::optional<Throughput> pytorch(const Shape& shape, bool bf16, int warmup, int steps,
                                  const std::string& script, std::string& error) {
  const std::string command = fmt::format(
      "python3 {} train-bench --device cuda {} --layers 12 --channels 768 --heads 12 --vocab "
      "50304 --seq {} --batch {} --steps {} --warmup {} 2>&1",
      script, bf16 ? "--bf16" : "", shape.seq, shape.batch, steps, warmup);
  const std::optional<nlohmann::json> result = bench::last_json_object(command, error);
  if (!result || !result->contains("tokens_per_s")) {
    // A traceback's end says what went wrong.
    const std::string said = result ? result->dump() : error;
    error = "PyTorch on this GPU did not run: ..." +
            said.substr(said.size() - std::min<size_t>(said.size(), 400));
    return std::nullopt;
  }
  Throughput t;
  t.tokens_per_second = (*result)["tokens_per_s"].get<double>();
  t.tflops = result->value("model_tflops", 0.0);
  t.step_ms = shape.batch * shape.seq / t.tokens_per_second * 1e3;
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "GPT-2 124M training on one GPU: dslaunch's CUDA backend beside PyTorch and the "
      "cuBLAS bf16 peak"};
  Shape shape;
  int steps = 10;
  int warmup = 3;
  bool skip_pytorch = false;
  app.add_option("--batch", shape.batch, "Sequences per step")->capture_default_str();
  app.add_option("--seq", shape.seq, "Tokens per sequence")->capture_default_str();
  app.add_option("--steps", steps, "Timed steps (median reported)")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed steps first")->capture_default_str();
  app.add_flag("--no-pytorch", skip_pytorch, "Leave out the PyTorch reference");
  CLI11_PARSE(app, argc, argv);

  auto backend = kernels::make_backend(kernels::DeviceKind::kCuda, 1);
  if (!backend.ok()) {
    std::cerr << "gpu_train_bench runs only with a GPU: " << backend.status().message() << "\n";
    return 2;
  }
  const kernels::AcceleratorReport accelerators = kernels::probe_accelerators();
  const double bf16_peak = kernels::cuda::measure_gemm_tflops(true, 8192, 10);
  const double fp32_peak = kernels::cuda::measure_gemm_tflops(false, 8192, 5);
  std::cout << fmt::format(
      "{}; CUDA {}, cuBLAS {}\ncuBLAS peak (best 8192^3 product): bf16 {:.1f} TFLOP/s, fp32 "
      "{:.1f} TFLOP/s\nGPT-2 124M, batch {} x {} tokens, median of {} steps\n\n",
      (*backend)->name(), accelerators.cuda_runtime_version, accelerators.cublas_version, bf16_peak,
      fp32_peak, shape.batch, shape.seq, steps);
  std::cout << fmt::format(
      "{:<6} {:>12} {:>10} {:>14} {:>12} {:>14} {:>15} {:>16} {:>14} {:>10} {:>13} {:>10}\n", "",
      "ours tok/s", "ours MFU", "engine tok/s", "engine MFU", "ZeRO 3 tok/s", "ZeRO 3/ZeRO 0",
      "ratio 0.5 tok/s", "PyTorch tok/s", "PyTorch MFU", "ours/PyTorch", "loss");
  const std::string script = bench::runfile(argv[0], "tools/reference/gpt2_reference.py");
  const core::Status mpi = worker::comm::mpi_init();
  for (const DType precision : {DType::kBF16, DType::kF32}) {
    const bool bf16 = precision == DType::kBF16;
    const double peak = bf16 ? bf16_peak : fp32_peak;
    const Throughput mine = ours(**backend, shape, precision, warmup, steps);
    std::string engine_error, stage3_error, partial_error, error;
    bench::EngineJob run{shape, bf16, 0};
    run.warmup = warmup;
    run.steps = steps;
    const std::optional<Throughput> job = bench::run_engine_job(**backend, run, mpi, engine_error);
    run.stage = 3;
    const std::optional<Throughput> stage3 =
        bench::run_engine_job(**backend, run, mpi, stage3_error);
    run.offload = spec::OffloadDevice::kCpu;
    run.ratio = 0.5;
    const std::optional<Throughput> partial =
        bench::run_engine_job(**backend, run, mpi, partial_error);
    std::optional<Throughput> theirs;
    if (!skip_pytorch) theirs = pytorch(shape, bf16, warmup, steps, script, error);
    std::cout << fmt::format(
        "{:<6} {:>12.0f} {:>9.1f}% {:>14} {:>12} {:>14} {:>15} {:>16} {:>14} {:>10} {:>13} "
        "{:>10.4f}\n",
        bf16 ? "bf16" : "fp32", mine.tokens_per_second, 100 * mine.tflops / peak,
        job ? fmt::format("{:.0f}", job->tokens_per_second) : "-",
        job ? fmt::format("{:.1f}%", 100 * job->tflops / peak) : "-",
        stage3 ? fmt::format("{:.0f}", stage3->tokens_per_second) : "-",
        job && stage3 ? fmt::format("{:.2f}x", stage3->tokens_per_second / job->tokens_per_second)
                      : "-",
        partial ? fmt::format("{:.0f}", partial->tokens_per_second) : "-",
        theirs ? fmt::format("{:.0f}", theirs->tokens_per_second) : "-",
        theirs ? fmt::format("{:.1f}%", 100 * theirs->tflops / peak) : "-",
        theirs ? fmt::format("{:.2f}x", mine.tokens_per_second / theirs->tokens_per_second) : "-",
        mine.last_loss);
    for (const std::string& e : {engine_error, stage3_error, partial_error, error}) {
      if (!e.empty()) std::cout << "  " << e << "\n";
    }
  }
  std::cout << "\nours: the model's forward, backward and AdamW alone; engine: a one-rank "
               "job's steps through engine::train (every state on the GPU), at ZeRO stage 0 and "
               "at stage 3 (each block gathered into mapped pages around its use), and at stage 3 "
               "with half of the optimizer's states in host memory, stepped by CPU Adam "
               "(offload_optimizer cpu, ratio 0.5).\n";
  std::cout << "MFU: the model's matrix-product FLOPs per second (6 per parameter of the "
               "matrices plus attention's, per token) over the cuBLAS peak of the same "
               "precision measured above.\n";
  if (mpi.ok()) worker::comm::mpi_finalize();
  return 0;
}
