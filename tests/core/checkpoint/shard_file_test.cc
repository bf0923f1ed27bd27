#include "core/checkpoint/shard_file.h"

#include <sys/stat.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/checkpoint/file_checksum.h"
#include "core/faulty_file_system.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "tests/core/checkpoint/test_shards.h"

namespace dslaunch::core {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using testing::expected_values;
using testing::flat_layout;
using testing::ShardData;
using testing::TempDir;

// A shard of a flat buffer of `total` elements.
ShardHeader header_for(int rank, int ranks, int64_t total, int64_t begin, int64_t end) {
  return {.step = 40,
          .rank = rank,
          .ranks = ranks,
          .total_parameters = total,
          .begin = begin,
          .end = end,
          .optimizer_step = 39,
          .loss_scaler = std::nullopt,
          .layout = flat_layout(total),
          .arrays = {},  // write_shard fills it in
          .rank_state = std::nullopt};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// `kind`'s elements [from, to) of the flat layout the shard at `path` was
// written with, read from that shard alone.
std::vector<float> read_range(const std::string& path, const ShardHeader& header, StateKind kind,
                              int64_t from, int64_t to) {
  std::vector<float> out(static_cast<size_t>(to - from));
  std::string error;
  const bool read =
      read_flat_range({{path, header.begin, header.end}}, flat_layout(header.total_parameters),
                      kind, from, to, out.data(), error);
  INFO(error);
  REQUIRE(read);
  return out;
}

TEST_CASE("A shard reads back bit for bit, with its size and checksum") {
  TempDir dir;
  const std::string path = dir.file("shard-1.bin");
  const ShardHeader header = header_for(1, 3, 1000, 300, 550);
  ShardData data(300, 550);
  // Values a lossy path would change: a NaN's payload, -0, a denormal, infinity.
  data.params[0] = std::bit_cast<float>(0x7fc01234u);
  data.params[1] = -0.0f;
  data.adam_m[2] = std::numeric_limits<float>::denorm_min();
  data.adam_v[249] = -std::numeric_limits<float>::infinity();

  const WrittenShard written = write_shard(path, header, data.arrays());
  INFO(written.error);
  REQUIRE(written.ok());
  CHECK(dir.names() == std::vector<std::string>{"shard-1.bin"});
  CHECK(written.size_bytes == static_cast<int64_t>(std::filesystem::file_size(path)));
  std::string error;
  CHECK(file_xxh64(path, error) == written.xxh64);
  const std::string bytes = testing::read_bytes(path);
  CHECK(bytes.substr(0, 8) == "DSLSHRD1");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 8, sizeof version);
  CHECK(version == 2);
  // Each array starts on a 64-byte boundary: 1000 bytes, padded to 1024
  // before the next; the last one ends the file.
  const int64_t first_array = written.size_bytes - (1024 + 1024 + 1000);
  CHECK(first_array % 64 == 0);
  CHECK(std::memcmp(bytes.data() + first_array, data.params.data(), 1000) == 0);
  CHECK(std::memcmp(bytes.data() + first_array + 1024, data.adam_m.data(), 1000) == 0);
  CHECK(std::memcmp(bytes.data() + first_array + 2048, data.adam_v.data(), 1000) == 0);
  CHECK(bytes.substr(first_array + 1000, 24) == std::string(24, '\0'));

  const std::optional<ShardHeader> read = read_shard_header(path, error);
  INFO(error);
  REQUIRE(read);
  CHECK(read->step == 40);
  CHECK(read->rank == 1);
  CHECK(read->ranks == 3);
  CHECK(read->total_parameters == 1000);
  CHECK(read->begin == 300);
  CHECK(read->end == 550);
  CHECK(read->optimizer_step == 39);
  CHECK(read->format_version == 2);
  REQUIRE(read->layout.size() == 1);
  CHECK(read->layout[0].name == "flat");
  CHECK(read->layout[0].global_shape == std::vector<int64_t>{1000});
  CHECK(read->layout[0].split.view == std::vector<int64_t>{1000});
  CHECK(read->layout[0].split.parts == 1);
  CHECK(read->layout[0].offset == 0);
  CHECK(read->layout[0].numel == 1000);
  // write_shard fills the header's list of arrays from what it was given.
  REQUIRE(read->arrays.size() == 3);
  CHECK(read->arrays[0].kind == StateKind::kParameter);
  CHECK(read->arrays[1].kind == StateKind::kAdamM);
  CHECK(read->arrays[2].kind == StateKind::kAdamV);
  for (const ShardArrayInfo& array : read->arrays) CHECK(array.dtype == DType::kF32);

  CHECK(same_bits(read_range(path, *read, StateKind::kParameter, 300, 550), data.params));
  CHECK(same_bits(read_range(path, *read, StateKind::kAdamM, 300, 550), data.adam_m));
  CHECK(same_bits(read_range(path, *read, StateKind::kAdamV, 300, 550), data.adam_v));
  CHECK(read_range(path, *read, StateKind::kAdamM, 400, 403) ==
        std::vector<float>{data.adam_m[100], data.adam_m[101], data.adam_m[102]});
  CHECK(read_range(path, *read, StateKind::kAdamV, 549, 550) ==
        std::vector<float>{-std::numeric_limits<float>::infinity()});
  CHECK(read_range(path, *read, StateKind::kParameter, 320, 320).empty());

  // Past what the shard holds: the first element missing is named.
  std::vector<float> out(10);
  CHECK_FALSE(read_flat_range({{path, 300, 550}}, flat_layout(1000), StateKind::kParameter, 545,
                              555, out.data(), error));
  CHECK_THAT(error, Equals("no checkpoint shard holds element 550 of flat (its slice 0 of 1)"));
}

TEST_CASE("An fp16 run's loss scaler travels in the header, and only there") {
  TempDir dir;
  ShardHeader header = header_for(0, 1, 1000, 0, 1000);
  CHECK_FALSE(header.loss_scaler);
  header.loss_scaler = LossScalerState{.scale = 0.25,
                                       .iteration = 41,
                                       .last_overflow_iteration = 37,
                                       .hysteresis_left = 1,
                                       .skipped_steps = 5};
  ShardData data(0, 1000);
  const std::string path = dir.file("scaled.bin");
  REQUIRE(write_shard(path, header, data.arrays()).ok());
  std::string error;
  const std::optional<ShardHeader> read = read_shard_header(path, error);
  INFO(error);
  REQUIRE(read);
  REQUIRE(read->loss_scaler);
  CHECK(read->loss_scaler->scale == 0.25);
  CHECK(read->loss_scaler->iteration == 41);
  CHECK(read->loss_scaler->last_overflow_iteration == 37);
  CHECK(read->loss_scaler->hysteresis_left == 1);
  CHECK(read->loss_scaler->skipped_steps == 5);

  // A state no run can reach is refused, naming it.
  for (const LossScalerState& impossible :
       {LossScalerState{.scale = 2, .iteration = 3, .last_overflow_iteration = 3},
        LossScalerState{.scale = 2, .iteration = 3, .skipped_steps = 4},
        LossScalerState{.scale = 2, .iteration = -1},
        LossScalerState{.scale = 2, .iteration = 3, .hysteresis_left = -1}}) {
    header.loss_scaler = impossible;
    const std::string bad = dir.file("bad-scaler.bin");
    REQUIRE(write_shard(bad, header, data.arrays()).ok());
    CHECK_FALSE(read_shard_header(bad, error));
    CHECK_THAT(error, Catch::Contains("loss_scaler") && Catch::Contains("not one a run can reach"));
  }

  const std::string plain = dir.file("plain.bin");
  REQUIRE(write_shard(plain, header_for(0, 1, 1000, 0, 1000), data.arrays()).ok());
  const std::optional<ShardHeader> without = read_shard_header(plain, error);
  REQUIRE(without);
  CHECK_FALSE(without->loss_scaler);
}

TEST_CASE("A rank that owns nothing writes a shard with empty arrays") {
  TempDir dir;
  const std::string path = dir.file("shard-3.bin");
  const ShardData nothing(10, 10);
  const WrittenShard written = write_shard(path, header_for(3, 4, 10, 10, 10), nothing.arrays());
  INFO(written.error);
  REQUIRE(written.ok());
  CHECK(written.size_bytes % 64 == 0);
  std::string error;
  const std::optional<ShardHeader> read = read_shard_header(path, error);
  REQUIRE(read);
  CHECK(read->begin == 10);
  CHECK(read->end == 10);
  CHECK(read->arrays.size() == 3);
  CHECK(read_range(path, *read, StateKind::kAdamV, 10, 10).empty());
}

TEST_CASE("A header that is not consistent is not written") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  CHECK_THAT(write_shard(path, header_for(0, 2, 100, 60, 50), {}).error,
             Contains("cannot write checkpoint shard '" + path + "'") &&
                 Contains("range [60, 50) is not within [0, 100)"));
  CHECK_THAT(write_shard(path, header_for(2, 2, 100, 0, 0), {}).error,
             Contains("rank 2 of 2 ranks"));
  ShardHeader format_1 = header_for(0, 1, 100, 0, 0);
  format_1.format_version = 1;
  CHECK_THAT(
      write_shard(path, format_1, {}).error,
      Contains("cannot write checkpoint shard '" + path + "'") && Contains("format version 1"));
  CHECK(dir.names().empty());
}

