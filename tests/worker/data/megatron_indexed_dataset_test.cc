#include "worker/data/megatron_indexed_dataset.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <limits>
#include <type_traits>
#include <vector>

#include "tests/worker/data/test_files.h"

namespace dslaunch::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::append;
using testing::TempDir;

// A Megatron index written byte by byte as megatron/core/datasets/
// indexed_dataset.py's _IndexWriter does.
struct Index {
  uint64_t version = 1;
  uint8_t dtype_code = 8;
  std::vector<int32_t> sizes;
  std::vector<int64_t> pointers;
  std::vector<int64_t> document_indices = {0};

  std::string bytes() const {
    std::string out("MMIDIDX\0\0", 9);
    append(out, version);
    append(out, dtype_code);
    append(out, static_cast<uint64_t>(sizes.size()));
    append(out, static_cast<uint64_t>(document_indices.size()));
    for (const int32_t size : sizes) append(out, size);
    for (const int64_t pointer : pointers) append(out, pointer);
    for (const int64_t index : document_indices) append(out, index);
    return out;
  }
};

// Sequences of T written back to back in .bin, as IndexedDatasetBuilder
// writes them; each sequence one document.
template <typename T>
Index write_dataset(const std::string& prefix, uint8_t dtype_code,
                    const std::vector<std::vector<T>>& sequences) {
  Index index;
  index.dtype_code = dtype_code;
  std::string bin;
  for (const auto& sequence : sequences) {
    index.sizes.push_back(static_cast<int32_t>(sequence.size()));
    index.pointers.push_back(static_cast<int64_t>(bin.size()));
    for (const T token : sequence) append(bin, token);
    index.document_indices.push_back(static_cast<int64_t>(index.sizes.size()));
  }
  testing::write_bytes(prefix + ".bin", bin);
  testing::write_bytes(prefix + ".idx", index.bytes());
  return index;
}

std::vector<int32_t> read_range(const TokenSource& source, int64_t offset, int64_t count) {
  std::vector<int32_t> out(static_cast<size_t>(count));
  source.read(offset, count, out.data());
  return out;
}

TEST_CASE("A Megatron dataset reads as its sequences concatenated in order") {
  TempDir dir;
  const std::string prefix = dir.file("corpus_text_document");
  write_dataset<uint16_t>(prefix, 8, {{10, 11, 12}, {}, {20, 21}, {65535}, {40, 41, 42, 43}});
  const auto opened = open_megatron_indexed_dataset(prefix);
  REQUIRE(opened.error.empty());
  const TokenSource& source = *opened.source;
  const std::vector<int32_t> stream = {10, 11, 12, 20, 21, 65535, 40, 41, 42, 43};
  REQUIRE(source.size() == 10);
  CHECK(source.max_token() == 65535);
  // Every slice, across sequence boundaries and the empty sequence.
  for (int64_t offset = 0; offset <= source.size(); ++offset) {
    for (int64_t count = 0; offset + count <= source.size(); ++count) {
      const std::vector<int32_t> expected(stream.begin() + offset, stream.begin() + offset + count);
      CHECK(read_range(source, offset, count) == expected);
    }
  }
  CHECK_THAT(source.describe(), Contains(prefix) && Contains("10 tokens of uint16") &&
                                    Contains("5 sequences") && Contains("5 documents"));
}

TEMPLATE_TEST_CASE("Every integer dtype of Megatron's DType enum reads", "", uint8_t, int8_t,
                   int16_t, int32_t, int64_t, uint16_t) {
  const uint8_t code = std::is_same_v<TestType, uint8_t>   ? 1
                       : std::is_same_v<TestType, int8_t>  ? 2
                       : std::is_same_v<TestType, int16_t> ? 3
                       : std::is_same_v<TestType, int32_t> ? 4
                       : std::is_same_v<TestType, int64_t> ? 5
                                                           : 8;
  const auto largest = static_cast<TestType>(
      std::min<int64_t>(std::numeric_limits<TestType>::max(), std::numeric_limits<int32_t>::max()));
  TempDir dir;
  write_dataset<TestType>(dir.file("data"), code, {{3, 1}, {largest, 0, 5}});
  const auto opened = open_megatron_indexed_dataset(dir.file("data"));
  REQUIRE(opened.error.empty());
  CHECK(read_range(*opened.source, 0, 5) ==
        std::vector<int32_t>{3, 1, static_cast<int32_t>(largest), 0, 5});
  CHECK(opened.source->max_token() == static_cast<int32_t>(largest));
}

TEST_CASE("Sequences are read where their pointers say, in index order") {
  TempDir dir;
  const std::string prefix = dir.file("data");
  // .bin holds the second sequence first; the index points at each.
  std::string bin;
  for (const int32_t token : {7, 8, 9, 1, 2}) append(bin, token);
  testing::write_bytes(prefix + ".bin", bin);
  Index index;
  index.dtype_code = 4;
  index.sizes = {2, 3};
  index.pointers = {12, 0};
  index.document_indices = {0, 2};
  testing::write_bytes(prefix + ".idx", index.bytes());
  const auto opened = open_megatron_indexed_dataset(prefix);
  REQUIRE(opened.error.empty());
  CHECK(read_range(*opened.source, 0, 5) == std::vector<int32_t>{1, 2, 7, 8, 9});
}

