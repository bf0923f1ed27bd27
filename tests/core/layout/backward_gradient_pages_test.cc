#include "core/layout/backward_gradient_pages.h"

#include <algorithm>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

Gpt2Config small_config() {
  Gpt2Config c;
  c.num_layers = 3;
  c.channels = 8;
  c.num_heads = 4;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  c.max_seq_len = 6;
  return c;
}

int64_t numel(const ParameterTable& table, TensorRole role) { return table.tensor(role).numel; }

int64_t largest_block(const ParameterTable& table) {
  int64_t largest = 0;
  for (int layer = 0; layer < table.config().num_layers; ++layer) {
    const auto [begin, end] = table.layer_range(layer);
    largest = std::max(largest, end - begin);
  }
  return largest;
}

TEST_CASE("reduced a float at a time, backward holds the token embedding and one range") {
  // Pages of one float: the output layer's rows of wte stay from the start
  // of backward to the encoder's end; beside them ln_f, then each block,
  // then the position embedding.
  const auto check = [](const ParameterTable& table) {
    const int64_t wte = numel(table, TensorRole::kWte);
    const int64_t others = std::max({numel(table, TensorRole::kLnfWeight) * 2, largest_block(table),
                                     numel(table, TensorRole::kWpe)});
    CHECK(backward_gradient_peak_bytes(table, 1, 4) == (wte + others) * 4);
  };
  check(ParameterTable(small_config()));
  check(ParameterTable(small_config(), ModelShard{.tensor_rank = 1, .tensor_size = 2}));
}

TEST_CASE("one bucket of the whole buffer holds every page until the end") {
  const ParameterTable table(small_config());
  const int64_t n = table.total();
  CHECK(backward_gradient_peak_bytes(table, int64_t{1} << 40, 4) == n * 4);
  CHECK(backward_gradient_peak_bytes(table, n, 64) == (n * 4 + 63) / 64 * 64);
}

TEST_CASE("a page goes back only once every float on it is reduced") {
  const ParameterTable table(small_config());
  const int64_t n = table.total();
  // Buckets of one float, pages of the whole buffer: the page is held from
  // the first prepare until the last float is reduced.
  CHECK(backward_gradient_peak_bytes(table, 1, (n * 4 + 4095) / 4096 * 4096) ==
        (n * 4 + 4095) / 4096 * 4096);
  // Larger pages never hold less.
  int64_t previous = 0;
  for (const int64_t page : {4, 16, 64, 256, 1024}) {
    const int64_t peak = backward_gradient_peak_bytes(table, 100, page);
    CHECK(peak >= previous);
    previous = peak;
  }
}

}  // namespace
}  // namespace dslaunch::core
