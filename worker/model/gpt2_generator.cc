#include "worker/model/gpt2_generator.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace dslaunch::worker::model {
namespace {

using core::TensorRole;

constexpr int64_t kFloat = sizeof(float);

}  // namespace

Gpt2Generator::Gpt2Generator(const core::ParameterTable& table, kernels::Backend& backend,
                             const float* params, int64_t chunk)
    : table_(table),
      backend_(backend),
      params_(params),
      chunk_(chunk),
      capacity_(table.config().max_seq_len) {
  const core::ModelShard& shard = table.shard();
  if (shard.tensor_size != 1 || shard.stages != 1) {
    throw std::invalid_argument(
        "generation needs the whole model: a table without tensor or pipeline splits");
  }
  if (chunk < 1) throw std::invalid_argument(fmt::format("a chunk of {} tokens", chunk));
  const core::Gpt2Config& c = table.config();
  const int64_t C = c.channels;
  tokens_ = kernels::DeviceBuffer<int32_t>(backend, chunk);
  residual_ = kernels::DeviceBuffer<float>(backend, chunk * C);
  residual2_ = kernels::DeviceBuffer<float>(backend, chunk * C);
  ln_ = kernels::DeviceBuffer<float>(backend, chunk * C);
  ln_mean_ = kernels::DeviceBuffer<float>(backend, chunk);
  ln_rstd_ = kernels::DeviceBuffer<float>(backend, chunk);
  qkv_ = kernels::DeviceBuffer<float>(backend, chunk * 3 * C);
  atty_ = kernels::DeviceBuffer<float>(backend, chunk * C);
  branch_ = kernels::DeviceBuffer<float>(backend, chunk * C);
  fch_ = kernels::DeviceBuffer<float>(backend, chunk * 4 * C);
  logits_ = kernels::DeviceBuffer<float>(backend, chunk * c.padded_vocab_size);
  key_cache_.resize(static_cast<size_t>(c.num_layers * capacity_ * C));
  value_cache_.resize(key_cache_.size());
  qkv_host_.resize(static_cast<size_t>(chunk * 3 * C));
  atty_host_.resize(static_cast<size_t>(chunk * C));
  scores_.resize(static_cast<size_t>(capacity_));
}

std::vector<float> Gpt2Generator::append(std::span<const int32_t> tokens, Logits which) {
  const core::Gpt2Config& c = table_.config();
  const auto n = static_cast<int64_t>(tokens.size());
  if (n == 0) throw std::invalid_argument("append() of no tokens");
  if (length_ + n > capacity_) {
    throw std::invalid_argument(fmt::format(
        "{} more tokens after {} pass the model's context of {} positions", n, length_, capacity_));
  }
  for (int64_t i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= c.vocab_size) {
      throw std::invalid_argument(
          fmt::format("token {} is outside the vocabulary [0, {})", tokens[i], c.vocab_size));
    }
  }
  const int64_t C = c.channels, Vp = c.padded_vocab_size;
  const float* wte = params_ + table_.offset(TensorRole::kWte);
  const float* lnfw = params_ + table_.offset(TensorRole::kLnfWeight);
  const float* lnfb = params_ + table_.offset(TensorRole::kLnfBias);
  std::vector<float> logits(static_cast<size_t>((which == Logits::kEvery ? n : 1) * Vp));
  for (int64_t begin = 0; begin < n; begin += chunk_) {
    const int64_t rows = std::min(chunk_, n - begin);
    run_chunk(tokens.data() + begin, rows);
    length_ += rows;
    const bool last_chunk = begin + rows == n;
    if (which == Logits::kLast && !last_chunk) continue;
    // The head runs on the rows whose logits are asked for: with kLast, only
    // the final position's, which is all that sampling reads.
    const int64_t head_rows = which == Logits::kEvery ? rows : 1;
    const float* head_input = residual_.data() + (rows - head_rows) * C;
    backend_.layernorm_forward(ln_.data(), ln_mean_.data(), ln_rstd_.data(), head_input, lnfw, lnfb,
                               head_rows, C);
    backend_.logits_forward(logits_.data(), ln_.data(), wte, head_rows, C, Vp, Vp);
    float* out = logits.data() + (which == Logits::kEvery ? begin * Vp : 0);
    backend_.copy_device_to_host(out, logits_.data(), head_rows * Vp * kFloat);
  }
  return logits;
}