TEST_CASE("A multimodal index, with one mode byte per sequence, reads") {
  TempDir dir;
  const std::string prefix = dir.file("data");
  const Index index = write_dataset<uint16_t>(prefix, 8, {{1, 2}, {3}});
  testing::write_bytes(prefix + ".idx", index.bytes() + std::string(2, '\1'));
  const auto opened = open_megatron_indexed_dataset(prefix);
  REQUIRE(opened.error.empty());
  CHECK(opened.source->size() == 3);
}

TEST_CASE("Bad Megatron datasets are refused with what was expected") {
  TempDir dir;
  const std::string prefix = dir.file("data");
  const Index good = write_dataset<uint16_t>(prefix, 8, {{1, 2, 3}, {4, 5}});
  const auto error_with_index = [&](const std::string& idx_bytes) {
    testing::write_bytes(prefix + ".idx", idx_bytes);
    const auto opened = open_megatron_indexed_dataset(prefix);
    CHECK(opened.source == nullptr);
    return opened.error;
  };
  const auto error_with = [&](const Index& index) {
    const std::string error = error_with_index(index.bytes());
    CHECK_THAT(error, Contains(prefix + ".idx"));
    return error;
  };

  SECTION("shorter than the header") {
    CHECK_THAT(error_with_index(good.bytes().substr(0, 20)),
               Contains("truncated: 20 bytes") && Contains("34-byte header"));
  }
  SECTION("wrong magic") {
    std::string bytes = good.bytes();
    bytes[0] = 'X';
    CHECK_THAT(error_with_index(bytes), Contains("MMIDIDX") && Contains("not a Megatron"));
  }
  SECTION("unsupported version") {
    Index index = good;
    index.version = 2;
    CHECK_THAT(error_with(index), Contains("version 2") && Contains("expected 1"));
  }
  SECTION("floating-point dtypes") {
    Index index = good;
    index.dtype_code = 6;
    CHECK_THAT(error_with(index), Contains("float64") && Contains("not token ids"));
    index.dtype_code = 7;
    CHECK_THAT(error_with(index), Contains("float32"));
  }
  SECTION("unknown dtype code") {
    Index index = good;
    index.dtype_code = 9;
    CHECK_THAT(error_with(index), Contains("unknown dtype code 9") && Contains("8 uint16"));
  }
  SECTION("index size does not match its counts") {
    CHECK_THAT(error_with_index(good.bytes() + "x"),
               Contains("2 sequences and 3 document indices take 82 bytes"));
    CHECK_THAT(error_with_index(good.bytes().substr(0, 60)), Contains("60 bytes"));
  }
  SECTION("counts larger than the file") {
    std::string bytes = good.bytes();
    const uint64_t huge = uint64_t{1} << 62;
    std::memcpy(bytes.data() + 18, &huge, sizeof huge);
    CHECK_THAT(error_with_index(bytes), Contains("more than its 82 bytes can hold"));
  }
  SECTION("a sequence past the end of .bin") {
    Index index = good;
    index.pointers[1] = 8;  // 2 tokens of 2 bytes from byte 8 end at 12; .bin has 10
    CHECK_THAT(error_with(index),
               Contains("sequence 1 (2 tokens of 2 bytes at byte 8)") && Contains("10 bytes"));
    index.pointers[1] = -2;
    CHECK_THAT(error_with(index), Contains("sequence 1"));
  }
  SECTION("a negative sequence size") {
    Index index = good;
    index.sizes[0] = -1;
    CHECK_THAT(error_with(index), Contains("sequence 0 has a negative size -1"));
  }
  SECTION("document indices that do not start at 0 or do not rise") {
    Index index = good;
    index.document_indices = {1, 2, 2};
    CHECK_THAT(error_with(index), Contains("document index 0 is 1"));
    index.document_indices = {0, 2, 1};
    CHECK_THAT(error_with(index), Contains("document index 2 is 1"));
    index.document_indices = {0, 1, 3};
    CHECK_THAT(error_with(index), Contains("document index 2 is 3"));
  }
  SECTION("a missing .bin") {
    std::filesystem::remove(prefix + ".bin");
    const auto opened = open_megatron_indexed_dataset(prefix);
    CHECK(opened.source == nullptr);
    CHECK_THAT(opened.error, Contains(prefix + ".bin") && Contains("No such file"));
  }
}

TEST_CASE("Token ids that are negative or beyond int32 are refused") {
  TempDir dir;
  const std::string prefix = dir.file("data");
  SECTION("negative") {
    write_dataset<int8_t>(prefix, 2, {{1, 2}, {3, -4}});
    const auto opened = open_megatron_indexed_dataset(prefix);
    CHECK(opened.source == nullptr);
    CHECK_THAT(opened.error, Contains(prefix + ".bin") && Contains("sequence 1 holds token id -4"));
  }
  SECTION("too large") {
    write_dataset<int64_t>(prefix, 5, {{int64_t{1} << 40}});
    const auto opened = open_megatron_indexed_dataset(prefix);
    CHECK(opened.source == nullptr);
    CHECK_THAT(opened.error, Contains("token id 1099511627776") && Contains("2147483647"));
  }
}

}  // namespace
}  // namespace dslaunch::worker::data