TEST_CASE("A layout whose tensors do not tile [0, total) is not written") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const ShardData data(0, 100);
  const auto tensor = [](std::string name, int64_t offset, int64_t numel) {
    return LayoutTensor{.name = std::move(name),
                        .global_shape = {numel},
                        .split = TensorSplit{.view = {numel}, .dim = 0, .index = 0, .parts = 1},
                        .offset = offset,
                        .numel = numel};
  };
  ShardHeader header = header_for(0, 1, 100, 0, 100);
  std::string problem;
  SECTION("too few elements") {
    header.layout = flat_layout(90);
    problem = "its layout's tensors hold 90 elements, not the 100 of total_parameters";
  }
  SECTION("too many elements") {
    header.layout = flat_layout(110);
    problem = "its layout's tensors hold 110 elements, not the 100 of total_parameters";
  }
  SECTION("a gap between two tensors") {
    header.layout = {tensor("a", 0, 40), tensor("b", 50, 50)};
    problem = "tensor b starts at 50, not at 40 where the one before it ends";
  }
  SECTION("two tensors overlapping") {
    header.layout = {tensor("a", 0, 60), tensor("b", 50, 50)};
    problem = "tensor b starts at 50, not at 60 where the one before it ends";
  }
  SECTION("out of order") {
    header.layout = {tensor("b", 40, 60), tensor("a", 0, 40)};
    problem = "tensor b starts at 40, not at 0 where the one before it ends";
  }
  SECTION("no layout at all") {
    header.layout.clear();
    problem = "its layout lists 0 tensors";
  }
  SECTION("a tensor holding more than its slice") {
    header.layout = flat_layout(100);
    header.layout[0].global_shape = {50};
    problem = "tensor flat holds 100 elements, not 1/1 of its 50";
  }
  const WrittenShard written = write_shard(path, header, data.arrays());
  CHECK_THAT(written.error, Equals("cannot write checkpoint shard '" + path + "': " + problem));
  CHECK(dir.names().empty());
}

// Four shards of [0, 100), uneven and one empty, listed out of order.
std::vector<ShardLocation> write_four_shards(const TempDir& dir) {
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 37}, {37, 37}, {37, 61}, {61, 100}};
  std::vector<ShardLocation> locations;
  for (size_t rank = 0; rank < ranges.size(); ++rank) {
    const auto [begin, end] = ranges[rank];
    const std::string path = dir.file("shard-" + std::to_string(rank) + ".bin");
    const ShardData data(begin, end);
    const WrittenShard written =
        write_shard(path, header_for(static_cast<int>(rank), 4, 100, begin, end), data.arrays());
    INFO(written.error);
    REQUIRE(written.ok());
    locations.push_back({path, begin, end});
  }
  std::swap(locations[0], locations[3]);
  std::swap(locations[1], locations[2]);
  return locations;
}

TEST_CASE("A layout that names a tensor twice is not written") {
  // Readers find a shard's tensors by name: a second tensor of the same
  // name would be read in place of the first.
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const ShardData data(0, 100);
  ShardHeader header = header_for(0, 1, 100, 0, 100);
  header.layout = {flat_layout(50)[0], flat_layout(50)[0]};
  header.layout[1].offset = 50;
  const WrittenShard written = write_shard(path, header, data.arrays());
  CHECK_FALSE(written.ok());
  CHECK_THAT(written.error,
             Contains("cannot write checkpoint shard '" + path + "'") && Contains("flat"));
  CHECK(dir.names().empty());
}

TEST_CASE("read_flat_range assembles any range from the shards that hold it") {
  TempDir dir;
  const std::vector<ShardLocation> shards = write_four_shards(dir);
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, 100}, {30, 70}, {36, 62},  {37, 61},
                                                          {40, 45}, {0, 37},  {99, 100}, {50, 50}};
  for (const StateKind kind : {StateKind::kParameter, StateKind::kAdamM, StateKind::kAdamV}) {
    for (const auto& [from, to] : spans) {
      INFO(state_kind_name(kind) << " [" << from << ", " << to << ")");
      std::vector<float> out(static_cast<size_t>(to - from));
      std::string error;
      CHECK(read_flat_range(shards, flat_layout(100), kind, from, to, out.data(), error));
      CHECK(error.empty());
      CHECK(out == expected_values(kind, from, to));
    }
  }
}

TEST_CASE("read_flat_range names the first index no shard holds") {
  TempDir dir;
  std::vector<ShardLocation> shards = write_four_shards(dir);
  std::vector<float> out(120);
  std::string error;
  // Past the end of the reader's own layout.
  CHECK_FALSE(
      read_flat_range(shards, flat_layout(100), StateKind::kParameter, 90, 120, out.data(), error));
  CHECK_THAT(error, Equals("cannot read [90, 120) from a checkpoint: not a range of the 100 "
                           "elements"));

  // Without the shard of [37, 61).
  std::erase_if(shards,
                [](const ShardLocation& shard) { return shard.begin == 37 && shard.end == 61; });
  error.clear();
  CHECK_FALSE(
      read_flat_range(shards, flat_layout(100), StateKind::kAdamM, 10, 80, out.data(), error));
  CHECK_THAT(error, Equals("no checkpoint shard holds element 37 of flat (its slice 0 of 1)"));
  // A range on either side of the gap still reads.
  CHECK(read_flat_range(shards, flat_layout(100), StateKind::kAdamM, 61, 100, out.data(), error));
  CHECK(std::vector<float>(out.begin(), out.begin() + 39) ==
        expected_values(StateKind::kAdamM, 61, 100));
  CHECK(read_flat_range(shards, flat_layout(100), StateKind::kAdamM, 0, 37, out.data(), error));
}

TEST_CASE("read_flat_range checks each shard holds what it is listed as holding") {
  TempDir dir;
  std::vector<ShardLocation> shards = write_four_shards(dir);
  for (ShardLocation& shard : shards) {
    if (shard.begin == 61) shard.begin = 60;
  }
  std::vector<float> out(100);
  std::string error;
  CHECK_FALSE(
      read_flat_range(shards, flat_layout(100), StateKind::kParameter, 0, 100, out.data(), error));
  CHECK_THAT(error, Contains("shard-3.bin' holds [61, 100), but the checkpoint lists it as "
                             "holding [60, 100)"));
}

// A valid shard of [0, 8) with step 40, as bytes to damage.
std::string good_shard_bytes(const TempDir& dir) {
  const std::string path = dir.file("good.bin");
  const ShardData data(0, 8);
  REQUIRE(write_shard(path, header_for(0, 1, 8, 0, 8), data.arrays()).ok());
  return testing::read_bytes(path);
}

std::string header_error(const TempDir& dir, const std::string& bytes) {
  const std::string path = dir.file("damaged.bin");
  testing::write_bytes(path, bytes);
  std::string error;
  CHECK_FALSE(read_shard_header(path, error));
  CHECK_THAT(error, Contains("'" + path + "' is not a valid checkpoint shard: "));
  return error;
}