void Gpt2Generator::run_chunk(const int32_t* tokens, int64_t n) {
  const core::Gpt2Config& c = table_.config();
  const int64_t C = c.channels, Vp = c.padded_vocab_size;
  auto at = [&](TensorRole role, int layer = -1) { return params_ + table_.offset(role, layer); };
  backend_.copy_host_to_device(tokens_.data(), tokens, n * static_cast<int64_t>(sizeof(int32_t)));
  // encoder_forward adds wpe's rows [0, n): starting it at row length_ gives
  // the new tokens their absolute positions.
  backend_.encoder_forward(residual_.data(), tokens_.data(), at(TensorRole::kWte), {0, Vp},
                           at(TensorRole::kWpe) + length_ * C, 1, n, C);  // (n, C)
  for (int l = 0; l < c.num_layers; ++l) {
    backend_.layernorm_forward(ln_.data(), ln_mean_.data(), ln_rstd_.data(), residual_.data(),
                               at(TensorRole::kLn1Weight, l), at(TensorRole::kLn1Bias, l), n, C);
    backend_.matmul_forward(qkv_.data(), ln_.data(), at(TensorRole::kQkvWeight, l),
                            at(TensorRole::kQkvBias, l), n, C, 3 * C);  // (n, 3C)
    backend_.copy_device_to_host(qkv_host_.data(), qkv_.data(), n * 3 * C * kFloat);
    attend(l, n);
    backend_.copy_host_to_device(atty_.data(), atty_host_.data(), n * C * kFloat);  // (n, C)
    backend_.matmul_forward(branch_.data(), atty_.data(), at(TensorRole::kAttnProjWeight, l),
                            at(TensorRole::kAttnProjBias, l), n, C, C);
    backend_.residual_forward(residual2_.data(), residual_.data(), branch_.data(), n * C);
    backend_.layernorm_forward(ln_.data(), ln_mean_.data(), ln_rstd_.data(), residual2_.data(),
                               at(TensorRole::kLn2Weight, l), at(TensorRole::kLn2Bias, l), n, C);
    backend_.matmul_forward(fch_.data(), ln_.data(), at(TensorRole::kFcWeight, l),
                            at(TensorRole::kFcBias, l), n, C, 4 * C);  // (n, 4C)
    backend_.gelu_forward(fch_.data(), fch_.data(), n * 4 * C);
    backend_.matmul_forward(branch_.data(), fch_.data(), at(TensorRole::kFcProjWeight, l),
                            at(TensorRole::kFcProjBias, l), n, 4 * C, C);
    backend_.residual_forward(residual_.data(), residual2_.data(), branch_.data(), n * C);
  }
}

// A plain loop, because no backend kernel fits: attention_forward takes its
// queries, keys and values from one (B,T,3C) buffer whose queries start at
// position 0, while here n queries at positions [length_, length_ + n)
// attend over cached keys they were not computed with. The loop runs on the
// host, so the cache lives there too and only the chunk's qkv and output
// cross between host and backend. A query costs 2·T·C multiply-adds here
// against the 12·C² of its block's matrix products: the smaller part while
// T < 6·C, which holds for every GPT-2 size.
void Gpt2Generator::attend(int layer, int64_t n) {
  const core::Gpt2Config& c = table_.config();
  const int64_t C = c.channels, NH = c.num_heads, hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  float* keys = key_cache_.data() + layer * capacity_ * C;      // (maxT, C)
  float* values = value_cache_.data() + layer * capacity_ * C;  // (maxT, C)
  for (int64_t i = 0; i < n; ++i) {
    const float* qkv = qkv_host_.data() + i * 3 * C;  // [q | k | v]
    std::copy(qkv + C, qkv + 2 * C, keys + (length_ + i) * C);
    std::copy(qkv + 2 * C, qkv + 3 * C, values + (length_ + i) * C);
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t visible = length_ + i + 1;  // causal: positions [0, length_ + i]
    const float* q = qkv_host_.data() + i * 3 * C;
    float* out = atty_host_.data() + i * C;
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t o = h * hs;
      float max = -INFINITY;
      for (int64_t j = 0; j < visible; ++j) {
        float dot = 0;
        for (int64_t d = 0; d < hs; ++d) dot += q[o + d] * keys[j * C + o + d];
        scores_[j] = dot * scale;
        max = std::max(max, scores_[j]);
      }
      // The training kernels' softmax: max subtracted, the sum in double.
      double sum = 0;
      for (int64_t j = 0; j < visible; ++j) {
        scores_[j] = std::exp(scores_[j] - max);
        sum += scores_[j];
      }
      const auto inverse = static_cast<float>(1.0 / sum);
      std::fill(out + o, out + o + hs, 0.0f);
      for (int64_t j = 0; j < visible; ++j) {
        const float p = scores_[j] * inverse;
        for (int64_t d = 0; d < hs; ++d) out[o + d] += p * values[j * C + o + d];
      }
    }
  }
}

