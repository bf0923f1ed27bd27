// The KV-cache generator against the training model's full forward pass,
// and the sampler's rules: greedy, top-k, seeds, the padded vocabulary.
#include "worker/model/gpt2_generator.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "core/layout/activation_layout.h"
#include "kernels/backend.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::model {
namespace {

// Several layers and heads, and a vocabulary padded from 50 to 64 rows.
core::Gpt2Config small_config(int64_t max_seq_len = 16) {
  core::Gpt2Config config;
  config.num_layers = 3;
  config.channels = 32;
  config.num_heads = 4;
  config.vocab_size = 50;
  config.padded_vocab_size = 64;
  config.max_seq_len = max_seq_len;
  return config;
}

// Weights far from GPT-2's small initialisation, so that logits spread over
// several units and attention is far from uniform: every parameter
// normal(0, 0.3), LayerNorm weights 1 + that.
std::vector<float> random_params(const core::ParameterTable& table, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> params(static_cast<size_t>(table.total()));
  for (float& p : params) p = normal(engine);
  for (const core::TensorInfo& t : table.tensors()) {
    const bool ln_weight = t.role == core::TensorRole::kLn1Weight ||
                           t.role == core::TensorRole::kLn2Weight ||
                           t.role == core::TensorRole::kLnfWeight;
    if (!ln_weight) continue;
    for (int64_t i = 0; i < t.numel; ++i) params[t.offset + i] += 1.0f;
  }
  return params;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(engine() % vocab));
  return tokens;
}

// The training model's logits (T, Vp) for `tokens` (T of them): Gpt2Model
// keeps them in its activation slot, at the offset ActivationLayout gives
// (the CPU backend's memory is the host's).
std::vector<float> full_forward_logits(const core::ParameterTable& table, kernels::Backend& backend,
                                       const std::vector<float>& params,
                                       const std::vector<int32_t>& tokens) {
  const auto T = static_cast<int64_t>(tokens.size());
  const int64_t Vp = table.config().padded_vocab_size;
  Gpt2Model model(table, backend, 1, T);
  const std::vector<int32_t> targets(tokens.size(), 0);
  model.forward(params.data(), tokens.data(), targets.data(), 1);
  const core::ActivationLayout layout(core::LocalSizes(table, 0, 0, false), 1, T);
  const float* slot = model.stage_output(0) - layout.output();
  return std::vector<float>(slot + layout.logits, slot + layout.logits + T * Vp);
}

// The lowest id among the largest of logits[0, V).
int32_t argmax(const float* logits, int64_t V) {
  return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
}

// Each row of `actual` equals `expected`'s to 1e-5 of the row's largest
// magnitude: relative error, measured where single logits may be near 0.
void check_rows_match(const std::vector<float>& actual, const std::vector<float>& expected,
                      int64_t first_row, int64_t Vp) {
  const auto rows = static_cast<int64_t>(actual.size()) / Vp;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = actual.data() + r * Vp;
    const float* e = expected.data() + (first_row + r) * Vp;
    float scale = 0;
    for (int64_t j = 0; j < Vp; ++j) scale = std::max(scale, std::abs(e[j]));
    REQUIRE(scale > 1.0f);  // logits of a size where a relative error means something
    for (int64_t j = 0; j < Vp; ++j) {
      INFO("position " << first_row + r << ", column " << j);
      REQUIRE(std::abs(a[j] - e[j]) <= 1e-5f * scale);
    }
  }
}

TEST_CASE("KV-cache logits at every position equal the training model's full forward") {
  const core::ParameterTable table(small_config());
  const std::vector<float> params = random_params(table, 1);
  auto backend = kernels::make_cpu_backend(1);
  const int64_t T = table.config().max_seq_len, Vp = table.config().padded_vocab_size;
  const std::vector<int32_t> tokens = random_tokens(T, table.config().vocab_size, 2);
  const std::vector<float> expected = full_forward_logits(table, *backend, params, tokens);

  SECTION("a prompt of 5 in chunks of 2, then one token at a time") {
    Gpt2Generator generator(table, *backend, params.data(), 2);
    const std::span<const int32_t> all(tokens);
    check_rows_match(generator.append(all.first(5), Gpt2Generator::Logits::kEvery), expected, 0,
                     Vp);
    for (int64_t t = 5; t < T; ++t) {
      check_rows_match(generator.append(all.subspan(t, 1)), expected, t, Vp);
    }
    CHECK(generator.length() == T);
  }
  SECTION("every position in one call, and again after reset()") {
    Gpt2Generator generator(table, *backend, params.data());
    check_rows_match(generator.append(tokens, Gpt2Generator::Logits::kEvery), expected, 0, Vp);
    generator.reset();
    const std::vector<float> last = generator.append(tokens);  // kLast: the final row only
    REQUIRE(static_cast<int64_t>(last.size()) == Vp);
    check_rows_match(last, expected, T - 1, Vp);
  }
}