TEST_CASE("A damaged shard is refused with what is wrong with it") {
  TempDir dir;
  const std::string good = good_shard_bytes(dir);
  const int64_t size = static_cast<int64_t>(good.size());

  SECTION("truncated") {
    CHECK_THAT(
        header_error(dir, good.substr(0, good.size() - 1)),
        Contains(fmt::format("implies {} bytes, but the file has {} (truncated)", size, size - 1)));
  }
  SECTION("one byte appended") {
    CHECK_THAT(
        header_error(dir, good + '\0'),
        Contains(fmt::format("implies {} bytes, but the file has {} (extended)", size, size + 1)));
  }
  SECTION("bad magic") {
    std::string bad = good;
    bad[3] = 'X';
    CHECK_THAT(header_error(dir, bad), Contains("does not start with the magic \"DSLSHRD1\""));
  }
  SECTION("another format version") {
    std::string bad = good;
    bad[8] = 3;
    CHECK_THAT(header_error(dir, bad), Contains("format version 3 is not supported"));
  }
  SECTION("a digit in the header flipped") {
    std::string bad = good;
    const size_t step = bad.find("\"step\":40");
    REQUIRE(step != std::string::npos);
    bad[step + 7] = '5';  // still valid JSON, and the size still matches
    CHECK_THAT(header_error(dir, bad), Contains("header's checksum is") && Contains("(damaged)"));
  }
  SECTION("the header's JSON broken") {
    std::string bad = good;
    bad[16] = '[';
    CHECK_THAT(header_error(dir, bad), Contains("its header is not valid JSON"));
  }
  SECTION("too short for the preamble") {
    CHECK_THAT(header_error(dir, good.substr(0, 10)), Contains("it has 10 bytes"));
  }
}

TEST_CASE("A write into a folder that does not exist fails and leaves nothing") {
  TempDir dir;
  const std::string path = dir.file("missing/shard.bin");
  const ShardData data(0, 4);
  const WrittenShard written = write_shard(path, header_for(0, 1, 4, 0, 4), data.arrays());
  CHECK_THAT(written.error,
             Equals("cannot write checkpoint shard '" + path + "': No such file or directory"));
  CHECK(dir.names().empty());
}

TEST_CASE("A failed write keeps the shard that was there and leaves no temporary file") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const ShardData before(0, 8);
  REQUIRE(write_shard(path, header_for(0, 1, 8, 0, 8), before.arrays()).ok());

  const ShardData large(0, 200'000);  // 2.4 MB: a 4 MiB block and a few writes
  core::FaultyFileSystem faulty;
  std::string reason;
  SECTION("the disk fills at the third write") {
    faulty.fail(core::FileCall::kWrite, 3, ENOSPC);
    reason = "No space left on device";
  }
  SECTION("a short write, then the disk is full") {
    faulty.short_write(2);
    faulty.fail(core::FileCall::kWrite, 3, ENOSPC);
    reason = "No space left on device";
  }
  SECTION("fsync fails") {
    faulty.fail(core::FileCall::kSync, 1, EIO);
    reason = "Input/output error";
  }
  SECTION("the rename fails") {
    faulty.fail(core::FileCall::kRename, 1, EIO);
    reason = "Input/output error";
  }
  const WrittenShard written =
      write_shard(path, header_for(0, 1, 200'000, 0, 200'000), large.arrays(), faulty);
  CHECK_THAT(written.error, Equals("cannot write checkpoint shard '" + path + "': " + reason));
  CHECK(dir.names() == std::vector<std::string>{"shard.bin"});
  std::string error;
  const std::optional<ShardHeader> header = read_shard_header(path, error);
  REQUIRE(header);
  CHECK(header->end == 8);
}

// Each of data's arrays as a reader, counting its calls.
std::vector<ShardArrayData> streamed(const std::vector<ShardArrayData>& arrays, int* calls) {
  std::vector<ShardArrayData> readers;
  for (const ShardArrayData& array : arrays) {
    readers.push_back(ShardArrayData::streamed(
        array.info, [array, calls](int64_t from, int64_t count, void* out) {
          ++*calls;
          std::memcpy(out, static_cast<const float*>(array.data) + from,
                      static_cast<size_t>(count) * sizeof(float));
          return std::string();
        }));
  }
  return readers;
}

TEST_CASE("Streamed arrays write the same shard as arrays in memory, a piece at a time") {
  TempDir dir;
  // 3M floats an array: 12 MB, two 8 MiB pieces each.
  const ShardHeader header = header_for(1, 2, 6'000'000, 3'000'000, 6'000'000);
  const ShardData data(3'000'000, 6'000'000);
  const WrittenShard in_memory = write_shard(dir.file("memory.bin"), header, data.arrays());
  REQUIRE(in_memory.ok());
  int calls = 0;
  // Memory and reader arrays mixed.
  std::vector<ShardArrayData> arrays = streamed(data.arrays(), &calls);
  arrays[1] = data.arrays()[1];
  const WrittenShard from_readers = write_shard(dir.file("streamed.bin"), header, arrays);
  INFO(from_readers.error);
  REQUIRE(from_readers.ok());
  CHECK(calls == 4);
  CHECK(from_readers.xxh64 == in_memory.xxh64);
  CHECK(testing::read_bytes(dir.file("streamed.bin")) ==
        testing::read_bytes(dir.file("memory.bin")));
}

TEST_CASE("A reader that fails fails the write, naming what failed, and leaves nothing") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const ShardData before(0, 8);
  REQUIRE(write_shard(path, header_for(0, 1, 8, 0, 8), before.arrays()).ok());
  const ShardData data(0, 3'000'000);
  int calls = 0;
  std::vector<ShardArrayData> arrays = streamed(data.arrays(), &calls);
  arrays[2] = ShardArrayData::streamed(arrays[2].info, [](int64_t from, int64_t, void*) {
    return from == 0 ? std::string() : "the swap file: Input/output error";
  });
  const WrittenShard written = write_shard(path, header_for(0, 1, 3'000'000, 0, 3'000'000), arrays);
  CHECK_THAT(written.error, Equals("cannot write checkpoint shard '" + path +
                                   "': the swap file: Input/output error"));
  CHECK(dir.names() == std::vector<std::string>{"shard.bin"});
  std::string error;
  const std::optional<ShardHeader> header = read_shard_header(path, error);
  REQUIRE(header);
  CHECK(header->end == 8);
}

TEST_CASE("Short writes are finished: the shard is whole") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const ShardData data(0, 1000);
  core::FaultyFileSystem faulty;
  for (int nth = 1; nth <= 4; ++nth) faulty.short_write(nth);
  const WrittenShard written = write_shard(path, header_for(0, 1, 1000, 0, 1000), data.arrays(),
                                           faulty);
  INFO(written.error);
  REQUIRE(written.ok());
  std::string error;
  CHECK(file_xxh64(path, error) == written.xxh64);
  const std::optional<ShardHeader> header = read_shard_header(path, error);
  INFO(error);
  REQUIRE(header);
  CHECK(read_range(path, *header, StateKind::kAdamV, 0, 1000) ==
        expected_values(StateKind::kAdamV, 0, 1000));
}

TEST_CASE("A shard is private to its owner, and is not written through a planted link") {
  TempDir dir;
  const std::string path = dir.file("rank_0.bin");
  const std::string victim = dir.file("victim");
  testing::write_bytes(victim, "keep me");
  const ShardData data(0, 4);
  SECTION("a link left at the temporary name is removed, not followed") {
    std::filesystem::create_symlink(victim, path + ".tmp");
    REQUIRE(write_shard(path, header_for(0, 1, 4, 0, 4), data.arrays()).ok());
    CHECK(testing::read_bytes(path).substr(0, 8) == "DSLSHRD1");
    struct stat info {};
    REQUIRE(::stat(path.c_str(), &info) == 0);
    CHECK((info.st_mode & 07777) == 0600);
  }
  SECTION("a link planted just before the temporary file is created fails the write") {
    core::FaultyFileSystem faulty;
    faulty.plant_link(1, victim);
    const WrittenShard written =
        write_shard(path, header_for(0, 1, 4, 0, 4), data.arrays(), faulty);
    CHECK_THAT(written.error, Equals("cannot write checkpoint shard '" + path + "': File exists"));
    CHECK_FALSE(std::filesystem::exists(path));
  }
  CHECK(testing::read_bytes(victim) == "keep me");
}