TokenSampler::TokenSampler(const SamplingOptions& options)
    : options_(options), engine_(options.seed) {
  if (!std::isfinite(options.temperature) || options.temperature < 0) {
    throw std::invalid_argument(
        fmt::format("temperature {} is not a finite number >= 0", options.temperature));
  }
  if (options.top_k < 0) {
    throw std::invalid_argument(fmt::format("top-k {} is negative", options.top_k));
  }
}

int32_t TokenSampler::next(std::span<const float> logits, int64_t vocab_size) {
  if (vocab_size < 1 || vocab_size > static_cast<int64_t>(logits.size())) {
    throw std::invalid_argument(
        fmt::format("a vocabulary of {} from a row of {} logits", vocab_size, logits.size()));
  }
  if (options_.temperature == 0) {
    int32_t best = 0;
    for (int32_t i = 1; i < vocab_size; ++i) {
      if (logits[i] > logits[best]) best = i;  // strictly: a tie keeps the lower id
    }
    return best;
  }
  candidates_.resize(static_cast<size_t>(vocab_size));
  for (int32_t i = 0; i < vocab_size; ++i) candidates_[i] = i;
  if (options_.top_k > 0 && options_.top_k < vocab_size) {
    const auto k = static_cast<std::ptrdiff_t>(options_.top_k);
    std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(),
                      [&](int32_t a, int32_t b) {
                        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
                      });
    candidates_.resize(static_cast<size_t>(k));
  }
  float max = logits[candidates_.front()];
  for (const int32_t id : candidates_) max = std::max(max, logits[id]);
  // In double, so that a low temperature's large exponents lose nothing
  // before the sum; the maximum's weight is 1, so the sum is never 0.
  weights_.resize(candidates_.size());
  double total = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    weights_[i] =
        std::exp((static_cast<double>(logits[candidates_[i]]) - max) / options_.temperature);
    total += weights_[i];
  }
  // A uniform double in [0, 1) from the top 53 bits of one draw.
  const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double cumulative = 0;
  for (size_t i = 0; i < candidates_.size(); ++i) {
    cumulative += weights_[i];
    if (target < cumulative) return candidates_[i];
  }
  return candidates_.back();  // unreachable: the loop's last sum is total > target
}

std::vector<int32_t> generate(Gpt2Generator& generator, TokenSampler& sampler,
                              std::span<const int32_t> prompt, int64_t max_new,
                              const TokenCallback& on_token) {
  const auto prompt_length = static_cast<int64_t>(prompt.size());
  if (prompt_length == 0) throw std::invalid_argument("generation needs at least one prompt token");
  if (prompt_length >= generator.capacity()) {
    throw std::invalid_argument(
        fmt::format("a prompt of {} tokens leaves no room in the model's context of {}",
                    prompt_length, generator.capacity()));
  }
  if (max_new < 0) throw std::invalid_argument(fmt::format("{} new tokens", max_new));
  const int64_t count = std::min(max_new, generator.capacity() - prompt_length);
  generator.reset();
  std::vector<int32_t> drawn;
  if (count == 0) return drawn;
  std::vector<float> logits = generator.append(prompt);
  const int64_t vocab = generator.config().vocab_size;
  for (int64_t i = 0; i < count; ++i) {
    if (i > 0) logits = generator.append(std::span<const int32_t>(&drawn.back(), 1));
    drawn.push_back(sampler.next(logits, vocab));
    if (on_token) on_token(drawn.back());
  }
  return drawn;
}

}  // namespace dslaunch::worker::model