TEST_CASE("the context holds max_seq_len tokens at most, and a refused append changes nothing") {
  const core::ParameterTable table(small_config(8));
  const std::vector<float> params = random_params(table, 3);
  auto backend = kernels::make_cpu_backend(1);
  Gpt2Generator generator(table, *backend, params.data());
  const std::vector<int32_t> tokens = random_tokens(6, 50, 4);
  generator.append(tokens);
  CHECK_THROWS_AS(generator.append(tokens), std::invalid_argument);
  CHECK_THROWS_AS(generator.append(std::vector<int32_t>{50}), std::invalid_argument);  // V = 50
  CHECK(generator.length() == 6);
  CHECK_NOTHROW(generator.append(std::vector<int32_t>{1, 2}));
  CHECK(generator.length() == 8);

  // generate() stops where prompt and continuation fill the context.
  TokenSampler sampler(SamplingOptions{.temperature = 0});
  CHECK(generate(generator, sampler, tokens, 100, {}).size() == 2);
  CHECK_THROWS_AS(generate(generator, sampler, random_tokens(8, 50, 5), 1, {}),
                  std::invalid_argument);
  CHECK_THROWS_AS(generate(generator, sampler, std::vector<int32_t>{}, 1, {}),
                  std::invalid_argument);
}

TEST_CASE("greedy generation equals the argmax of repeated full forwards") {
  const core::ParameterTable table(small_config());
  const std::vector<float> params = random_params(table, 6);
  auto backend = kernels::make_cpu_backend(1);
  const int64_t T = table.config().max_seq_len, V = table.config().vocab_size;
  const int64_t Vp = table.config().padded_vocab_size;
  const std::vector<int32_t> prompt = random_tokens(3, V, 7);

  std::vector<int32_t> expected = prompt;
  while (static_cast<int64_t>(expected.size()) < T) {
    const std::vector<float> logits = full_forward_logits(table, *backend, params, expected);
    expected.push_back(argmax(logits.data() + (expected.size() - 1) * Vp, V));
  }

  Gpt2Generator generator(table, *backend, params.data());
  TokenSampler greedy(SamplingOptions{.temperature = 0});
  std::vector<int32_t> streamed;
  const std::vector<int32_t> drawn =
      generate(generator, greedy, prompt, T, [&](int32_t token) { streamed.push_back(token); });
  std::vector<int32_t> actual = prompt;
  actual.insert(actual.end(), drawn.begin(), drawn.end());
  CHECK(actual == expected);
  CHECK(streamed == drawn);
  // Not a degenerate model that repeats one token.
  CHECK(std::set<int32_t>(drawn.begin(), drawn.end()).size() > 2);
}

std::vector<int32_t> sample(const std::vector<float>& params, const core::ParameterTable& table,
                            const SamplingOptions& options, const std::vector<int32_t>& prompt) {
  auto backend = kernels::make_cpu_backend(1);
  Gpt2Generator generator(table, *backend, params.data());
  TokenSampler sampler(options);
  return generate(generator, sampler, prompt, table.config().max_seq_len, {});
}

TEST_CASE("sampling with a seed is deterministic, and another seed draws other tokens") {
  const core::ParameterTable table(small_config(128));
  const std::vector<float> params = random_params(table, 8);
  const std::vector<int32_t> prompt = random_tokens(4, 50, 9);
  const SamplingOptions first{.temperature = 1.0, .seed = 42};
  const std::vector<int32_t> a = sample(params, table, first, prompt);
  REQUIRE(a.size() == 124);  // up to the context of 128
  CHECK(sample(params, table, first, prompt) == a);
  const std::vector<int32_t> b =
      sample(params, table, SamplingOptions{.temperature = 1.0, .seed = 43}, prompt);
  CHECK(b != a);
  // The default seed is fixed too.
  CHECK(sample(params, table, SamplingOptions{}, prompt) ==
        sample(params, table, SamplingOptions{}, prompt));
}

