#include "core/monitor/tfrecord.h"

#include "core/monitor/crc32c.h"

namespace dslaunch::core {
namespace {

// The file's byte order is little endian whatever the host's.
template <typename Unsigned>
std::string little_endian(Unsigned value) {
  std::string bytes(sizeof value, '\0');
  for (char& byte : bytes) {
    byte = static_cast<char>(value & 0xFF);
    value >>= 8;
  }
  return bytes;
}

}  // namespace

uint32_t mask_crc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

void append_tfrecord(std::string& out, std::string_view data) {
  const std::string length = little_endian<uint64_t>(data.size());
  out += length;
  out += little_endian(mask_crc32c(crc32c(length)));
  out += data;
  out += little_endian(mask_crc32c(crc32c(data)));
}

}  // namespace dslaunch::core