TEST_CASE("A power cut before a shard is durable leaves no shard that reads as valid") {
  TempDir dir;
  const std::string path = dir.file("rank_0.bin");
  const ShardData data(0, 1000);
  core::FaultyFileSystem faulty;
  SECTION("before the file's fsync") { faulty.crash_before(core::FileCall::kSync, 1); }
  SECTION("before the folder's fsync") { faulty.crash_before(core::FileCall::kSyncFolder, 1); }
  const WrittenShard written =
      write_shard(path, header_for(0, 1, 1000, 0, 1000), data.arrays(), faulty);
  CHECK_FALSE(written.ok());
  faulty.power_cut();
  // Neither the shard nor its temporary file is there to be taken for one.
  CHECK(dir.names().empty());
  std::string error;
  CHECK_FALSE(read_shard_header(path, error));
}

TEST_CASE("A shard whose folder was synced survives a power cut whole") {
  TempDir dir;
  const std::string path = dir.file("rank_0.bin");
  const ShardData data(0, 1000);
  core::FaultyFileSystem faulty;
  const WrittenShard written =
      write_shard(path, header_for(0, 1, 1000, 0, 1000), data.arrays(), faulty);
  REQUIRE(written.ok());
  faulty.power_cut();
  std::string error;
  CHECK(file_xxh64(path, error) == written.xxh64);
  CHECK(read_shard_header(path, error));
}

TEST_CASE("Each state kind has a name that reads back as it") {
  CHECK(state_kind_name(StateKind::kParameter) == "param");
  CHECK(state_kind_name(StateKind::kMaster) == "master");
  CHECK(state_kind_name(StateKind::kAdamM) == "adam_m");
  CHECK(state_kind_name(StateKind::kAdamV) == "adam_v");
  for (const StateKind kind : {StateKind::kParameter, StateKind::kMaster, StateKind::kAdamM,
                               StateKind::kAdamV, StateKind::kErrorFeedback}) {
    INFO(state_kind_name(kind));
    CHECK(state_kind_from_name(state_kind_name(kind)) == kind);
  }
  CHECK_FALSE(state_kind_from_name("params"));
  CHECK_FALSE(state_kind_from_name(""));
}

TEST_CASE("A shard holds the states it is given, and reading one it does not hold names it") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  const std::vector<float> master = expected_values(StateKind::kMaster, 20, 50);
  const std::vector<float> feedback = expected_values(StateKind::kErrorFeedback, 20, 50);
  const WrittenShard written =
      write_shard(path, header_for(0, 1, 50, 20, 50),
                  {{{StateKind::kMaster, DType::kF32}, master.data()},
                   {{StateKind::kErrorFeedback, DType::kF32}, feedback.data()}});
  INFO(written.error);
  REQUIRE(written.ok());
  std::string error;
  const std::optional<ShardHeader> header = read_shard_header(path, error);
  REQUIRE(header);
  REQUIRE(header->arrays.size() == 2);
  CHECK(header->arrays[0].kind == StateKind::kMaster);
  CHECK(header->arrays[1].kind == StateKind::kErrorFeedback);
  CHECK(read_range(path, *header, StateKind::kMaster, 20, 50) == master);
  CHECK(read_range(path, *header, StateKind::kErrorFeedback, 25, 30) ==
        expected_values(StateKind::kErrorFeedback, 25, 30));

  std::vector<float> out(30);
  for (const StateKind missing : {StateKind::kParameter, StateKind::kAdamV}) {
    INFO(state_kind_name(missing));
    error.clear();
    CHECK_FALSE(
        read_flat_range({{path, 20, 50}}, flat_layout(50), missing, 20, 50, out.data(), error));
    CHECK_THAT(error, Contains(std::string(state_kind_name(missing))));
  }
}

TEST_CASE("A state held in another element type is not read as float32") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  // bf16 1.0 is 0x3f80.
  const std::vector<uint16_t> bf16_ones(40, 0x3f80);
  const WrittenShard written =
      write_shard(path, header_for(0, 1, 40, 0, 40),
                  {{{StateKind::kParameter, DType::kBF16}, bf16_ones.data()}});
  INFO(written.error);
  REQUIRE(written.ok());
  std::string error;
  const std::optional<ShardHeader> header = read_shard_header(path, error);
  REQUIRE(header);
  REQUIRE(header->arrays.size() == 1);
  CHECK(header->arrays[0].dtype == DType::kBF16);
  // The array is 80 bytes, the last thing in the file.
  const std::string bytes = testing::read_bytes(path);
  CHECK((bytes.size() - 80) % 64 == 0);
  CHECK(std::memcmp(bytes.data() + bytes.size() - 80, bf16_ones.data(), 80) == 0);

  std::vector<float> out(40);
  CHECK_FALSE(read_flat_range({{path, 0, 40}}, flat_layout(40), StateKind::kParameter, 0, 40,
                              out.data(), error));
  CHECK_THAT(error, Contains("bf16"));
}

// A small GPT-2 whose tensors split across two tensor ranks and whose two
// blocks split across two pipeline stages.
Gpt2Config small_model() {
  Gpt2Config config;
  config.num_layers = 2;
  config.channels = 8;
  config.num_heads = 4;
  config.vocab_size = 30;
  config.padded_vocab_size = 32;
  config.max_seq_len = 6;
  return config;
}

ParameterTable tensor_rank_table(int tensor_rank) {
  return ParameterTable(small_model(), ModelShard{.tensor_rank = tensor_rank, .tensor_size = 2});
}

ParameterTable stage_table(int stage, int tensor_rank = 0, int tensor_size = 1) {
  return ParameterTable(small_model(),
                        ModelShard{.tensor_rank = tensor_rank,
                                   .tensor_size = tensor_size,
                                   .stage = stage,
                                   .stages = 2,
                                   .chunks = {uniform_stage_layers(small_model().num_layers, 2, stage)}});
}

// `kind`'s values over `table`'s flat buffer: each element's is value_at of
// its index in the whole model's flat buffer, so that a value says which
// element of which tensor it is, on any layout.
std::vector<float> values_on(const ParameterTable& table, StateKind kind) {
  const ParameterTable whole(table.config());
  const std::vector<float> global = expected_values(kind, 0, whole.total());
  std::vector<float> local(static_cast<size_t>(table.total()));
  for (const TensorInfo& tensor : table.tensors()) {
    copy_out_of_global(tensor, global.data() + whole.at(tensor.name).offset,
                       local.data() + tensor.offset, sizeof(float));
  }
  return local;
}

constexpr StateKind kSavedKinds[] = {StateKind::kParameter, StateKind::kAdamM, StateKind::kAdamV};

// The shard of data-parallel rank `rank` of `ranks` of a rank laid out as
// `table`, holding [begin, end) of its parameters and Adam's moments.
ShardLocation write_table_shard(const TempDir& dir, const std::string& name,
                                const ParameterTable& table, int rank, int ranks, int64_t begin,
                                int64_t end) {
  std::vector<std::vector<float>> values;
  std::vector<ShardArrayData> arrays;
  for (const StateKind kind : kSavedKinds) values.push_back(values_on(table, kind));
  for (size_t k = 0; k < values.size(); ++k) {
    arrays.push_back({{kSavedKinds[k], DType::kF32}, values[k].data() + begin});
  }
  const ShardHeader header{.step = 40,
                           .rank = rank,
                           .ranks = ranks,
                           .total_parameters = table.total(),
                           .begin = begin,
                           .end = end,
                           .optimizer_step = 39,
                           .loss_scaler = std::nullopt,
                           .layout = layout_of(table),
                           .arrays = {},
                           .rank_state = std::nullopt};
  const std::string path = dir.file(name);
  const WrittenShard written = write_shard(path, header, arrays);
  INFO(written.error);
  REQUIRE(written.ok());
  return {path, begin, end};
}

