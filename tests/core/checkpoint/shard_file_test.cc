#include "core/checkpoint/shard_file.h"

#include <sys/stat.h>

#include <bit>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "core/faulty_file_system.h"
#include "tests/core/checkpoint/test_shards.h"
#include "core/checkpoint/file_checksum.h"

namespace dslaunch::core {
namespace {

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;
using testing::expected_values;
using testing::ShardData;
using testing::TempDir;

ShardHeader header_for(int rank, int ranks, int64_t total, int64_t begin, int64_t end) {
  return {.step = 40,
          .rank = rank,
          .ranks = ranks,
          .total_parameters = total,
          .begin = begin,
          .end = end,
          .optimizer_step = 39};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> read_range(const std::string& path, const ShardHeader& header, ShardArray array,
                              int64_t from, int64_t to) {
  std::vector<float> out(static_cast<size_t>(to - from));
  std::string error;
  const bool read = read_shard_range(path, header, array, from, to, out.data(), error);
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
  // The arrays start on a 64-byte boundary.
  CHECK((written.size_bytes - 3 * 250 * 4) % 64 == 0);
  std::string error;
  CHECK(file_xxh64(path, error) == written.xxh64);
  CHECK(testing::read_bytes(path).substr(0, 8) == "DSLSHRD1");

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

  CHECK(same_bits(read_range(path, *read, ShardArray::kParams, 300, 550), data.params));
  CHECK(same_bits(read_range(path, *read, ShardArray::kAdamM, 300, 550), data.adam_m));
  CHECK(same_bits(read_range(path, *read, ShardArray::kAdamV, 300, 550), data.adam_v));
  CHECK(read_range(path, *read, ShardArray::kAdamM, 400, 403) ==
        std::vector<float>{data.adam_m[100], data.adam_m[101], data.adam_m[102]});
  CHECK(read_range(path, *read, ShardArray::kAdamV, 549, 550) ==
        std::vector<float>{-std::numeric_limits<float>::infinity()});
  CHECK(read_range(path, *read, ShardArray::kParams, 320, 320).empty());

  std::vector<float> out(10);
  CHECK_FALSE(read_shard_range(path, *read, ShardArray::kParams, 545, 555, out.data(), error));
  CHECK_THAT(error, Contains("cannot read [545, 555)") && Contains("it holds [300, 550)"));
}

TEST_CASE("A rank that owns nothing writes a shard with empty arrays") {
  TempDir dir;
  const std::string path = dir.file("shard-3.bin");
  const WrittenShard written = write_shard(path, header_for(3, 4, 10, 10, 10), {});
  INFO(written.error);
  REQUIRE(written.ok());
  CHECK(written.size_bytes % 64 == 0);
  std::string error;
  const std::optional<ShardHeader> read = read_shard_header(path, error);
  REQUIRE(read);
  CHECK(read->begin == 10);
  CHECK(read->end == 10);
}

TEST_CASE("A header that is not consistent is not written") {
  TempDir dir;
  const std::string path = dir.file("shard.bin");
  CHECK_THAT(write_shard(path, header_for(0, 2, 100, 60, 50), {}).error,
             Contains("cannot write checkpoint shard '" + path + "'") &&
                 Contains("range [60, 50) is not within [0, 100)"));
  CHECK_THAT(write_shard(path, header_for(2, 2, 100, 0, 0), {}).error,
             Contains("rank 2 of 2 ranks"));
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

TEST_CASE("read_flat_range assembles any range from the shards that hold it") {
  TempDir dir;
  const std::vector<ShardLocation> shards = write_four_shards(dir);
  const std::vector<std::pair<int64_t, int64_t>> spans = {{0, 100}, {30, 70}, {36, 62},  {37, 61},
                                                          {40, 45}, {0, 37},  {99, 100}, {50, 50}};
  for (const ShardArray array : {ShardArray::kParams, ShardArray::kAdamM, ShardArray::kAdamV}) {
    for (const auto& [from, to] : spans) {
      INFO("array " << static_cast<int>(array) << " [" << from << ", " << to << ")");
      std::vector<float> out(static_cast<size_t>(to - from));
      std::string error;
      CHECK(read_flat_range(shards, array, from, to, out.data(), error));
      CHECK(error.empty());
      CHECK(out == expected_values(array, from, to));
    }
  }
}

TEST_CASE("read_flat_range names the first index no shard holds") {
  TempDir dir;
  std::vector<ShardLocation> shards = write_four_shards(dir);
  std::vector<float> out(100);
  std::string error;
  CHECK_FALSE(read_flat_range(shards, ShardArray::kParams, 90, 120, out.data(), error));
  CHECK_THAT(error, Equals("cannot read [90, 120) from a checkpoint: no shard holds index 100"));

  // Without the shard of [37, 61).
  std::erase_if(shards,
                [](const ShardLocation& shard) { return shard.begin == 37 && shard.end == 61; });
  CHECK_FALSE(read_flat_range(shards, ShardArray::kAdamM, 10, 80, out.data(), error));
  CHECK_THAT(error, Equals("cannot read [10, 80) from a checkpoint: no shard holds index 37"));
  // A range on either side of the gap still reads.
  CHECK(read_flat_range(shards, ShardArray::kAdamM, 61, 100, out.data(), error));
}

TEST_CASE("read_flat_range checks each shard holds what it is listed as holding") {
  TempDir dir;
  std::vector<ShardLocation> shards = write_four_shards(dir);
  for (ShardLocation& shard : shards) {
    if (shard.begin == 61) shard.begin = 60;
  }
  std::vector<float> out(100);
  std::string error;
  CHECK_FALSE(read_flat_range(shards, ShardArray::kParams, 0, 100, out.data(), error));
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
    bad[8] = 2;
    CHECK_THAT(header_error(dir, bad), Contains("format version 2 is not supported"));
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
  CHECK(read_range(path, *read_shard_header(path, error), ShardArray::kAdamV, 0, 1000) ==
        expected_values(ShardArray::kAdamV, 0, 1000));
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

}  // namespace
}  // namespace dslaunch::core
