#include "worker/checkpoint/async_shard_writer.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <vector>

#include "tests/core/checkpoint/test_shards.h"
#include "core/checkpoint/file_checksum.h"

namespace dslaunch::worker::checkpoint {
namespace {

using Catch::Matchers::Contains;
using core::StateKind;
using core::testing::expected_values;
using core::testing::flat_layout;
using core::testing::ShardData;
using core::testing::TempDir;

// A shard of [begin, end) of a flat buffer of `end` elements.
core::ShardHeader header_for(int64_t begin, int64_t end, int64_t step) {
  return {.step = step,
          .rank = 0,
          .ranks = 1,
          .total_parameters = end,
          .begin = begin,
          .end = end,
          .optimizer_step = step,
          .loss_scaler = std::nullopt,
          .layout = flat_layout(end),
          .arrays = {},  // write_shard fills it in
          .rank_state = std::nullopt};
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

// All of `kind`'s elements the shard at `path` holds.
std::vector<float> read_array(const std::string& path, StateKind kind) {
  std::string error;
  const std::optional<core::ShardHeader> header = core::read_shard_header(path, error);
  INFO(error);
  REQUIRE(header);
  std::vector<float> out(static_cast<size_t>(header->end - header->begin));
  REQUIRE(core::read_flat_range({{path, header->begin, header->end}},
                                flat_layout(header->total_parameters), kind, header->begin,
                                header->end, out.data(), error));
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
  CHECK(read_array(path, StateKind::kParameter) ==
        expected_values(StateKind::kParameter, 0, 100'000));
  CHECK(read_array(path, StateKind::kAdamM) == expected_values(StateKind::kAdamM, 0, 100'000));
  CHECK(read_array(path, StateKind::kAdamV) == expected_values(StateKind::kAdamV, 0, 100'000));
  CHECK(dir.names() == std::vector<std::string>{"shard.bin"});
}

// A rank state with an f32 and an f64 error-feedback buffer of `count` elements.
core::RankState rank_state_of(int64_t count) {
  core::RankState state;
  state.data_rank = 1;
  state.data_ranks = 2;
  state.scalars = {{"lr", 0.1}, {"freeze_step", 400}};
  state.arrays = {{"worker_error", core::DType::kF32, count},
                  {"server_error", core::DType::kF64, count / 2 + 1}};
  return state;
}

// A `done` that holds the writer's thread until open() is called.
struct Gate {
  std::mutex mutex;
  std::condition_variable opened;
  bool is_open = false;
  AsyncShardWriter::Done hold() {
    return [this](const core::WrittenShard&) {
      std::unique_lock<std::mutex> lock(mutex);
      opened.wait(lock, [this] { return is_open; });
    };
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      is_open = true;
    }
    opened.notify_all();
  }
};

TEST_CASE("a borrowed save writes the arrays where they are, and release() waits for it") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  DoneCalls done;
  AsyncShardWriter writer;
  ShardData data(0, 100'000);
  core::ShardHeader header = header_for(0, 100'000, 5);
  header.rank_state = rank_state_of(1001);
  std::vector<float> worker_error(1001, 0.25f);
  std::vector<double> server_error(501, -0.5);
  writer.save(path, header, data.arrays(), {worker_error.data(), server_error.data()},
              done.record(), AsyncShardWriter::Hold::kBorrow);
  writer.release();
  // Written and reported by then: the arrays are the caller's again.
  REQUIRE(done.results.size() == 1);
  check_written(done.results[0], path);
  std::fill(data.params.begin(), data.params.end(), -1.0f);
  std::fill(worker_error.begin(), worker_error.end(), -1.0f);
  CHECK(read_array(path, StateKind::kParameter) ==
        expected_values(StateKind::kParameter, 0, 100'000));
  CHECK(read_array(path, StateKind::kAdamV) == expected_values(StateKind::kAdamV, 0, 100'000));
  std::string error;
  const std::optional<core::ShardHeader> read = core::read_shard_header(path, error);
  REQUIRE(read);
  CHECK(core::read_rank_state_array(path, *read, "worker_error", worker_error.data(), error));
  CHECK(worker_error == std::vector<float>(1001, 0.25f));
}

TEST_CASE("release() waits for a borrowed save in flight, not for a copied one") {
  TempDir dir;
  const ShardData data(0, 1000);
  using std::chrono::milliseconds;
  for (const auto hold : {AsyncShardWriter::Hold::kCopy, AsyncShardWriter::Hold::kBorrow}) {
    const bool borrowed = hold == AsyncShardWriter::Hold::kBorrow;
    INFO((borrowed ? "borrowed" : "copied"));
    AsyncShardWriter writer;
    Gate gate;
    writer.save(dir.file(borrowed ? "borrowed.bin" : "copied.bin"), header_for(0, 1000, 1),
                data.arrays(), {}, gate.hold(), hold);
    std::future<void> released = std::async(std::launch::async, [&writer] { writer.release(); });
    if (borrowed) {
      // Still in flight (its `done` is held): release() has not returned.
      CHECK(released.wait_for(milliseconds(300)) == std::future_status::timeout);
      gate.open();
      CHECK(released.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    } else {
      CHECK(released.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
      gate.open();
    }
    writer.wait();
  }
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
               .optimizer_step = 2,
               .loss_scaler = std::nullopt,
               .layout = flat_layout(51'000),
               .arrays = {},
               .rank_state = std::nullopt},
              second.arrays(), done.record());
  writer.wait();

  REQUIRE(done.results.size() == 2);
  check_written(done.results[0], dir.file("step-1.bin"));
  check_written(done.results[1], dir.file("step-2.bin"));
  CHECK(read_array(dir.file("step-1.bin"), StateKind::kAdamV) ==
        expected_values(StateKind::kAdamV, 0, 1000));
  CHECK(read_array(dir.file("step-2.bin"), StateKind::kAdamV) ==
        expected_values(StateKind::kAdamV, 1000, 51'000));
  // Then a smaller one again, into the grown buffers.
  writer.save(dir.file("step-3.bin"), header_for(0, 1000, 3), first.arrays(), done.record());
  writer.wait();
  REQUIRE(done.results.size() == 3);
  check_written(done.results[2], dir.file("step-3.bin"));
  CHECK(read_array(dir.file("step-3.bin"), StateKind::kParameter) ==
        expected_values(StateKind::kParameter, 0, 1000));
}

TEST_CASE("save copies each array's bytes in its own element type, in the order given") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  DoneCalls done;
  AsyncShardWriter writer;
  // Two bytes an element: 0x3f80 is bf16's 1.0.
  std::vector<uint16_t> master_bf16(1000, 0x3f80);
  std::vector<float> feedback = expected_values(StateKind::kErrorFeedback, 0, 1000);
  writer.save(path, header_for(0, 1000, 4),
              {{{StateKind::kMaster, core::DType::kBF16}, master_bf16.data()},
               {{StateKind::kErrorFeedback, core::DType::kF32}, feedback.data()}},
              done.record());
  std::fill(master_bf16.begin(), master_bf16.end(), uint16_t{0});
  std::fill(feedback.begin(), feedback.end(), 0.0f);
  writer.wait();

  REQUIRE(done.results.size() == 1);
  check_written(done.results[0], path);
  std::string error;
  const std::optional<core::ShardHeader> header = core::read_shard_header(path, error);
  INFO(error);
  REQUIRE(header);
  REQUIRE(header->arrays.size() == 2);
  CHECK(header->arrays[0].kind == StateKind::kMaster);
  CHECK(header->arrays[0].dtype == core::DType::kBF16);
  CHECK(header->arrays[1].kind == StateKind::kErrorFeedback);
  CHECK(header->arrays[1].dtype == core::DType::kF32);
  CHECK(read_array(path, StateKind::kErrorFeedback) ==
        expected_values(StateKind::kErrorFeedback, 0, 1000));
  // The bf16 array (2000 bytes, padded to 2048) is just before the fp32 one,
  // which ends the file.
  const std::string bytes = core::testing::read_bytes(path);
  const size_t master_at = bytes.size() - 4000 - 2048;
  const std::vector<uint16_t> ones(1000, 0x3f80);
  CHECK(std::memcmp(bytes.data() + master_at, ones.data(), 2000) == 0);
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

TEST_CASE("save copies the rank-state arrays too: changing them after it returns changes nothing") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  DoneCalls done;
  AsyncShardWriter writer;
  const ShardData data(0, 1000);
  core::ShardHeader header = header_for(0, 1000, 5);
  header.rank_state = rank_state_of(100'001);
  std::vector<float> worker_error(100'001);
  std::vector<double> server_error(50'001);
  for (size_t i = 0; i < worker_error.size(); ++i) worker_error[i] = 0.5f * i - 3;
  for (size_t i = 0; i < server_error.size(); ++i) server_error[i] = 1.0 / (i + 7);
  const std::vector<float> saved_worker = worker_error;
  const std::vector<double> saved_server = server_error;
  writer.save(path, header, data.arrays(), {worker_error.data(), server_error.data()},
              done.record());
  std::fill(worker_error.begin(), worker_error.end(), -1.0f);
  std::fill(server_error.begin(), server_error.end(), -2.0);
  writer.wait();

  REQUIRE(done.results.size() == 1);
  check_written(done.results[0], path);
  std::string error;
  const std::optional<core::ShardHeader> read = core::read_shard_header(path, error);
  INFO(error);
  REQUIRE(read);
  REQUIRE(read->rank_state);
  CHECK(read->rank_state->data_rank == 1);
  CHECK(read->rank_state->scalars == header.rank_state->scalars);
  CHECK(core::read_rank_state_array(path, *read, "worker_error", worker_error.data(), error));
  CHECK(core::read_rank_state_array(path, *read, "server_error", server_error.data(), error));
  CHECK(worker_error == saved_worker);
  CHECK(server_error == saved_server);
  CHECK(read_array(path, StateKind::kAdamV) == expected_values(StateKind::kAdamV, 0, 1000));

  // A save without rank state after it, into the same writer, has none.
  writer.save(dir.file("plain.bin"), header_for(0, 1000, 6), data.arrays(), done.record());
  writer.wait();
  REQUIRE(done.results.size() == 2);
  check_written(done.results[1], dir.file("plain.bin"));
  const std::optional<core::ShardHeader> plain =
      core::read_shard_header(dir.file("plain.bin"), error);
  REQUIRE(plain);
  CHECK_FALSE(plain->rank_state);
}

TEST_CASE("Rank arrays that do not match the rank state are reported to done") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  DoneCalls done;
  AsyncShardWriter writer;
  const ShardData data(0, 10);
  core::ShardHeader header = header_for(0, 10, 1);
  header.rank_state = rank_state_of(5);
  const std::vector<float> worker_error(5, 1.0f);
  writer.save(path, header, data.arrays(), {worker_error.data()}, done.record());
  // The 4-argument save writes no rank arrays.
  writer.save(path, header, data.arrays(), done.record());
  writer.wait();
  REQUIRE(done.results.size() == 2);
  CHECK_THAT(done.results[0].error,
             Contains("cannot write checkpoint shard '" + path + "'") &&
                 Contains("it is given 1 rank-state arrays, but its rank_state lists 2"));
  CHECK_THAT(done.results[1].error,
             Contains("it is given 0 rank-state arrays, but its rank_state lists 2"));
  CHECK(dir.names().empty());
}

TEST_CASE("A save whose arrays stream is written before save() returns, after the one in flight") {
  TempDir dir;
  AsyncShardWriter writer;
  DoneCalls calls;
  const ShardData first(0, 200'000);
  writer.save(dir.file("first.bin"), header_for(0, 200'000, 1), first.arrays(), calls.record());
  const ShardData second(0, 1000);
  std::vector<core::ShardArrayData> arrays;
  for (const core::ShardArrayData& array : second.arrays()) {
    arrays.push_back(core::ShardArrayData::streamed(
        array.info, [array](int64_t from, int64_t count, void* out) {
          std::memcpy(out, static_cast<const float*>(array.data) + from,
                      static_cast<size_t>(count) * sizeof(float));
          return std::string();
        }));
  }
  writer.save(dir.file("second.bin"), header_for(0, 1000, 2), arrays, calls.record());
  // No wait(): both are written, in order, and both reported.
  {
    std::lock_guard<std::mutex> lock(calls.mutex);
    REQUIRE(calls.results.size() == 2);
    CHECK(calls.results[0].ok());
    CHECK(calls.results[1].ok());
  }
  CHECK(read_array(dir.file("second.bin"), StateKind::kAdamV) == second.adam_v);
  CHECK(read_array(dir.file("first.bin"), StateKind::kParameter) == first.params);
}

}  // namespace
}  // namespace dslaunch::worker::checkpoint