// `table`'s flat buffer split evenly (a ZeRO partition: the cut falls
// inside a tensor) over two data-parallel ranks, as `name`-<rank>.bin.
std::vector<ShardLocation> write_halves(const TempDir& dir, const std::string& name,
                                        const ParameterTable& table) {
  const int64_t half = table.total() / 2 + 3;
  return {write_table_shard(dir, name + "-0.bin", table, 0, 2, 0, half),
          write_table_shard(dir, name + "-1.bin", table, 1, 2, half, table.total())};
}

// `kind`'s elements [from, to) of `reader`'s layout; fails the test on error.
std::vector<float> read_layout(const std::vector<ShardLocation>& shards,
                               const ParameterTable& reader, StateKind kind, int64_t from,
                               int64_t to) {
  std::vector<float> out(static_cast<size_t>(to - from), -1.0f);
  std::string error;
  const bool read = read_flat_range(shards, layout_of(reader), kind, from, to, out.data(), error);
  INFO(error);
  REQUIRE(read);
  return out;
}

std::vector<float> slice(const std::vector<float>& values, int64_t from, int64_t to) {
  return std::vector<float>(values.begin() + from, values.begin() + to);
}

TEST_CASE("layout_of records each tensor of a table: name, global shape, slice and place") {
  const ParameterTable table = tensor_rank_table(1);
  const std::vector<LayoutTensor> layout = layout_of(table);
  REQUIRE(layout.size() == table.tensors().size());
  int64_t next = 0;
  for (size_t t = 0; t < layout.size(); ++t) {
    const TensorInfo& tensor = table.tensors()[t];
    INFO(tensor.name);
    CHECK(layout[t].name == tensor.name);
    CHECK(layout[t].global_shape == tensor.global_shape);
    CHECK(layout[t].split.view == tensor.split.view);
    CHECK(layout[t].split.dim == tensor.split.dim);
    CHECK(layout[t].split.index == tensor.split.index);
    CHECK(layout[t].split.parts == tensor.split.parts);
    CHECK(layout[t].offset == next);
    CHECK(layout[t].numel == tensor.numel);
    next += tensor.numel;
  }
  CHECK(next == table.total());
  // The fused QKV weight is cut by heads within each of q, k and v.
  const TensorInfo& qkv_info = table.at("transformer.h.0.attn.c_attn.weight");
  const auto qkv_place = std::find_if(
      layout.begin(), layout.end(), [&](const LayoutTensor& t) { return t.name == qkv_info.name; });
  REQUIRE(qkv_place != layout.end());
  const LayoutTensor& qkv = *qkv_place;
  CHECK(qkv.global_shape == std::vector<int64_t>{8, 24});
  CHECK(qkv.offset == qkv_info.offset);
  CHECK(qkv.split.view == std::vector<int64_t>{8, 3, 8});
  CHECK(qkv.split.dim == 2);
  CHECK(qkv.split.index == 1);
  CHECK(qkv.split.parts == 2);
}

TEST_CASE("A format-2 shard's layout is in its header") {
  TempDir dir;
  const ParameterTable table = tensor_rank_table(1);
  const ShardLocation shard = write_table_shard(dir, "tp1.bin", table, 0, 1, 0, table.total());
  std::string error;
  const std::optional<ShardHeader> header = read_shard_header(shard.path, error);
  INFO(error);
  REQUIRE(header);
  const std::vector<LayoutTensor> expected = layout_of(table);
  REQUIRE(header->layout.size() == expected.size());
  for (size_t t = 0; t < expected.size(); ++t) {
    INFO(expected[t].name);
    CHECK(header->layout[t].name == expected[t].name);
    CHECK(header->layout[t].global_shape == expected[t].global_shape);
    CHECK(header->layout[t].split.view == expected[t].split.view);
    CHECK(header->layout[t].split.dim == expected[t].split.dim);
    CHECK(header->layout[t].split.index == expected[t].split.index);
    CHECK(header->layout[t].split.parts == expected[t].split.parts);
    CHECK(header->layout[t].offset == expected[t].offset);
    CHECK(header->layout[t].numel == expected[t].numel);
  }
}

TEST_CASE("Shards of two tensor ranks read back as the whole model") {
  TempDir dir;
  const ParameterTable whole(small_model());
  const ParameterTable rank_0 = tensor_rank_table(0);
  const ParameterTable rank_1 = tensor_rank_table(1);
  REQUIRE(rank_0.total() < whole.total());
  const std::vector<ShardLocation> shards = {
      write_table_shard(dir, "tp0.bin", rank_0, 0, 1, 0, rank_0.total()),
      write_table_shard(dir, "tp1.bin", rank_1, 0, 1, 0, rank_1.total())};
  for (const StateKind kind : kSavedKinds) {
    INFO(state_kind_name(kind));
    CHECK(read_layout(shards, whole, kind, 0, whole.total()) ==
          expected_values(kind, 0, whole.total()));
    // A range that starts and ends inside tensors.
    CHECK(read_layout(shards, whole, kind, 101, whole.total() - 37) ==
          expected_values(kind, 101, whole.total() - 37));
  }

  // One tensor rank's shard alone lacks the other's half of every split tensor.
  std::vector<float> out(static_cast<size_t>(whole.total()));
  std::string error;
  CHECK_FALSE(read_flat_range({shards[0]}, layout_of(whole), StateKind::kParameter, 0,
                              whole.total(), out.data(), error));
  CHECK_THAT(error, Equals("no checkpoint shard holds element 128 of transformer.wte.weight "
                           "(its slice 0 of 1)"));
  // The token embedding's first rows are rank 0's: they read from its shard alone.
  const int64_t rank_0_rows = 16 * 8;
  CHECK(read_layout({shards[0]}, whole, StateKind::kParameter, 0, rank_0_rows) ==
        expected_values(StateKind::kParameter, 0, rank_0_rows));
}

TEST_CASE("Whole-model shards read back as each tensor rank's slice") {
  TempDir dir;
  const ParameterTable whole(small_model());
  const std::vector<ShardLocation> shards = write_halves(dir, "whole", whole);
  for (const int tensor_rank : {0, 1}) {
    const ParameterTable table = tensor_rank_table(tensor_rank);
    for (const StateKind kind : kSavedKinds) {
      INFO("tensor rank " << tensor_rank << ", " << state_kind_name(kind));
      const std::vector<float> expected = values_on(table, kind);
      CHECK(read_layout(shards, table, kind, 0, table.total()) == expected);
      CHECK(read_layout(shards, table, kind, 77, table.total() - 5) ==
            slice(expected, 77, table.total() - 5));
    }
  }
}

TEST_CASE("Shards of two pipeline stages read back as the whole model, and the reverse") {
  TempDir dir;
  const ParameterTable whole(small_model());
  const ParameterTable first = stage_table(0);
  const ParameterTable last = stage_table(1);
  // The last stage holds its own copy of the tied token embedding.
  REQUIRE(last.find("transformer.wte.weight") != nullptr);
  REQUIRE(last.find("transformer.h.0.ln_1.weight") == nullptr);
  const std::vector<ShardLocation> stage_shards = {
      write_table_shard(dir, "stage0.bin", first, 0, 1, 0, first.total()),
      write_table_shard(dir, "stage1.bin", last, 0, 1, 0, last.total())};
  const std::vector<ShardLocation> whole_shards = write_halves(dir, "whole", whole);
  for (const StateKind kind : kSavedKinds) {
    INFO(state_kind_name(kind));
    CHECK(read_layout(stage_shards, whole, kind, 0, whole.total()) ==
          expected_values(kind, 0, whole.total()));
    for (const ParameterTable* stage : {&first, &last}) {
      CHECK(read_layout(whole_shards, *stage, kind, 0, stage->total()) == values_on(*stage, kind));
    }
  }
  // The last stage alone lacks the first block.
  std::vector<float> out(static_cast<size_t>(whole.total()));
  std::string error;
  CHECK_FALSE(read_flat_range({stage_shards[1]}, layout_of(whole), StateKind::kAdamM, 0,
                              whole.total(), out.data(), error));
  CHECK_THAT(error, Equals("no checkpoint shard holds element 0 of transformer.wpe.weight "
                           "(its slice 0 of 1)"));
}

