#include <algorithm>
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
// standard library. Element g of a stream is the cosine (g even) or the sine
// (g odd) of pair g / 2, which takes draws 2(g / 2) and 2(g / 2) + 1, so a
// rank can produce any elements in increasing order without the ones before
// them (the generator skips their draws): a ZeRO stage 3 rank initialises
// its partition without holding the whole model.
class NormalStream {
 public:
  NormalStream(uint64_t seed, double stddev) : engine_(seed), stddev_(stddev) {}

  // Whether element g can still be produced (the stream only goes forward).
  bool reaches(int64_t g) const { return g / 2 >= pair_; }
  // out[i] = element first + i; elements must be asked for in increasing order.
  void fill(int64_t first, int64_t count, float* out) {
    for (int64_t g = first; g < first + count; ++g) {
      const int64_t pair = g / 2;
      if (pair != pair_) draw(pair);
      out[g - first] = (g % 2 == 0) ? cosine_ : sine_;
    }
  }

 private:
  void draw(int64_t pair) {
    engine_.discard(static_cast<unsigned long long>(2 * (pair - next_pair_)));
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * M_PI * uniform();
    cosine_ = static_cast<float>(stddev_ * radius * std::cos(angle));
    sine_ = static_cast<float>(stddev_ * radius * std::sin(angle));
    pair_ = pair;
    next_pair_ = pair + 1;
  }
  double uniform() { return (static_cast<double>(engine_() >> 11) + 0.5) * 0x1.0p-53; }

  std::mt19937_64 engine_;
  double stddev_;
  int64_t pair_ = -1;       // the pair cosine_ and sine_ hold
  int64_t next_pair_ = 0;   // the pair the engine's next two draws make
  float cosine_ = 0;
  float sine_ = 0;
};

}  // namespace

// The stream of the tensor filled last, kept for the next range.
struct Gpt2Initializer::Stream {
  int tensor = -1;
  NormalStream normals;
};

Gpt2Initializer::Gpt2Initializer(const core::ParameterTable& table, uint64_t seed)
    : table_(table), seed_(seed) {}

Gpt2Initializer::~Gpt2Initializer() = default;

void Gpt2Initializer::fill(int64_t begin, int64_t end, float* out) {
  using core::TensorRole;
  const core::Gpt2Config& c = table_.config();
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  const std::vector<core::TensorInfo>& tensors = table_.tensors();
  for (size_t index = 0; index < tensors.size(); ++index) {
    const core::TensorInfo& t = tensors[index];
    // The tensor's local elements [from, to) that fall in the range.
    const int64_t from = std::max(begin, t.offset) - t.offset;
    const int64_t to = std::min(end, t.offset + t.numel) - t.offset;
    if (from >= to) continue;
    float* into = out + (t.offset + from - begin);
    if (t.shape.size() == 1) {
      const bool gain = t.role == TensorRole::kLn1Weight || t.role == TensorRole::kLn2Weight ||
                        t.role == TensorRole::kLnfWeight;
      std::fill(into, into + (to - from), gain ? 1.0f : 0.0f);
      continue;
    }
    const bool residual_projection =
        t.role == TensorRole::kAttnProjWeight || t.role == TensorRole::kFcProjWeight;
    // A split tensor's slice takes the elements of the tensor's global
    // values that it holds, so every layout starts from the same weights.
    const std::vector<core::SliceRun> runs = core::slice_runs(t.split, from, to);
    if (!stream_ || stream_->tensor != static_cast<int>(index) ||
        !stream_->normals.reaches(runs.front().global)) {
      stream_ = std::make_unique<Stream>(
          Stream{static_cast<int>(index), NormalStream(mix_seed(seed_ ^ mix_seed(t.global_index)),
                                                       residual_projection ? residual_std : 0.02)});
    }
    for (const core::SliceRun& run : runs) {
      stream_->normals.fill(run.global, run.count, into + (run.local - from));
    }
  }
}

void init_gpt2_parameters(const core::ParameterTable& table, uint64_t seed, float* params) {
  init_gpt2_parameter_range(table, seed, 0, table.total(), params);
}

void init_gpt2_parameter_range(const core::ParameterTable& table, uint64_t seed, int64_t begin,
                               int64_t end, float* out) {
  Gpt2Initializer(table, seed).fill(begin, end, out);
}

}  // namespace dslaunch::worker::model
