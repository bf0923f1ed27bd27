#include "worker/engine/evaluation.h"

#include <catch2/catch.hpp>

#include <vector>

#include "kernels/backend.h"
#include "worker/data/consecutive_batch.h"

namespace dslaunch::worker::engine {
namespace {

// Tokens 0, 1, 2, ... in memory.
class CountingSource : public data::TokenSource {
 public:
  explicit CountingSource(int64_t size) : size_(size) {}
  int64_t size() const override { return size_; }
  void read(int64_t offset, int64_t count, int32_t* out) const override {
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>((offset + i) % 20);
  }
  int32_t max_token() const override { return 19; }
  std::string describe() const override { return "counting"; }

 private:
  int64_t size_;
};

TEST_CASE("evaluation sums its own batches; with after_forward every rank runs equal passes") {
  core::Gpt2Config config;
  config.num_layers = 1;
  config.channels = 16;
  config.num_heads = 2;
  config.vocab_size = 20;
  config.padded_vocab_size = 24;
  config.max_seq_len = 8;
  const core::ParameterTable table(config);
  std::vector<float> params(table.total());
  model::init_gpt2_parameters(table, 3, params.data());
  auto backend = kernels::make_cpu_backend(1);
  model::Gpt2Model model(table, *backend, 2, 8);
  // Exactly 3 batches of 2 x 8 (plus the one target token).
  const CountingSource source(3 * 16 + 1);
  const data::TokenRange tokens = data::whole(source);
  REQUIRE(data::consecutive_batch_count(tokens.size(), 2, 8) == 3);
  auto loss_of = [&](int64_t n) {
    std::vector<int32_t> inputs(16), targets(16);
    data::consecutive_batch(tokens, n, 2, 8, inputs.data(), targets.data());
    return static_cast<double>(model.forward(params.data(), inputs.data(), targets.data(), 2));
  };

  // Rank 1 of 2 owns batch 1 only.
  CHECK(sum_of_batch_losses({&model}, params.data(), tokens, 2, 3, 1, 2) == loss_of(1));
  int calls = 0;
  const auto count = [&calls] { ++calls; };
  // With equal passes it runs ceil(3/2) = 2, the second uncounted.
  CHECK(sum_of_batch_losses({&model}, params.data(), tokens, 2, 3, 1, 2, count) == loss_of(1));
  CHECK(calls == 2);
  // Rank 3 of 4 owns no batch: one uncounted pass, on batch 0 (batch 3
  // does not exist).
  calls = 0;
  CHECK(sum_of_batch_losses({&model}, params.data(), tokens, 2, 3, 3, 4, count) == 0.0);
  CHECK(calls == 1);
  // One rank: every batch, in order.
  CHECK(sum_of_batch_losses({&model}, params.data(), tokens, 2, 3, 0, 1) ==
        loss_of(0) + loss_of(1) + loss_of(2));
}

}  // namespace
}  // namespace dslaunch::worker::engine
