#include "worker/data/llmc_token_file.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "core/atomic_file.h"
#include "core/mapped_file.h"

namespace dslaunch::worker::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and are read in place");

class LlmcTokenFile final : public TokenSource {
 public:
  LlmcTokenFile(core::MappedFile file, int64_t count)
      : file_(std::move(file)),
        tokens_(reinterpret_cast<const uint16_t*>(file_.bytes() + kLlmcHeaderBytes)),
        size_(count) {
    // The header is 1024 bytes and the mapping page-aligned, so the tokens are aligned.
    const uint16_t* largest = std::max_element(tokens_, tokens_ + size_);
    max_token_ = size_ == 0 ? -1 : *largest;
  }

  int64_t size() const override { return size_; }
  void read(int64_t offset, int64_t count, int32_t* out) const override {
    std::copy(tokens_ + offset, tokens_ + offset + count, out);
  }
  int32_t max_token() const override { return max_token_; }
  std::string describe() const override {
    return fmt::format("llm.c token file '{}' ({} tokens)", file_.path(), size_);
  }

 private:
  core::MappedFile file_;
  const uint16_t* tokens_;
  int64_t size_;
  int32_t max_token_ = -1;
};

int32_t header_int(const uint8_t* bytes, int index) {
  int32_t value = 0;
  std::memcpy(&value, bytes + 4 * index, sizeof value);
  return value;
}

}  // namespace

TokenSourceResult open_llmc_token_file(const std::string& path) {
  core::MappedFile file;
  std::string error;
  if (!file.open(path, error)) return {nullptr, error};
  const int64_t file_size = file.size();
  constexpr const char* kLayout =
      "an llm.c token file starts with a 1024-byte header of 256 int32 (magic 20240520, "
      "version 1, token count), then 2 bytes per token";
  if (file_size < kLlmcHeaderBytes) {
    return {nullptr, fmt::format("'{}' is not an llm.c token file: it has {} bytes, fewer than "
                                 "the header needs ({})",
                                 path, file_size, kLayout)};
  }
  const int32_t magic = header_int(file.bytes(), 0);
  if (magic != kLlmcMagic) {
    return {nullptr,
            fmt::format("'{}' is not an llm.c token file: its first int32 is {}, expected the "
                        "magic number {} ({}); a Megatron dataset is given by its prefix, the "
                        "path without .bin/.idx",
                        path, magic, kLlmcMagic, kLayout)};
  }
  const int32_t version = header_int(file.bytes(), 1);
  if (version != kLlmcVersion) {
    return {nullptr, fmt::format("'{}': llm.c token file version {} is not supported; expected "
                                 "version {} (uint16 tokens)",
                                 path, version, kLlmcVersion)};
  }
  const int32_t count = header_int(file.bytes(), 2);
  if (count < 0) {
    return {nullptr,
            fmt::format("'{}': the header's token count is {}; it must be 0 or more", path, count)};
  }
  const int64_t expected_size = kLlmcHeaderBytes + 2 * int64_t{count};
  if (file_size < expected_size) {
    return {nullptr, fmt::format("'{}' is truncated: its header says {} tokens, which take {} "
                                 "bytes with the header, but the file has {} bytes",
                                 path, count, expected_size, file_size)};
  }
  if (file_size > expected_size) {
    return {nullptr, fmt::format("'{}' has {} bytes, but its header says {} tokens, which take {} "
                                 "bytes with the header: the token count does not match the file",
                                 path, file_size, count, expected_size)};
  }
  return {std::make_unique<LlmcTokenFile>(std::move(file), count), ""};
}

bool has_llmc_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) && magic == kLlmcMagic;
}

std::string llmc_token_file_bytes(std::span<const uint16_t> tokens) {
  std::array<int32_t, kLlmcHeaderBytes / 4> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  std::string bytes(static_cast<size_t>(kLlmcHeaderBytes) + 2 * tokens.size(), '\0');
  std::memcpy(bytes.data(), header.data(), kLlmcHeaderBytes);
  if (!tokens.empty()) {
    std::memcpy(bytes.data() + kLlmcHeaderBytes, tokens.data(), 2 * tokens.size());
  }
  return bytes;
}

bool write_llmc_token_file(const std::string& path, std::span<const uint16_t> tokens,
                           std::string& error) {
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    error = fmt::format(
        "cannot write '{}': {} tokens are more than an llm.c token file holds "
        "(its header counts them in an int32, at most {})",
        path, tokens.size(), std::numeric_limits<int32_t>::max());
    return false;
  }
  return core::write_file_atomically(path, llmc_token_file_bytes(tokens), error);
}

}  // namespace dslaunch::worker::data
