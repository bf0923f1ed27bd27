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
    CHECK(backward_gradient_peak_bytes(table, 1, 0, 4) == (wte + others) * 4);
  };
  check(ParameterTable(small_config()));
  check(ParameterTable(small_config(), ModelShard{.tensor_rank = 1, .tensor_size = 2}));
}

TEST_CASE("one bucket of the whole buffer holds every page until the end") {
  const ParameterTable table(small_config());
  const int64_t n = table.total();
  CHECK(backward_gradient_peak_bytes(table, int64_t{1} << 40, 0, 4) == n * 4);
  CHECK(backward_gradient_peak_bytes(table, n, 0, 64) == (n * 4 + 63) / 64 * 64);
}

TEST_CASE("a page goes back only once every float on it is reduced") {
  const ParameterTable table(small_config());
  const int64_t n = table.total();
  // Buckets of one float, pages of the whole buffer: the page is held from
  // the first prepare until the last float is reduced.
  CHECK(backward_gradient_peak_bytes(table, 1, 0, (n * 4 + 4095) / 4096 * 4096) ==
        (n * 4 + 4095) / 4096 * 4096);
  // Larger pages never hold less.
  int64_t previous = 0;
  for (const int64_t page : {4, 16, 64, 256, 1024}) {
    const int64_t peak = backward_gradient_peak_bytes(table, 100, 0, page);
    CHECK(peak >= previous);
    previous = peak;
  }
}

TEST_CASE("buckets left in flight hold their floats until as many more are launched") {
  const ParameterTable table(small_config());
  const int64_t n = table.total();
  const int64_t wte = numel(table, TensorRole::kWte);
  // Buckets and pages of a float: each block is written beside the last
  // three floats of the range before it (every range is longer).
  CHECK(backward_gradient_peak_bytes(table, 1, 3, 4) == (wte + largest_block(table) + 3) * 4);
  // Buckets of 100 floats: each bucket waiting costs at most its floats.
  int64_t previous = backward_gradient_peak_bytes(table, 100, 0, 4);
  for (int64_t in_flight = 1; in_flight <= 4; ++in_flight) {
    const int64_t peak = backward_gradient_peak_bytes(table, 100, in_flight, 4);
    CHECK(peak >= previous);
    CHECK(peak <= previous + 100 * 4);
    previous = peak;
  }
  // A window of every bucket reduces nothing before backward ends.
  CHECK(backward_gradient_peak_bytes(table, 100, (n + 99) / 100, 4) == n * 4);
}

}  // namespace
}  // namespace dslaunch::core
