// The matrix products of a GPT-2 124M step, forward, on the CPU kernels
// one could use: OpenBLAS sgemm (what the engine uses today), oneDNN's fp32
// matmul, and oneDNN's bf16 matmul (bf16 inputs, fp32 accumulation and
// output) on the instruction set it picks (AVX512_BF16 where the CPU has
// it). GFLOP/s per shape, the bf16 one also with the activations' fp32 ->
// bf16 conversion counted (the weights' is once per step). This is the
// measurement the 16-bit kernels are chosen by (issue 15).
//
//   bazel run //bench:matmul_bench [-- --rows 4096 --threads 2 --runs 5]
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <cblas.h>
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/median_time.h"
#include "core/dtype.h"
#include "kernels/backend.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/blas_setup.h"
#include "topology/machine_topology.h"

namespace {

using dslaunch::bench::median_ms;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

struct Shape {
  const char* name;
  int64_t k, n;
  bool transposed;  // the weight is (n, k) row-major (the tied output layer's wte)
};

// The forward products of one GPT-2 124M block and the output layer, for
// `rows` tokens: (rows, k) x (k, n).
const Shape kShapes[] = {{"attn qkv", 768, 2304, false},
                         {"attn proj", 768, 768, false},
                         {"mlp fc", 768, 3072, false},
                         {"mlp proj", 3072, 768, false},
                         {"logits (x wte^T)", 768, 50304, true}};

std::string isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx2:
      return "AVX2";
    case dnnl::cpu_isa::avx2_vnni:
      return "AVX2_VNNI";
    case dnnl::cpu_isa::avx512_core:
      return "AVX512";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "AVX512_VNNI";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "AVX512_BF16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "AMX";
    default:
      return fmt::format("isa {}", static_cast<int>(isa));
  }
}

std::vector<float> random_floats(int64_t n, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> out(static_cast<size_t>(n));
  for (float& x : out) x = normal(engine);
  return out;
}

// A oneDNN matmul of (rows, k) x (k, n) with inputs of `type`, fp32 out.
struct DnnlMatmul {
  dnnl::memory src, weights, dst;
  dnnl::matmul product;

