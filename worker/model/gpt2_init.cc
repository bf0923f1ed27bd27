#include <cmath>
#include <random>
#include <vector>

#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::model {
namespace {

// splitmix64: decorrelates the per-tensor seeds derived from one job seed.
uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Normal samples by Box-Muller from raw 64-bit draws: std::normal_distribution
// is implementation-defined, and the initialisation must not change with the
// standard library.
void fill_normal(float* out, int64_t n, double stddev, uint64_t seed) {
  std::mt19937_64 engine(seed);
  auto uniform = [&engine] { return (static_cast<double>(engine() >> 11) + 0.5) * 0x1.0p-53; };
  for (int64_t i = 0; i < n; i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * M_PI * uniform();
    out[i] = static_cast<float>(stddev * radius * std::cos(angle));
    if (i + 1 < n) out[i + 1] = static_cast<float>(stddev * radius * std::sin(angle));
  }
}

}  // namespace

void init_gpt2_parameters(const core::ParameterTable& table, uint64_t seed, float* params) {
  using core::TensorRole;
  const core::Gpt2Config& c = table.config();
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  std::vector<float> whole;  // a split tensor's global values, of which this rank keeps a slice
  for (const core::TensorInfo& t : table.tensors()) {
    float* out = params + t.offset;
    if (t.shape.size() == 1) {
      const bool gain = t.role == TensorRole::kLn1Weight || t.role == TensorRole::kLn2Weight ||
                        t.role == TensorRole::kLnfWeight;
      std::fill(out, out + t.numel, gain ? 1.0f : 0.0f);
      continue;
    }
    const bool residual_projection =
        t.role == TensorRole::kAttnProjWeight || t.role == TensorRole::kFcProjWeight;
    const double std = residual_projection ? residual_std : 0.02;
    const uint64_t stream = mix_seed(seed ^ mix_seed(t.global_index));
    if (t.split.whole()) {
      fill_normal(out, t.numel, std, stream);
      continue;
    }
    whole.resize(t.numel * t.split.parts);
    fill_normal(whole.data(), static_cast<int64_t>(whole.size()), std, stream);
    core::copy_out_of_global(t, whole.data(), out, sizeof(float));
  }
}

}  // namespace dslaunch::worker::model
