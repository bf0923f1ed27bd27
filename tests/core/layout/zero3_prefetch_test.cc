#include "core/layout/zero3_prefetch.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

namespace dslaunch::core {
namespace {

// Four blocks; the token embedding in eight vocabulary chunks; tensors
// under 10 floats (the biases of 8 and the LayerNorms) persistent.
Zero3Regions small_regions() {
  Gpt2Config c;
  c.num_layers = 4;
  c.channels = 8;
  c.num_heads = 2;
  c.vocab_size = 30;
  c.padded_vocab_size = 32;
  c.max_seq_len = 6;
  return Zero3Regions(ParameterTable(c), 10);
}

// A gatherer that records what the policy requests.
class Requests final : public Zero3Gathering {
 public:
  explicit Requests(const Zero3Regions& regions)
      : regions_(regions), live_(regions.regions.size()) {}
  void acquire(int region) {
    if (!live_[region]) add(region);
  }
  bool live(int region) const override { return live_[region]; }
  int64_t live_floats() const override { return floats_; }
  void prefetch(int region) override {
    requested.push_back(region);
    add(region);
  }
  std::vector<int> requested;

 private:
  void add(int region) {
    live_[region] = true;
    floats_ += regions_.region_size(region);
  }
  const Zero3Regions& regions_;
  std::vector<bool> live_;
  int64_t floats_ = 0;
};

TEST_CASE("the blocks that follow are requested while they fit in the prefetch bucket") {
  const Zero3Regions regions = small_regions();
  REQUIRE(regions.layers == 4);
  REQUIRE(regions.chunks == 8);
  const int64_t block = regions.region_size(1);
  for (int layer = 1; layer < 4; ++layer) REQUIRE(regions.region_size(1 + layer) == block);
  const int64_t unlimited = int64_t{1} << 40;
  SECTION("two blocks ahead in the pass's order, forward and backward") {
    const Zero3Prefetch prefetch(regions, 2 * block, unlimited);
    Requests forward(regions);
    forward.acquire(1);
    prefetch.after_block(forward, 0, true);
    CHECK(forward.requested == std::vector<int>{2, 3});
    Requests backward(regions);
    backward.acquire(4);
    prefetch.after_block(backward, 3, false);
    CHECK(backward.requested == std::vector<int>{3, 2});
  }
  SECTION("a block already requested counts as ahead: only what is new is requested") {
    const Zero3Prefetch prefetch(regions, 2 * block, unlimited);
    Requests gathering(regions);
    gathering.acquire(1);
    prefetch.after_block(gathering, 0, true);
    gathering.acquire(2);
    prefetch.after_block(gathering, 1, true);
    CHECK(gathering.requested == std::vector<int>{2, 3, 4});
  }
  SECTION("an empty bucket still requests the next block") {
    const Zero3Prefetch prefetch(regions, 0, unlimited);
    Requests gathering(regions);
    gathering.acquire(2);
    prefetch.after_block(gathering, 1, true);
    CHECK(gathering.requested == std::vector<int>{3});
  }
  SECTION("the live limit postpones a block and every one after it") {
    Requests gathering(regions);
    gathering.acquire(0);
    gathering.acquire(1);
    const Zero3Prefetch prefetch(regions, unlimited, gathering.live_floats() + block + block / 2);
    prefetch.after_block(gathering, 0, true);
    CHECK(gathering.requested == std::vector<int>{2});
    Requests nothing(regions);
    nothing.acquire(0);
    nothing.acquire(1);
    const Zero3Prefetch none(regions, unlimited, nothing.live_floats());
    none.after_block(nothing, 0, true);
    CHECK(nothing.requested.empty());
  }
}

TEST_CASE("the vocabulary chunks request the next chunk, and the last one the blocks after") {
  const Zero3Regions regions = small_regions();
  const Zero3Prefetch prefetch(regions, 0, int64_t{1} << 40);
  const int first_chunk = 1 + regions.layers;
  Requests gathering(regions);
  gathering.acquire(0);
  prefetch.after_embeddings(gathering);
  CHECK(gathering.requested == std::vector<int>{first_chunk});  // the encoder's first
  Requests encoder(regions);
  prefetch.after_vocab_chunk(encoder, 2, VocabUse::kEncoder);
  CHECK(encoder.requested == std::vector<int>{first_chunk + 3});
  Requests encoder_end(regions);
  prefetch.after_vocab_chunk(encoder_end, 7, VocabUse::kEncoder);
  CHECK(encoder_end.requested == std::vector<int>{1});  // block 0
  Requests output_end(regions);
  prefetch.after_vocab_chunk(output_end, 7, VocabUse::kOutputForward);
  CHECK(output_end.requested.empty());  // backward, or nothing, follows
  Requests backward_start(regions);
  prefetch.after_vocab_chunk(backward_start, 7, VocabUse::kOutputBackward);
  CHECK(backward_start.requested == std::vector<int>{4});  // the last block
  Requests last_forward(regions);
  last_forward.acquire(4);
  prefetch.after_block(last_forward, 3, true);
  CHECK(last_forward.requested == std::vector<int>{first_chunk});  // the output layer's first
}

TEST_CASE("the GPU workspace's peak is replayed from the model's order of requests") {
  const Zero3Regions regions = small_regions();
  const int64_t persistent = regions.persistent_floats();
  const int64_t embeddings = regions.region_size(0);
  const int64_t block = regions.region_size(1);
  const int64_t chunk = regions.region_size(1 + regions.layers);
  // Pages of one float: the floats of what is live at once.
  SECTION("gathered just before use: the embeddings with the last block and a chunk") {
    CHECK(gathered_peak_bytes(regions, 4, nullptr) ==
          (persistent + embeddings + block + chunk) * 4);
  }
  SECTION("prefetching everything: every block beside the encoder's last chunk") {
    const Zero3Prefetch prefetch(regions, int64_t{1} << 40, int64_t{1} << 40);
    CHECK(gathered_peak_bytes(regions, 4, &prefetch) ==
          (persistent + embeddings + 4 * block + chunk) * 4);
  }
  SECTION("a bucket of one block: the block in use and the next") {
    REQUIRE(block > 2 * chunk);  // the output layer's two chunks beside the last block weigh less
    const Zero3Prefetch prefetch(regions, block, int64_t{1} << 40);
    CHECK(gathered_peak_bytes(regions, 4, &prefetch) == (persistent + embeddings + 2 * block) * 4);
  }
  SECTION("one page holds it all") {
    const int64_t page = int64_t{1} << 30;
    CHECK(gathered_peak_bytes(regions, page, nullptr) == page);
  }
}

}  // namespace
}  // namespace dslaunch::core
