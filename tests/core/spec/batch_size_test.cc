#include "core/spec/batch_size.h"

#include <catch2/catch.hpp>

using dslaunch::spec::BatchInput;
using dslaunch::spec::resolve_batch_sizes;

namespace {

// (train, micro, gas) after resolution, or all -1 on error.
std::tuple<int64_t, int64_t, int64_t> resolved(BatchInput input, int64_t dp) {
  const auto result = resolve_batch_sizes(input, dp);
  if (!result.sizes) return {-1, -1, -1};
  return {result.sizes->train_batch_size, result.sizes->micro_batch_per_gpu,
          result.sizes->gradient_accumulation_steps};
}

}  // namespace

TEST_CASE("all three batch keys are checked, not changed") {
  CHECK(resolved({32, 4, 2}, 4) == std::tuple<int64_t, int64_t, int64_t>{32, 4, 2});
}

TEST_CASE("train and micro give gas = train / micro / dp") {
  CHECK(resolved({32, 4, {}}, 2) == std::tuple<int64_t, int64_t, int64_t>{32, 4, 4});
  CHECK(resolved({64, 2, {}}, 8) == std::tuple<int64_t, int64_t, int64_t>{64, 2, 4});
}

TEST_CASE("train and gas give micro = train / dp / gas") {
  CHECK(resolved({32, {}, 2}, 4) == std::tuple<int64_t, int64_t, int64_t>{32, 4, 2});
}

TEST_CASE("micro and gas give train = micro * gas * dp") {
  CHECK(resolved({{}, 3, 5}, 2) == std::tuple<int64_t, int64_t, int64_t>{30, 3, 5});
}

TEST_CASE("train alone gives gas 1 and micro = train / dp") {
  CHECK(resolved({16, {}, {}}, 4) == std::tuple<int64_t, int64_t, int64_t>{16, 4, 1});
}

TEST_CASE("micro alone gives train = micro * dp and gas 1") {
  CHECK(resolved({{}, 6, {}}, 3) == std::tuple<int64_t, int64_t, int64_t>{18, 6, 1});
}

TEST_CASE("gas alone, or nothing, is an error") {
  for (const BatchInput& input : {BatchInput{{}, {}, 4}, BatchInput{}}) {
    const auto result = resolve_batch_sizes(input, 2);
    CHECK_FALSE(result.sizes);
    CHECK(result.error.find("train_batch_size or training.train_micro_batch_size_per_gpu") !=
          std::string::npos);
  }
}

TEST_CASE("integer division that loses a remainder fails the final check with four numbers") {
  // 30 / 4 / 2 = 3 (integer division), and 4 * 3 * 2 = 24 != 30.
  const auto result = resolve_batch_sizes({30, 4, {}}, 2);
  REQUIRE_FALSE(result.sizes);
  CHECK(result.error.find("train_batch_size 30") != std::string::npos);
  CHECK(result.error.find("train_micro_batch_size_per_gpu 4") != std::string::npos);
  CHECK(result.error.find("gradient_accumulation_steps 3") != std::string::npos);
  CHECK(result.error.find("data-parallel size 2 (= 24)") != std::string::npos);
}

TEST_CASE("a derived size of zero is an error") {
  // micro = 4 / 8 = 0.
  const auto result = resolve_batch_sizes({4, {}, {}}, 8);
  REQUIRE_FALSE(result.sizes);
  CHECK(result.error.find("train_micro_batch_size_per_gpu 0") != std::string::npos);
}

TEST_CASE("three given sizes that disagree are an error") {
  const auto result = resolve_batch_sizes({32, 4, 2}, 2);
  REQUIRE_FALSE(result.sizes);
  CHECK(result.error.find("(= 16)") != std::string::npos);
}

TEST_CASE("products that overflow 64 bits are an error, not a wrapped number") {
  const int64_t huge = int64_t{1} << 40;
  for (const BatchInput& input : {BatchInput{{}, huge, huge}, BatchInput{huge, huge, huge}}) {
    const auto result = resolve_batch_sizes(input, 1024);
    CHECK_FALSE(result.sizes);
    CHECK(result.error.find("too large") != std::string::npos);
  }
}
