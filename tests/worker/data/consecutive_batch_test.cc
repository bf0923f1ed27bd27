#include "worker/data/consecutive_batch.h"

#include <cstdint>

#include <catch2/catch.hpp>
#include <vector>

#include "tests/worker/data/test_files.h"

namespace dslaunch::worker::data {
namespace {

using testing::VectorSource;

TEST_CASE("consecutive_batch_count counts batches of B·T + 1 tokens stepping by B·T") {
  CHECK(consecutive_batch_count(0, 2, 4) == 0);
  // B·T past 64 bits wrapped to 0 and divided by it (SIGFPE in dslaunch eval).
  CHECK(consecutive_batch_count(1000, int64_t{1} << 62, 4) == 0);
  CHECK(consecutive_batch_count(1000, INT64_MAX, INT64_MAX) == 0);
  CHECK(consecutive_batch_count(8, 2, 4) == 0);  // needs 9
  CHECK(consecutive_batch_count(9, 2, 4) == 1);
  CHECK(consecutive_batch_count(16, 2, 4) == 1);
  CHECK(consecutive_batch_count(17, 2, 4) == 2);
}

TEST_CASE("Batch n holds rows of T tokens from n·B·T, targets shifted by one") {
  const auto source = VectorSource::counting(101);
  const TokenRange range{&source, 10, 101};  // token value = position in the source
  std::vector<int32_t> inputs(6);
  std::vector<int32_t> targets(6);
  consecutive_batch(range, 0, 2, 3, inputs.data(), targets.data());
  CHECK(inputs == std::vector<int32_t>{10, 11, 12, 13, 14, 15});
  CHECK(targets == std::vector<int32_t>{11, 12, 13, 14, 15, 16});
  consecutive_batch(range, 4, 2, 3, inputs.data(), targets.data());
  CHECK(inputs == std::vector<int32_t>{34, 35, 36, 37, 38, 39});
  CHECK(targets == std::vector<int32_t>{35, 36, 37, 38, 39, 40});

  // The last batch that fits ends at the range's last token.
  const int64_t last = consecutive_batch_count(range.size(), 2, 3) - 1;
  REQUIRE(last == 14);
  consecutive_batch(range, last, 2, 3, inputs.data(), targets.data());
  CHECK(inputs.front() == 94);
  CHECK(targets.back() == 100);
}

}  // namespace
}  // namespace dslaunch::worker::data