TEST_CASE("Shards of tensor ranks, pipeline stages and ZeRO halves reshard to any other layout") {
  TempDir dir;
  const ParameterTable whole(small_model());
  // 2 stages x 2 tensor ranks x 2 data-parallel ranks: eight shards.
  std::vector<ShardLocation> shards;
  std::vector<ParameterTable> tables;
  for (const int stage : {0, 1}) {
    for (const int tensor_rank : {0, 1}) {
      tables.push_back(stage_table(stage, tensor_rank, 2));
      const std::vector<ShardLocation> halves =
          write_halves(dir, fmt::format("pp{}-tp{}", stage, tensor_rank), tables.back());
      shards.insert(shards.end(), halves.begin(), halves.end());
    }
  }
  std::reverse(shards.begin(), shards.end());
  for (const StateKind kind : kSavedKinds) {
    INFO(state_kind_name(kind));
    CHECK(read_layout(shards, whole, kind, 0, whole.total()) ==
          expected_values(kind, 0, whole.total()));
    for (const int tensor_rank : {0, 1}) {
      const ParameterTable table = tensor_rank_table(tensor_rank);
      CHECK(read_layout(shards, table, kind, 0, table.total()) == values_on(table, kind));
    }
    for (const ParameterTable& table : tables) {
      CHECK(read_layout(shards, table, kind, 0, table.total()) == values_on(table, kind));
    }
  }
}

TEST_CASE("Shards of another model's shape are not read as this one's") {
  TempDir dir;
  const std::vector<ShardLocation> shards =
      write_halves(dir, "whole", ParameterTable(small_model()));
  std::string error;
  SECTION("wider: every tensor's shape differs") {
    Gpt2Config wider = small_model();
    wider.channels = 16;
    const ParameterTable reader(wider);
    std::vector<float> out(static_cast<size_t>(reader.total()));
    CHECK_FALSE(read_flat_range(shards, layout_of(reader), StateKind::kParameter, 0, reader.total(),
                                out.data(), error));
    CHECK_THAT(error, Contains("holds transformer.wte.weight with shape [32, 8], but this "
                               "model's is [32, 16]"));
  }
  SECTION("deeper: a block no shard holds") {
    Gpt2Config deeper = small_model();
    deeper.num_layers = 3;
    const ParameterTable reader(deeper);
    std::vector<float> out(static_cast<size_t>(reader.total()));
    CHECK_FALSE(read_flat_range(shards, layout_of(reader), StateKind::kParameter, 0, reader.total(),
                                out.data(), error));
    CHECK_THAT(error, Equals("no checkpoint shard holds element 0 of "
                             "transformer.h.2.ln_1.weight (its slice 0 of 1)"));
    // The blocks both models have still read.
    const TensorInfo& block_1 = reader.at("transformer.h.1.mlp.c_proj.bias");
    CHECK(read_layout(shards, reader, StateKind::kAdamM, 0, block_1.offset + block_1.numel) ==
          expected_values(StateKind::kAdamM, 0, block_1.offset + block_1.numel));
  }
}

// A format-1 shard, as dslaunch wrote them before layouts: its arrays are
// param, adam_m and adam_v over [begin, end) of the whole model's flat
// layout, filled with value_at.
std::string format_1_shard_bytes(int rank, int ranks, int64_t total, int64_t begin, int64_t end) {
  nlohmann::json fields = {
      {"step", 40},     {"rank", rank}, {"ranks", ranks},      {"total_parameters", total},
      {"begin", begin}, {"end", end},   {"optimizer_step", 39}};
  const std::string unchecked = fields.dump();
  fields["header_xxh64"] = xxh64_hex(XXH64(unchecked.data(), unchecked.size(), 0));
  const std::string text = fields.dump();
  const uint32_t version = 1;
  const auto length = static_cast<uint32_t>(text.size());
  std::string bytes(kShardMagic, sizeof kShardMagic);
  bytes.append(reinterpret_cast<const char*>(&version), sizeof version);
  bytes.append(reinterpret_cast<const char*>(&length), sizeof length);
  bytes += text;
  bytes.resize((bytes.size() + 63) / 64 * 64, '\0');
  const ShardData data(begin, end);
  for (const std::vector<float>* array : {&data.params, &data.adam_m, &data.adam_v}) {
    bytes.append(reinterpret_cast<const char*>(array->data()), array->size() * sizeof(float));
  }
  return bytes;
}

TEST_CASE("A format-1 shard is read as the whole model, and only by a whole layout") {
  TempDir dir;
  const ParameterTable whole(small_model());
  const int64_t half = whole.total() / 2 + 3;
  std::vector<ShardLocation> shards = {{dir.file("rank_0.bin"), 0, half},
                                       {dir.file("rank_1.bin"), half, whole.total()}};
  testing::write_bytes(shards[0].path, format_1_shard_bytes(0, 2, whole.total(), 0, half));
  testing::write_bytes(shards[1].path,
                       format_1_shard_bytes(1, 2, whole.total(), half, whole.total()));

  std::string error;
  const std::optional<ShardHeader> header = read_shard_header(shards[1].path, error);
  INFO(error);
  REQUIRE(header);
  CHECK(header->format_version == 1);
  CHECK(header->step == 40);
  CHECK(header->rank == 1);
  CHECK(header->ranks == 2);
  CHECK(header->total_parameters == whole.total());
  CHECK(header->begin == half);
  CHECK(header->end == whole.total());
  CHECK(header->optimizer_step == 39);
  CHECK(header->layout.empty());
  REQUIRE(header->arrays.size() == 3);
  CHECK(header->arrays[0].kind == StateKind::kParameter);
  CHECK(header->arrays[1].kind == StateKind::kAdamM);
  CHECK(header->arrays[2].kind == StateKind::kAdamV);
  for (const ShardArrayInfo& array : header->arrays) CHECK(array.dtype == DType::kF32);

  for (const StateKind kind : kSavedKinds) {
    INFO(state_kind_name(kind));
    CHECK(read_layout(shards, whole, kind, 0, whole.total()) ==
          expected_values(kind, 0, whole.total()));
    CHECK(read_layout(shards, whole, kind, half - 10, half + 10) ==
          expected_values(kind, half - 10, half + 10));
  }
  // A flat layout of the same size holds every tensor whole too.
  std::vector<float> out(static_cast<size_t>(whole.total()));
  CHECK(read_flat_range(shards, flat_layout(whole.total()), StateKind::kAdamV, 0, whole.total(),
                        out.data(), error));
  CHECK(out == expected_values(StateKind::kAdamV, 0, whole.total()));

  SECTION("a tensor rank's layout cannot read it") {
    const ParameterTable table = tensor_rank_table(0);
    error.clear();
    CHECK_FALSE(read_flat_range(shards, layout_of(table), StateKind::kParameter, 0, table.total(),
                                out.data(), error));
    CHECK_THAT(error, Contains("rank_0.bin' is in format 1") &&
                          Contains("it resumes only on a layout that holds the whole model"));
  }
  SECTION("nor another model's") {
    Gpt2Config smaller = small_model();
    smaller.num_layers = 1;
    const ParameterTable table(smaller);
    error.clear();
    CHECK_FALSE(read_flat_range(shards, layout_of(table), StateKind::kParameter, 0, table.total(),
                                out.data(), error));
    CHECK_THAT(error, Contains("is in format 1"));
  }
  SECTION("it holds no master weights") {
    error.clear();
    CHECK_FALSE(read_flat_range(shards, layout_of(whole), StateKind::kMaster, 0, whole.total(),
                                out.data(), error));
    CHECK_THAT(error, Contains("master"));
  }
}

