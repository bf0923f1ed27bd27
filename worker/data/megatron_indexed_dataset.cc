#include "worker/data/megatron_indexed_dataset.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/mapped_file.h"

namespace dslaunch::worker::data {
namespace {

constexpr std::string_view kIndexMagic{"MMIDIDX\0\0", 9};
constexpr int64_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

enum class TokenType { kUint8 = 1, kInt8 = 2, kInt16 = 3, kInt32 = 4, kInt64 = 5, kUint16 = 8 };

struct TypeInfo {
  const char* name;
  int64_t bytes;
};

TypeInfo type_info(TokenType type) {
  switch (type) {
    case TokenType::kUint8:
      return {"uint8", 1};
    case TokenType::kInt8:
      return {"int8", 1};
    case TokenType::kInt16:
      return {"int16", 2};
    case TokenType::kInt32:
      return {"int32", 4};
    case TokenType::kInt64:
      return {"int64", 8};
    case TokenType::kUint16:
      return {"uint16", 2};
  }
  return {"?", 1};
}

// Loads a little-endian value from a possibly unaligned address.
template <typename T>
T load(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  return value;
}

template <typename T>
void decode(const uint8_t* from, int64_t count, int32_t* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(load<T>(from + i * sizeof(T)));
}

void decode(TokenType type, const uint8_t* from, int64_t count, int32_t* out) {
  switch (type) {
    case TokenType::kUint8:
      return decode<uint8_t>(from, count, out);
    case TokenType::kInt8:
      return decode<int8_t>(from, count, out);
    case TokenType::kInt16:
      return decode<int16_t>(from, count, out);
    case TokenType::kInt32:
      return decode<int32_t>(from, count, out);
    case TokenType::kInt64:
      return decode<int64_t>(from, count, out);
    case TokenType::kUint16:
      return decode<uint16_t>(from, count, out);
  }
}

// The smallest and largest token of `count` tokens at `from`, read at their
// full width so values an int32 cannot hold are seen.
template <typename T>
std::pair<int64_t, int64_t> token_bounds(const uint8_t* from, int64_t count) {
  int64_t low = std::numeric_limits<int64_t>::max();
  int64_t high = std::numeric_limits<int64_t>::min();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t value = load<T>(from + i * sizeof(T));
    low = std::min(low, value);
    high = std::max(high, value);
  }
  return {low, high};
}

std::pair<int64_t, int64_t> token_bounds(TokenType type, const uint8_t* from, int64_t count) {
  switch (type) {
    case TokenType::kUint8:
      return token_bounds<uint8_t>(from, count);
    case TokenType::kInt8:
      return token_bounds<int8_t>(from, count);
    case TokenType::kInt16:
      return token_bounds<int16_t>(from, count);
    case TokenType::kInt32:
      return token_bounds<int32_t>(from, count);
    case TokenType::kInt64:
      return token_bounds<int64_t>(from, count);
    case TokenType::kUint16:
      return token_bounds<uint16_t>(from, count);
  }
  return {0, 0};
}

class MegatronIndexedDataset final : public TokenSource {
 public:
  MegatronIndexedDataset(std::string prefix, core::MappedFile bin, TokenType type,
                         std::vector<int64_t> pointers, std::vector<int64_t> starts,
                         int64_t documents, int32_t max_token)
      : prefix_(std::move(prefix)),
        bin_(std::move(bin)),
        type_(type),
        pointers_(std::move(pointers)),
        starts_(std::move(starts)),
        documents_(documents),
        max_token_(max_token) {}

  int64_t size() const override { return starts_.back(); }

  void read(int64_t offset, int64_t count, int32_t* out) const override {
    // The sequence holding `offset`: the last one starting at or before it
    // (upper_bound skips empty sequences, which share their start).
    auto sequence = std::upper_bound(starts_.begin(), starts_.end(), offset) - starts_.begin() - 1;
    const int64_t width = type_info(type_).bytes;
    while (count > 0) {
      const int64_t within = offset - starts_[sequence];
      const int64_t take = std::min(count, starts_[sequence + 1] - offset);
      decode(type_, bin_.bytes() + pointers_[sequence] + within * width, take, out);
      out += take;
      offset += take;
      count -= take;
      ++sequence;
    }
  }

  int32_t max_token() const override { return max_token_; }

  std::string describe() const override {
    return fmt::format(
        "Megatron dataset '{}' (.bin/.idx; {} tokens of {} in {} sequences, {} "
        "documents)",
        prefix_, size(), type_info(type_).name, pointers_.size(), documents_);
  }

 private:
  std::string prefix_;
  core::MappedFile bin_;
  TokenType type_;
  std::vector<int64_t> pointers_;  // byte offset of each sequence in .bin
  std::vector<int64_t> starts_;    // stream offset of each sequence, then the total
  int64_t documents_;
  int32_t max_token_;
};

}  // namespace

