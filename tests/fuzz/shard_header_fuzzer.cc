// libFuzzer target: checkpoint shard files, read by read_shard_header,
// read_shard_range and read_flat_range. The input is either a whole file, or
// a header JSON that the target wraps as the writer does (magic, version,
// length, the header_xxh64 the writer would compute, padding) so that the
// checks behind the checksum are reached, followed by fuzzed data. Besides
// crashes, hangs and sanitizer reports, it traps when a promise is broken: an
// accepted header has 0 <= rank < ranks and 0 <= begin <= end <= total, and
// the file has exactly the bytes it implies; a range inside [begin, end)
// reads exactly the file's bytes for it, through either reader; a range
// outside it is refused with an error.
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
  const uint32_t version = core::kShardFormatVersion;
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

void check_reads(const std::string& path, const std::string& file,
                 const core::ShardHeader& header, FuzzedDataProvider& input) {
  const int64_t count = header.end - header.begin;
  const auto array = static_cast<core::ShardArray>(input.ConsumeIntegralInRange(0, 2));
  const int64_t from = header.begin + input.ConsumeIntegralInRange<int64_t>(0, count);
  const int64_t to = from + input.ConsumeIntegralInRange<int64_t>(0, header.end - from);
  const int64_t first =
      data_offset(file) + 4 * (static_cast<int64_t>(array) * count + from - header.begin);
  std::vector<float> out(static_cast<size_t>(to - from));
  std::string error;
  require(core::read_shard_range(path, header, array, from, to, out.data(), error));
  require(out.empty() || std::memcmp(out.data(), file.data() + first, out.size() * 4) == 0);
  std::fill(out.begin(), out.end(), 0.0f);
  require(core::read_flat_range({{path, header.begin, header.end}}, array, from, to,
                                      out.data(), error));
  require(out.empty() || std::memcmp(out.data(), file.data() + first, out.size() * 4) == 0);

  float ignored[1];
  error.clear();
  require(!core::read_shard_range(path, header, array, header.end, header.end + 1, ignored,
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
  require(static_cast<int64_t>(file.size()) ==
          data_offset(file) + 12 * (header->end - header->begin));
  check_reads(path, file, *header, input);
  return 0;
}
