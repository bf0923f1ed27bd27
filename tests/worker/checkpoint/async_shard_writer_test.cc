#include "worker/checkpoint/async_shard_writer.h"

#include <catch2/catch.hpp>
#include <mutex>
#include <vector>

#include "tests/core/checkpoint/test_shards.h"
#include "core/checkpoint/file_checksum.h"

namespace dslaunch::worker::checkpoint {
namespace {

using Catch::Matchers::Contains;
using core::testing::expected_values;
using core::testing::ShardData;
using core::testing::TempDir;

core::ShardHeader header_for(int64_t begin, int64_t end, int64_t step) {
  return {.step = step,
          .rank = 0,
          .ranks = 1,
          .total_parameters = end,
          .begin = begin,
          .end = end,
          .optimizer_step = step};
}

// Each `done` call's result, from the writer's thread.
struct DoneCalls {
  std::mutex mutex;
  std::vector<core::WrittenShard> results;
  AsyncShardWriter::Done record() {
    return [this](const core::WrittenShard& written) {
      std::lock_guard<std::mutex> lock(mutex);
      results.push_back(written);
    };
  }
};

std::vector<float> read_array(const std::string& path, core::ShardArray array) {
  std::string error;
  const std::optional<core::ShardHeader> header = core::read_shard_header(path, error);
  INFO(error);
  REQUIRE(header);
  std::vector<float> out(static_cast<size_t>(header->end - header->begin));
  REQUIRE(core::read_shard_range(path, *header, array, header->begin, header->end, out.data(), error));
  return out;
}

void check_written(const core::WrittenShard& written, const std::string& path) {
  INFO(written.error);
  CHECK(written.ok());
  std::string error;
  CHECK(core::file_xxh64(path, error) == written.xxh64);
  CHECK(written.size_bytes == static_cast<int64_t>(core::testing::read_bytes(path).size()));
}

TEST_CASE("save copies the arrays: changing them after it returns changes nothing written") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  DoneCalls done;
  AsyncShardWriter writer;
  ShardData data(0, 100'000);
  writer.save(path, header_for(0, 100'000, 5), data.arrays(), done.record());
  std::fill(data.params.begin(), data.params.end(), -1.0f);
  std::fill(data.adam_m.begin(), data.adam_m.end(), -2.0f);
  std::fill(data.adam_v.begin(), data.adam_v.end(), -3.0f);
  writer.wait();

  REQUIRE(done.results.size() == 1);
  check_written(done.results[0], path);
  CHECK(read_array(path, core::ShardArray::kParams) == expected_values(core::ShardArray::kParams, 0, 100'000));
  CHECK(read_array(path, core::ShardArray::kAdamM) == expected_values(core::ShardArray::kAdamM, 0, 100'000));
  CHECK(read_array(path, core::ShardArray::kAdamV) == expected_values(core::ShardArray::kAdamV, 0, 100'000));
  CHECK(dir.names() == std::vector<std::string>{"shard.bin"});
}

TEST_CASE("Back-to-back saves both complete, each with its own data") {
  TempDir dir;
  DoneCalls done;
  AsyncShardWriter writer;
  // The second is larger, so the buffers grow between them.
  const ShardData first(0, 1000);
  const ShardData second(1000, 51'000);
  writer.save(dir.file("step-1.bin"), header_for(0, 1000, 1), first.arrays(), done.record());
  writer.save(dir.file("step-2.bin"),
              {.step = 2,
               .rank = 0,
               .ranks = 1,
               .total_parameters = 51'000,
               .begin = 1000,
               .end = 51'000,
               .optimizer_step = 2},
              second.arrays(), done.record());
  writer.wait();

  REQUIRE(done.results.size() == 2);
  check_written(done.results[0], dir.file("step-1.bin"));
  check_written(done.results[1], dir.file("step-2.bin"));
  CHECK(read_array(dir.file("step-1.bin"), core::ShardArray::kAdamV) ==
        expected_values(core::ShardArray::kAdamV, 0, 1000));
  CHECK(read_array(dir.file("step-2.bin"), core::ShardArray::kAdamV) ==
        expected_values(core::ShardArray::kAdamV, 1000, 51'000));
  // Then a smaller one again, into the grown buffers.
  writer.save(dir.file("step-3.bin"), header_for(0, 1000, 3), first.arrays(), done.record());
  writer.wait();
  REQUIRE(done.results.size() == 3);
  check_written(done.results[2], dir.file("step-3.bin"));
  CHECK(read_array(dir.file("step-3.bin"), core::ShardArray::kParams) ==
        expected_values(core::ShardArray::kParams, 0, 1000));
}

TEST_CASE("The writer's destructor finishes the save in flight") {
  TempDir dir;
  DoneCalls done;
  {
    AsyncShardWriter writer;
    const ShardData data(0, 200'000);
    writer.save(dir.file("shard.bin"), header_for(0, 200'000, 9), data.arrays(), done.record());
  }
  REQUIRE(done.results.size() == 1);
  check_written(done.results[0], dir.file("shard.bin"));
  CHECK(dir.names() == std::vector<std::string>{"shard.bin"});
}

TEST_CASE("A failed write is reported to done") {
  TempDir dir;
  DoneCalls done;
  AsyncShardWriter writer;
  const ShardData data(0, 10);
  const std::string path = dir.file("missing/shard.bin");
  writer.save(path, header_for(0, 10, 1), data.arrays(), done.record());
  writer.wait();
  REQUIRE(done.results.size() == 1);
  CHECK_FALSE(done.results[0].ok());
  CHECK_THAT(done.results[0].error, Contains("cannot write checkpoint shard '" + path + "'"));
  CHECK(dir.names().empty());
}

}  // namespace
}  // namespace dslaunch::worker::checkpoint