TokenSourceResult open_megatron_indexed_dataset(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx";
  const std::string bin_path = prefix + ".bin";
  std::string error;
  core::MappedFile idx;
  core::MappedFile bin;
  if (!idx.open(idx_path, error) || !bin.open(bin_path, error)) return {nullptr, error};
  const uint8_t* index = idx.bytes();
  const int64_t idx_size = idx.size();
  const auto fail = [&](const std::string& what) {
    return TokenSourceResult{nullptr, fmt::format("Megatron index '{}': {}", idx_path, what)};
  };

  if (idx_size < kHeaderBytes) {
    return fail(
        fmt::format("truncated: {} bytes, fewer than the {}-byte header (magic "
                    "MMIDIDX\\0\\0, version, dtype code, sequence and document counts)",
                    idx_size, kHeaderBytes));
  }
  if (std::string_view(reinterpret_cast<const char*>(index), kIndexMagic.size()) != kIndexMagic) {
    return fail("does not start with the magic bytes MMIDIDX\\0\\0: not a Megatron .idx file");
  }
  const uint64_t version = load<uint64_t>(index + 9);
  if (version != 1) return fail(fmt::format("version {} is not supported; expected 1", version));
  const uint8_t code = index[17];
  if (code == 6 || code == 7) {
    return fail(
        fmt::format("dtype code {} ({}) holds floating-point values, not token ids; "
                    "expected an integer type (1 uint8, 2 int8, 3 int16, 4 int32, "
                    "5 int64, 8 uint16)",
                    code, code == 6 ? "float64" : "float32"));
  }
  if (code < 1 || code > 8) {
    return fail(
        fmt::format("unknown dtype code {}; expected one of Megatron's DType codes "
                    "1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16",
                    code));
  }
  const auto type = static_cast<TokenType>(code);
  const int64_t width = type_info(type).bytes;
  const uint64_t sequences = load<uint64_t>(index + 18);
  const uint64_t document_entries = load<uint64_t>(index + 26);
  // Bounded by the file size first, so the arithmetic below cannot overflow.
  const uint64_t room = static_cast<uint64_t>(idx_size - kHeaderBytes);
  if (sequences > room / 12 || document_entries > room / 8) {
    return fail(
        fmt::format("its header counts {} sequences and {} document indices, more than "
                    "its {} bytes can hold",
                    sequences, document_entries, idx_size));
  }
  const int64_t sequence_count = static_cast<int64_t>(sequences);
  const int64_t document_count = static_cast<int64_t>(document_entries);
  const int64_t sizes_at = kHeaderBytes;
  const int64_t pointers_at = sizes_at + 4 * sequence_count;
  const int64_t documents_at = pointers_at + 8 * sequence_count;
  const int64_t expected_size = documents_at + 8 * document_count;
  // Multimodal datasets append one int8 mode per sequence.
  if (idx_size != expected_size && idx_size != expected_size + sequence_count) {
    return fail(fmt::format(
        "{} bytes, but its header's {} sequences and {} document indices "
        "take {} bytes ({} with per-sequence modes)",
        idx_size, sequence_count, document_count, expected_size, expected_size + sequence_count));
  }
  if (document_count < 1) {
    return fail("no document indices; expected at least the leading 0");
  }
  int64_t previous_document_end = 0;
  for (int64_t d = 0; d < document_count; ++d) {
    const int64_t end = load<int64_t>(index + documents_at + 8 * d);
    if (end < previous_document_end || end > sequence_count || (d == 0 && end != 0)) {
      return fail(
          fmt::format("document index {} is {}; expected the indices to start at 0 and "
                      "rise to at most the {} sequences",
                      d, end, sequence_count));
    }
    previous_document_end = end;
  }

  std::vector<int64_t> pointers(static_cast<size_t>(sequence_count));
  std::vector<int64_t> starts(static_cast<size_t>(sequence_count) + 1, 0);
  int64_t high = -1;
  for (int64_t s = 0; s < sequence_count; ++s) {
    const int32_t length = load<int32_t>(index + sizes_at + 4 * s);
    const int64_t pointer = load<int64_t>(index + pointers_at + 8 * s);
    if (length < 0) return fail(fmt::format("sequence {} has a negative size {}", s, length));
    if (pointer < 0 || pointer > bin.size() || int64_t{length} * width > bin.size() - pointer) {
      return fail(
          fmt::format("sequence {} ({} tokens of {} bytes at byte {}) reaches past the "
                      "end of '{}', which has {} bytes",
                      s, length, width, pointer, bin_path, bin.size()));
    }
    const auto [sequence_low, sequence_high] = token_bounds(type, bin.bytes() + pointer, length);
    if (length > 0 && (sequence_low < 0 || sequence_high > std::numeric_limits<int32_t>::max())) {
      return TokenSourceResult{
          nullptr, fmt::format("Megatron data '{}': sequence {} holds token id {}; token ids must "
                               "be from 0 to {}",
                               bin_path, s, sequence_low < 0 ? sequence_low : sequence_high,
                               std::numeric_limits<int32_t>::max())};
    }
    high = std::max(high, sequence_high);
    pointers[s] = pointer;
    starts[s + 1] = starts[s] + length;
  }
  return {std::make_unique<MegatronIndexedDataset>(prefix, std::move(bin), type,
                                                   std::move(pointers), std::move(starts),
                                                   document_count - 1, static_cast<int32_t>(high)),
          ""};
}

}  // namespace dslaunch::worker::data