// A rank state as a 1-bit Adam rank keeps one: two error-feedback buffers of
// odd lengths (f32 and f64), one empty, and scalars whose decimal forms do
// not round-trip by accident.
struct RankStateData {
  std::vector<float> worker_error = std::vector<float>(37);
  std::vector<double> server_error = std::vector<double>(13);
  RankState state{.data_rank = 1,
                  .data_ranks = 3,
                  .tensor_rank = 1,
                  .tensor_ranks = 2,
                  .stage = 2,
                  .stages = 4,
                  .scalars = {{"lr", 0.1},
                              {"tiny", 1e-300},
                              {"denormal", std::numeric_limits<double>::denorm_min()},
                              {"minus", -2.5},
                              {"minus_zero", -0.0},
                              {"big_int", 9007199254740992.0},  // 2^53
                              {"huge", 1e300},
                              {"third", 1.0 / 3},
                              {"step", 123456789}},
                  .arrays = {{"worker_error", DType::kF32, 37},
                             {"server_error", DType::kF64, 13},
                             {"empty", DType::kF32, 0}}};
  RankStateData() {
    for (size_t i = 0; i < worker_error.size(); ++i) worker_error[i] = 0.1f * i - 1.7f;
    for (size_t i = 0; i < server_error.size(); ++i) server_error[i] = 1.0 / (i + 3) - 1e-12;
    worker_error[0] = std::bit_cast<float>(0x7fc01234u);  // a NaN with a payload
    worker_error[1] = -0.0f;
    server_error[12] = std::numeric_limits<double>::denorm_min();
  }
  std::vector<const void*> pointers() const {
    return {worker_error.data(), server_error.data(), nullptr};
  }
};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST_CASE("A rank's own state reads back bit for bit: scalars in the header, arrays at the end") {
  TempDir dir;
  const std::string path = dir.file("shard-1.bin");
  ShardHeader header = header_for(1, 3, 1000, 300, 550);
  const RankStateData rank;
  header.rank_state = rank.state;
  const ShardData data(300, 550);
  const WrittenShard written = write_shard(path, header, data.arrays(), rank.pointers());
  INFO(written.error);
  REQUIRE(written.ok());
  std::string error;
  CHECK(file_xxh64(path, error) == written.xxh64);
  const std::string bytes = testing::read_bytes(path);
  CHECK(written.size_bytes == static_cast<int64_t>(bytes.size()));
  // From the end: the empty array (at the end, after padding), the 104
  // bytes of server_error padded to 128, worker_error's 148 padded to 192,
  // and adam_v's 1000 padded to 1024 before them.
  const int64_t size = written.size_bytes;
  CHECK(size % 64 == 0);
  CHECK(std::memcmp(bytes.data() + size - 128, rank.server_error.data(), 104) == 0);
  CHECK(std::memcmp(bytes.data() + size - 320, rank.worker_error.data(), 148) == 0);
  CHECK(std::memcmp(bytes.data() + size - 1344, data.adam_v.data(), 1000) == 0);
  CHECK(bytes.substr(size - 24, 24) == std::string(24, '\0'));

  const std::optional<ShardHeader> read = read_shard_header(path, error);
  INFO(error);
  REQUIRE(read);
  REQUIRE(read->rank_state);
  const RankState& state = *read->rank_state;
  CHECK(state.data_rank == 1);
  CHECK(state.data_ranks == 3);
  CHECK(state.tensor_rank == 1);
  CHECK(state.tensor_ranks == 2);
  CHECK(state.stage == 2);
  CHECK(state.stages == 4);
  REQUIRE(state.scalars.size() == rank.state.scalars.size());
  for (const auto& [name, value] : rank.state.scalars) {
    INFO(name);
    REQUIRE(state.scalars.count(name) == 1);
    CHECK(std::bit_cast<uint64_t>(state.scalars.at(name)) == std::bit_cast<uint64_t>(value));
  }
  REQUIRE(state.arrays.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(state.arrays[i].name == rank.state.arrays[i].name);
    CHECK(state.arrays[i].dtype == rank.state.arrays[i].dtype);
    CHECK(state.arrays[i].count == rank.state.arrays[i].count);
  }

  std::vector<float> worker_error(37, 9.0f);
  std::vector<double> server_error(13, 9.0);
  std::vector<float> empty;
  CHECK(read_rank_state_array(path, *read, "worker_error", worker_error.data(), error));
  CHECK(read_rank_state_array(path, *read, "server_error", server_error.data(), error));
  CHECK(read_rank_state_array(path, *read, "empty", empty.data(), error));
  CHECK(same_bits(worker_error, rank.worker_error));
  CHECK(same_bits(server_error, rank.server_error));
  // The layout's arrays are where they were.
  CHECK(same_bits(read_range(path, *read, StateKind::kParameter, 300, 550), data.params));
  CHECK(same_bits(read_range(path, *read, StateKind::kAdamV, 300, 550), data.adam_v));

  SECTION("an array it does not hold is named") {
    CHECK_FALSE(read_rank_state_array(path, *read, "momentum", worker_error.data(), error));
    CHECK_THAT(error, Equals("cannot read rank-state array momentum of checkpoint shard '" + path +
                             "': its rank_state has no such array (it has [worker_error, "
                             "server_error, empty])"));
  }
  SECTION("a file cut since its header was read is not read") {
    testing::write_bytes(path, bytes.substr(0, bytes.size() - 64));
    CHECK_FALSE(read_rank_state_array(path, *read, "worker_error", worker_error.data(), error));
    CHECK_THAT(error, Contains("shard-1.bin'") &&
                          Contains(fmt::format("the file has {} bytes, not the {} its header "
                                               "implies",
                                               size - 64, size)));
  }
}

TEST_CASE("A rank state with no arrays, or only empty ones, still reads") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  ShardHeader header = header_for(0, 1, 10, 0, 10);
  header.rank_state.emplace();
  header.rank_state->scalars = {{"count", 7}};
  const ShardData data(0, 10);
  // The overload without rank arrays takes a rank state that lists none.
  REQUIRE(write_shard(path, header, data.arrays()).ok());
  std::string error;
  std::optional<ShardHeader> read = read_shard_header(path, error);
  INFO(error);
  REQUIRE(read);
  REQUIRE(read->rank_state);
  CHECK(read->rank_state->scalars == std::map<std::string, double>{{"count", 7}});
  CHECK(read->rank_state->arrays.empty());
  CHECK(read->rank_state->data_ranks == 1);

  header.rank_state->arrays = {{"a", DType::kF64, 0}, {"b", DType::kF32, 0}};
  REQUIRE(write_shard(path, header, data.arrays(), {nullptr, nullptr}).ok());
  read = read_shard_header(path, error);
  REQUIRE(read);
  REQUIRE(read->rank_state);
  CHECK(read->rank_state->arrays.size() == 2);
  CHECK(read_rank_state_array(path, *read, "b", nullptr, error));
}

TEST_CASE("A shard without rank state is byte for byte what it was before rank state existed") {
  TempDir dir;
  ShardHeader header = header_for(1, 3, 1000, 300, 550);
  header.loss_scaler = LossScalerState{.scale = 0.25,
                                       .iteration = 41,
                                       .last_overflow_iteration = 37,
                                       .hysteresis_left = 1,
                                       .skipped_steps = 5};
  const ShardData data(300, 550);
  const std::string old_call = dir.file("old.bin");
  const std::string new_call = dir.file("new.bin");
  const WrittenShard written = write_shard(old_call, header, data.arrays());
  REQUIRE(written.ok());
  REQUIRE(write_shard(new_call, header, data.arrays(), {}).ok());
  CHECK(testing::read_bytes(old_call) == testing::read_bytes(new_call));
  // This shard's size and hash as written by the build before rank state.
  CHECK(written.size_bytes == 3560);
  CHECK(written.xxh64 == "d773fa775c827714");
  CHECK(testing::read_bytes(old_call).find("rank_state") == std::string::npos);

  std::string error;
  const std::optional<ShardHeader> read = read_shard_header(old_call, error);
  INFO(error);
  REQUIRE(read);
  CHECK_FALSE(read->rank_state);
  float out = 0;
  CHECK_FALSE(read_rank_state_array(old_call, *read, "worker_error", &out, error));
  CHECK_THAT(error, Equals("cannot read rank-state array worker_error of checkpoint shard '" +
                           old_call + "': its header has no rank_state"));
}