TEST_CASE("top-k 1 is greedy, whatever the temperature and seed") {
  const core::ParameterTable table(small_config(32));
  const std::vector<float> params = random_params(table, 10);
  const std::vector<int32_t> prompt = random_tokens(2, 50, 11);
  const std::vector<int32_t> greedy = sample(params, table, {.temperature = 0}, prompt);
  CHECK(sample(params, table, {.temperature = 1.5, .top_k = 1, .seed = 1}, prompt) == greedy);
  CHECK(sample(params, table, {.temperature = 0.3, .top_k = 1, .seed = 2}, prompt) == greedy);
}

TEST_CASE("the padded vocabulary is never sampled, even where its logits are the largest") {
  const core::ParameterTable table(small_config(64));
  std::vector<float> params = random_params(table, 12);
  const core::TensorInfo& wte = table.tensor(core::TensorRole::kWte);
  const int64_t C = table.config().channels, V = table.config().vocab_size;
  const int64_t Vp = table.config().padded_vocab_size;
  auto backend = kernels::make_cpu_backend(1);
  const std::vector<int32_t> prompt = random_tokens(3, V, 13);
  {
    Gpt2Generator generator(table, *backend, params.data());
    const std::vector<float> before = generator.append(prompt);
    // Each padded row: 100 times the row of the prompt's likeliest next token.
    const int32_t top = argmax(before.data(), V);
    for (int64_t r = V; r < Vp; ++r) {
      for (int64_t j = 0; j < C; ++j) {
        params[wte.offset + r * C + j] = 100.0f * params[wte.offset + top * C + j];
      }
    }
    generator.reset();
    const std::vector<float> after = generator.append(prompt);
    REQUIRE(*std::max_element(after.begin() + V, after.end()) >
            *std::max_element(after.begin(), after.begin() + V));
  }
  for (const SamplingOptions& options :
       {SamplingOptions{.temperature = 0}, SamplingOptions{.temperature = 1.0, .seed = 3},
        SamplingOptions{.temperature = 5.0, .top_k = 20, .seed = 4}}) {
    for (const int32_t token : sample(params, table, options, prompt)) {
      INFO("temperature " << options.temperature << ", top-k " << options.top_k);
      CHECK(token < V);
    }
  }
}

TEST_CASE("the sampler draws in proportion to softmax(logits / T), among the top k") {
  // Real vocabulary 4, padded to 6 with logits no draw may take.
  const std::vector<float> logits = {0.0f, std::log(3.0f), std::log(2.0f), 1.0f, 50.0f, 50.0f};
  auto frequencies = [&](const SamplingOptions& options) {
    TokenSampler sampler(options);
    std::map<int32_t, double> counts;
    const int draws = 40000;
    for (int i = 0; i < draws; ++i) counts[sampler.next(logits, 4)] += 1.0 / draws;
    return counts;
  };
  const double total = 1 + 3 + 2 + std::exp(1.0);
  std::map<int32_t, double> all = frequencies({.temperature = 1.0});
  CHECK(all.size() == 4);
  CHECK(all[1] == Approx(3 / total).margin(0.01));
  CHECK(all[3] == Approx(std::exp(1.0) / total).margin(0.01));

  // T = 2 takes square roots of the weights: 1, √3, √2, √e.
  const double half = 1 + std::sqrt(3.0) + std::sqrt(2.0) + std::exp(0.5);
  std::map<int32_t, double> warm = frequencies({.temperature = 2.0, .seed = 5});
  CHECK(warm[0] == Approx(1 / half).margin(0.01));

  // Top 2 of {0, ln 3, ln 2, 1}: tokens 1 and 3, weights 3 and e.
  std::map<int32_t, double> top2 = frequencies({.temperature = 1.0, .top_k = 2});
  CHECK(top2.size() == 2);
  CHECK(top2[1] == Approx(3 / (3 + std::exp(1.0))).margin(0.01));
}

TEST_CASE("greedy takes the lowest id among tied maxima, with top-k or without") {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 9.0f};
  TokenSampler greedy(SamplingOptions{.temperature = 0});
  CHECK(greedy.next(logits, 4) == 1);
  TokenSampler top1(SamplingOptions{.temperature = 1.0, .top_k = 1});
  CHECK(top1.next(logits, 4) == 1);
}

TEST_CASE("the sampler refuses a negative temperature or top-k") {
  CHECK_THROWS_AS(TokenSampler(SamplingOptions{.temperature = -1}), std::invalid_argument);
  CHECK_THROWS_AS(TokenSampler(SamplingOptions{.temperature = NAN}), std::invalid_argument);
  CHECK_THROWS_AS(TokenSampler(SamplingOptions{.top_k = -2}), std::invalid_argument);
}

}  // namespace
}  // namespace dslaunch::worker::model
