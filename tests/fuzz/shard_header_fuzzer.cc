// libFuzzer target: checkpoint shard files, read by read_shard_header and
// read_flat_range. The input is either a whole file, or a header JSON that
// the target wraps as the writer does (magic, version, length, the
// header_xxh64 the writer would compute, padding) so that the checks behind
// the checksum are reached, followed by fuzzed data. The version is 2 for a
// header with a "layout" field, else 1, so that both formats' readers are
// reached. Besides crashes, hangs and sanitizer reports, it traps when a
// promise is broken: an accepted header has 0 <= rank < ranks and 0 <= begin
// <= end <= total, its layout (format 2) tiles [0, total), and the file has
// exactly the bytes it implies (format 1: three fp32 arrays back to back;
// format 2: each array at a multiple of 64 bytes); a range inside [begin,
// end) of an fp32 array, read through the shard's own layout, reads exactly
// the file's bytes for it, and an array of another dtype is refused; a
// range outside [begin, end) is refused with an error.
#include <fuzzer/FuzzedDataProvider.h>

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "core/checkpoint/file_checksum.h"
#include "core/checkpoint/shard_file.h"

namespace {

using dslaunch::fuzz::require;
namespace core = dslaunch::core;

// The header text with the checksum the writer would give it, when it is a
// JSON object; else the text as it is.
std::string with_checksum(const std::string& header) {
  nlohmann::json fields = nlohmann::json::parse(header, nullptr, false);
  if (!fields.is_object()) return header;
  fields.erase("header_xxh64");
  const std::string text = fields.dump();
  fields["header_xxh64"] = core::xxh64_hex(XXH64(text.data(), text.size(), 0));
  return fields.dump();
}

std::string wrapped(const std::string& header, const std::string& data) {
  const std::string text = with_checksum(header);
  const nlohmann::json fields = nlohmann::json::parse(header, nullptr, false);
  const uint32_t version =
      fields.is_object() && fields.contains("layout") ? core::kShardFormatVersion : 1;
  const auto length = static_cast<uint32_t>(text.size());
  std::string file(core::kShardMagic, sizeof core::kShardMagic);
  file.append(reinterpret_cast<const char*>(&version), sizeof version);
  file.append(reinterpret_cast<const char*>(&length), sizeof length);
  file += text;
  file.resize((file.size() + 63) / 64 * 64, '\0');
  return file + data;
}

int64_t data_offset(const std::string& file) {
  uint32_t length = 0;
  std::memcpy(&length, file.data() + 12, sizeof length);
  return (16 + int64_t{length} + 63) / 64 * 64;
}

// Where each of the header's arrays starts, worked out here independently of
// the reader, then the end of the last one: the file's size, once the rank
// state's arrays (each at a multiple of 64 bytes too) are added.
std::vector<int64_t> array_offsets(const std::string& file, const core::ShardHeader& header) {
  const int64_t count = header.end - header.begin;
  std::vector<int64_t> offsets;
  int64_t offset = data_offset(file);
  for (const core::ShardArrayInfo& array : header.arrays) {
    if (header.format_version >= 2) offset = (offset + 63) / 64 * 64;
    offsets.push_back(offset);
    int64_t bytes = 0;
    require(!__builtin_mul_overflow(count, core::dtype_bytes(array.dtype), &bytes) &&
            !__builtin_add_overflow(offset, bytes, &offset));
  }
  if (header.rank_state) {
    for (const core::RankStateArray& array : header.rank_state->arrays) {
      offset = (offset + 63) / 64 * 64;
      int64_t bytes = 0;
      require(!__builtin_mul_overflow(array.count, core::dtype_bytes(array.dtype), &bytes) &&
              !__builtin_add_overflow(offset, bytes, &offset));
    }
  }
  offsets.push_back(offset);
  return offsets;
}

// The layout the shard was written with: its own, or for format 1 the
// whole model's flat buffer (one whole tensor reads it as any whole layout).
std::vector<core::LayoutTensor> own_layout(const core::ShardHeader& header) {
  if (!header.layout.empty()) return header.layout;
  const int64_t total = header.total_parameters;
  return {core::LayoutTensor{.name = "flat",
                             .global_shape = {total},
                             .split = {.view = {total}, .dim = 0, .index = 0, .parts = 1},
                             .offset = 0,
                             .numel = total}};
}

void check_reads(const std::string& path, const std::string& file, const core::ShardHeader& header,
                 const std::vector<int64_t>& offsets, FuzzedDataProvider& input) {
  if (header.arrays.empty()) return;
  const int64_t count = header.end - header.begin;
  const size_t which = input.ConsumeIntegralInRange<size_t>(0, header.arrays.size() - 1);
  const core::ShardArrayInfo array = header.arrays[which];
  const int64_t from = header.begin + input.ConsumeIntegralInRange<int64_t>(0, count);
  const int64_t to = from + input.ConsumeIntegralInRange<int64_t>(0, header.end - from);
  const std::vector<core::LayoutTensor> layout = own_layout(header);
  const std::vector<core::ShardLocation> shards = {{path, header.begin, header.end}};
  std::vector<float> out(static_cast<size_t>(to - from));
  std::string error;
  const bool read = core::read_flat_range(shards, layout, array.kind, from, to, out.data(), error);
  if (array.dtype != core::DType::kF32 && from < to) {
    require(!read && !error.empty());
  } else if (array.dtype == core::DType::kF32) {
    require(read);
    const int64_t first = offsets[which] + 4 * (from - header.begin);
    require(out.empty() || std::memcmp(out.data(), file.data() + first, out.size() * 4) == 0);
  }

  float ignored[1];
  error.clear();
  require(!core::read_flat_range(shards, layout, array.kind, header.end, header.end + 1, ignored,
                                 error) &&
          !error.empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  std::string file;
  if (input.ConsumeBool()) {
    const std::string header = input.ConsumeRandomLengthString(1024);
    file = wrapped(header, input.ConsumeRandomLengthString(4096));
  } else {
    file = input.ConsumeRandomLengthString(8192);
  }
  dslaunch::fuzz::clear_scratch_dir();
  const std::string path = dslaunch::fuzz::write_scratch_file("rank_0.bin", file);

  std::string error;
  const auto header = core::read_shard_header(path, error);
  if (!header) {
    require(!error.empty());
    return 0;
  }
  require(header->ranks >= 1 && header->rank >= 0 && header->rank < header->ranks);
  require(header->begin >= 0 && header->begin <= header->end &&
          header->end <= header->total_parameters);
  require(header->format_version == 1 || header->format_version == core::kShardFormatVersion);
  if (header->format_version == 1) {
    require(header->layout.empty() && header->arrays.size() == 3);
  } else {
    int64_t next = 0;
    for (const core::LayoutTensor& tensor : header->layout) {
      require(tensor.offset == next && tensor.numel >= 0 &&
              !__builtin_add_overflow(next, tensor.numel, &next));
    }
    require(next == header->total_parameters);
  }
  const std::vector<int64_t> offsets = array_offsets(file, *header);
  require(static_cast<int64_t>(file.size()) == offsets.back());
  check_reads(path, file, *header, offsets, input);
  return 0;
}