TEST_CASE("A rank state that is not consistent is not written") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  ShardHeader header = header_for(1, 3, 1000, 300, 550);
  RankStateData rank;
  header.rank_state = rank.state;
  std::vector<const void*> pointers = rank.pointers();
  const ShardData data(300, 550);
  std::string problem;
  SECTION("a data rank outside its group") {
    header.rank_state->data_rank = 3;
    problem = "rank_state's data_rank 3 of 3 is not 0 <= rank < ranks";
  }
  SECTION("a negative stage") {
    header.rank_state->stage = -1;
    problem = "rank_state's stage -1 of 4 is not 0 <= rank < ranks";
  }
  SECTION("no tensor ranks") {
    header.rank_state->tensor_ranks = 0;
    problem = "rank_state's tensor_rank 1 of 0 is not 0 <= rank < ranks";
  }
  SECTION("an array named twice") {
    header.rank_state->arrays[2].name = "worker_error";
    problem = "rank_state names array worker_error twice";
  }
  SECTION("an array with no name") {
    header.rank_state->arrays[1].name = "";
    problem = "rank_state's array \"\" is not named with [a-z0-9_]+";
  }
  SECTION("a scalar named with capitals") {
    header.rank_state->scalars["Beta"] = 0.9;
    problem = "rank_state's scalar \"Beta\" is not named with [a-z0-9_]+";
  }
  SECTION("a NaN scalar") {
    header.rank_state->scalars["lr"] = std::numeric_limits<double>::quiet_NaN();
    problem = "rank_state's scalar lr is nan, not a finite number";
  }
  SECTION("an infinite scalar") {
    header.rank_state->scalars["lr"] = -std::numeric_limits<double>::infinity();
    problem = "rank_state's scalar lr is -inf, not a finite number";
  }
  SECTION("an array of bf16") {
    header.rank_state->arrays[0].dtype = DType::kBF16;
    problem = "rank_state's array worker_error is bf16 (fp32 or fp64 only)";
  }
  SECTION("a negative count") {
    header.rank_state->arrays[2].count = -1;
    problem = "rank_state's array empty has -1 elements (0 to 1099511627776)";
  }
  SECTION("too many arrays") {
    header.rank_state->arrays.clear();
    for (int i = 0; i < 65; ++i) {
      header.rank_state->arrays.push_back({fmt::format("a{}", i), DType::kF32, 0});
    }
    pointers.assign(65, nullptr);
    problem = "rank_state has 65 arrays (at most 64)";
  }
  SECTION("one rank array too few") {
    pointers.pop_back();
    problem = "it is given 2 rank-state arrays, but its rank_state lists 3";
  }
  SECTION("one rank array too many") {
    pointers.push_back(nullptr);
    problem = "it is given 4 rank-state arrays, but its rank_state lists 3";
  }
  SECTION("rank arrays the header has no rank state for") {
    header.rank_state.reset();
    problem = "it is given 3 rank-state arrays, but its rank_state lists 0";
  }
  SECTION("the overload without rank arrays, for a rank state that lists some") {
    pointers.clear();
    problem = "it is given 0 rank-state arrays, but its rank_state lists 3";
  }
  const WrittenShard written = pointers.empty()
                                   ? write_shard(path, header, data.arrays())
                                   : write_shard(path, header, data.arrays(), pointers);
  CHECK_THAT(written.error, Equals("cannot write checkpoint shard '" + path + "': " + problem));
  CHECK(dir.names().empty());
}

// `bytes` of a shard with its header's JSON changed by `change` and its
// checksum made to match again, as a writer with a bug would write it. The
// arrays keep their places relative to the 64-byte boundary after the header.
std::string with_header_changed(const std::string& bytes,
                                const std::function<void(nlohmann::json&)>& change) {
  uint32_t length = 0;
  std::memcpy(&length, bytes.data() + 12, sizeof length);
  nlohmann::json fields = nlohmann::json::parse(bytes.substr(16, length));
  const std::string arrays = bytes.substr((16 + length + 63) / 64 * 64);
  fields.erase("header_xxh64");
  change(fields);
  const std::string unchecked = fields.dump();
  fields["header_xxh64"] = xxh64_hex(XXH64(unchecked.data(), unchecked.size(), 0));
  const std::string text = fields.dump();
  length = static_cast<uint32_t>(text.size());
  std::string changed = bytes.substr(0, 12);
  changed.append(reinterpret_cast<const char*>(&length), sizeof length);
  changed += text;
  changed.resize((changed.size() + 63) / 64 * 64, '\0');
  return changed + arrays;
}

TEST_CASE("A damaged rank state is refused with what is wrong with it") {
  TempDir dir;
  const std::string path = dir.file("good.bin");
  ShardHeader header = header_for(0, 1, 8, 0, 8);
  const RankStateData rank;
  header.rank_state = rank.state;
  const ShardData data(0, 8);
  REQUIRE(write_shard(path, header, data.arrays(), rank.pointers()).ok());
  const std::string good = testing::read_bytes(path);
  const int64_t size = static_cast<int64_t>(good.size());
  // The change is the one header_error finds: the good file still reads.
  std::string error;
  REQUIRE(read_shard_header(path, error));
  const auto change_state = [&](const std::function<void(nlohmann::json&)>& change) {
    return header_error(dir, with_header_changed(good, [&](nlohmann::json& fields) {
                          change(fields["rank_state"]);
                        }));
  };

  SECTION("cut inside a rank-state array") {
    // worker_error is at size - 320 (see the round-trip test).
    CHECK_THAT(header_error(dir, good.substr(0, size - 300)),
               Contains(fmt::format("its header (elements [0, 8) of 3 arrays and 3 rank-state "
                                    "arrays) implies {} bytes, but the file has {} (truncated)",
                                    size, size - 300)));
  }
  SECTION("one byte appended") {
    CHECK_THAT(
        header_error(dir, good + '\0'),
        Contains(fmt::format("implies {} bytes, but the file has {} (extended)", size, size + 1)));
  }
  SECTION("a scalar's digit changed") {
    std::string bad = good;
    const size_t minus = bad.find("\"minus\":-2.5");
    REQUIRE(minus != std::string::npos);
    bad[minus + 11] = '7';  // -2.7, still valid JSON of the same length
    CHECK_THAT(header_error(dir, bad), Contains("header's checksum is") && Contains("(damaged)"));
  }
  SECTION("an array's count changed") {
    std::string bad = good;
    const size_t count = bad.find("\"count\":37");
    REQUIRE(count != std::string::npos);
    bad[count + 9] = '8';
    CHECK_THAT(header_error(dir, bad), Contains("header's checksum is") && Contains("(damaged)"));
  }
  SECTION("an array named twice, checksum and all") {
    CHECK_THAT(
        change_state([](nlohmann::json& state) { state["arrays"][1]["name"] = "worker_error"; }),
        Contains("its header's rank_state names array worker_error twice"));
  }
  SECTION("a data rank outside its group") {
    CHECK_THAT(change_state([](nlohmann::json& state) { state["data_rank"] = 3; }),
               Contains("its header's rank_state's data_rank 3 of 3 is not 0 <= rank < ranks"));
  }
  SECTION("no stages") {
    CHECK_THAT(change_state([](nlohmann::json& state) { state.erase("stages"); }),
               Contains("its header has no integer \"stages\" (in rank_state)"));
  }
  SECTION("a scalar that is not a number") {
    CHECK_THAT(change_state([](nlohmann::json& state) { state["scalars"]["lr"] = nullptr; }),
               Contains("its header's rank_state scalar \"lr\" is null, not a number"));
  }
  SECTION("an array of an unknown dtype") {
    CHECK_THAT(change_state([](nlohmann::json& state) { state["arrays"][0]["dtype"] = "fp8"; }),
               Contains("its header's rank_state array") &&
                   Contains("has no name, known dtype and count"));
  }
  SECTION("an array of a count too large for a file") {
    CHECK_THAT(
        change_state([](nlohmann::json& state) { state["arrays"][0]["count"] = int64_t{1} << 62; }),
        Contains("rank_state's array worker_error has 4611686018427387904 elements"));
  }
  SECTION("a rank state that is not an object") {
    CHECK_THAT(change_state([](nlohmann::json& state) { state = 3; }),
               Contains("its header's \"rank_state\" is not an object"));
  }
}

}  // namespace
}  // namespace dslaunch::core