  DnnlMatmul(dnnl::engine& engine, int64_t rows, const Shape& shape, dt type, void* src_data,
             void* weight_data, float* dst_data) {
    const dnnl::memory::desc src_md({rows, shape.k}, type, tag::ab);
    // A transposed weight is (n, k) row-major: (k, n) in column-major order.
    const dnnl::memory::desc weight_md({shape.k, shape.n}, type,
                                       shape.transposed ? tag::ba : tag::ab);
    const dnnl::memory::desc dst_md({rows, shape.n}, dt::f32, tag::ab);
    src = dnnl::memory(src_md, engine, src_data);
    weights = dnnl::memory(weight_md, engine, weight_data);
    dst = dnnl::memory(dst_md, engine, dst_data);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, weight_md, dst_md), engine);
    product = dnnl::matmul(pd);
  }

  void run(dnnl::stream& stream) {
    product.execute(stream,
                    {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
};

}  // namespace

int main(int argc, char** argv) {
  dslaunch::kernels::ensure_fast_blas(argv);
  CLI::App app{"GPT-2 124M matrix products: OpenBLAS sgemm beside oneDNN fp32 and bf16"};
  int64_t rows = 4096;
  int threads = 2;
  int runs = 5;
  app.add_option("--rows", rows, "Tokens per product (micro-batch x sequence length)");
  app.add_option("--threads", threads, "Threads for every library (one OpenMP pool)");
  app.add_option("--runs", runs, "Timed runs per product (median reported)");
  CLI11_PARSE(app, argc, argv);
  dslaunch::kernels::set_compute_threads(threads);

  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  auto backend = dslaunch::kernels::make_cpu_backend(threads);
  const dslaunch::topology::MachineTopology machine = dslaunch::topology::probe_machine_topology();
  std::cout << fmt::format(
      "{} ({} threads); OpenBLAS {} kernels; oneDNN {}.{}.{} on {}; {} tokens per product, median "
      "of {}\n\n",
      machine.cpu_model.empty() ? "an unnamed CPU" : machine.cpu_model, threads,
      dslaunch::kernels::query_blas_info().core_name, dnnl::version()->major,
      dnnl::version()->minor, dnnl::version()->patch, isa_name(dnnl::get_effective_cpu_isa()), rows,
      runs);
  std::cout << fmt::format("{:<18} {:>16} {:>16} {:>16} {:>22}\n", "product (GFLOP/s)",
                           "OpenBLAS fp32", "oneDNN fp32", "oneDNN bf16", "bf16 + converting x");
  double total_flops = 0, blas_ms = 0, dnnl_ms = 0, bf16_ms = 0, bf16_convert_ms = 0;
  for (const Shape& shape : kShapes) {
    const std::vector<float> x = random_floats(rows * shape.k, 1);
    const std::vector<float> w = random_floats(shape.k * shape.n, 2);
    std::vector<float> out(static_cast<size_t>(rows * shape.n));
    std::vector<uint16_t> x16(x.size()), w16(w.size());
    using dslaunch::core::DType;
    backend->convert(w16.data(), DType::kBF16, w.data(), DType::kF32,
                     static_cast<int64_t>(w.size()));
    const auto convert_x = [&] {
      backend->convert(x16.data(), DType::kBF16, x.data(), DType::kF32,
                       static_cast<int64_t>(x.size()));
    };
    convert_x();
    const double flops = 2.0 * static_cast<double>(rows) * shape.k * shape.n;
    const auto sgemm = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, shape.transposed ? CblasTrans : CblasNoTrans,
                  static_cast<int>(rows), static_cast<int>(shape.n), static_cast<int>(shape.k),
                  1.0f, x.data(), static_cast<int>(shape.k), w.data(),
                  static_cast<int>(shape.transposed ? shape.k : shape.n), 0.0f, out.data(),
                  static_cast<int>(shape.n));
    };
    DnnlMatmul fp32(engine, rows, shape, dt::f32, const_cast<float*>(x.data()),
                    const_cast<float*>(w.data()), out.data());
    DnnlMatmul bf16(engine, rows, shape, dt::bf16, x16.data(), w16.data(), out.data());
    sgemm();  // warm up each
    fp32.run(stream);
    bf16.run(stream);
    const double t_blas = median_ms(runs, sgemm);
    const double t_dnnl = median_ms(runs, [&] { fp32.run(stream); });
    const double t_bf16 = median_ms(runs, [&] { bf16.run(stream); });
    const double t_convert = median_ms(runs, convert_x);
    const auto rate = [flops](double ms) { return flops / (ms * 1e6); };
    std::cout << fmt::format("{:<18} {:>16.1f} {:>16.1f} {:>16.1f} {:>22.1f}\n", shape.name,
                             rate(t_blas), rate(t_dnnl), rate(t_bf16), rate(t_bf16 + t_convert));
    total_flops += flops;
    blas_ms += t_blas;
    dnnl_ms += t_dnnl;
    bf16_ms += t_bf16;
    bf16_convert_ms += t_bf16 + t_convert;
  }
  const auto rate = [total_flops](double ms) { return total_flops / (ms * 1e6); };
  std::cout << fmt::format("{:<18} {:>16.1f} {:>16.1f} {:>16.1f} {:>22.1f}\n",
                           "all (time-weighted)", rate(blas_ms), rate(dnnl_ms), rate(bf16_ms),
                           rate(bf16_convert_ms));
  std::cout << fmt::format(
      "\noneDNN bf16 vs OpenBLAS fp32: {:.2f}x ({:.2f}x converting the activations); oneDNN fp32 "
      "vs OpenBLAS: {:.2f}x\n",
      blas_ms / bf16_ms, blas_ms / bf16_convert_ms, blas_ms / dnnl_ms);
  return 0;
}
