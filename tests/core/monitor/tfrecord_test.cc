#include "core/monitor/tfrecord.h"

#include <string>

#include <catch2/catch.hpp>

#include "core/monitor/crc32c.h"

namespace dslaunch::core {
namespace {

uint32_t little_endian_u32(const std::string& bytes, size_t offset) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[offset + i]);
  return value;
}

TEST_CASE("a CRC is masked by rotating it right by 15 bits and adding 0xa282ead8") {
  CHECK(mask_crc32c(0) == 0xA282EAD8u);
  // 0xE3069283 rotated right by 15 is 0x2507C60D.
  CHECK(mask_crc32c(0xE3069283u) == 0x2507C60Du + 0xA282EAD8u);
  // The addition wraps.
  CHECK(mask_crc32c(0xFFFFFFFFu) == 0xA282EAD7u);
}

TEST_CASE("a 24-byte record starts as every TensorFlow event file does") {
  // The file_version event with no step is 24 bytes, and TensorFlow's files
  // begin 18 00 00 00 00 00 00 00 a3 7f 4b 22.
  std::string out;
  append_tfrecord(out, std::string(24, 'x'));
  CHECK(out.substr(0, 12) == std::string("\x18\0\0\0\0\0\0\0\xa3\x7f\x4b\x22", 12));
}

TEST_CASE("a record is length, its masked CRC, the data, and the data's masked CRC") {
  const std::string data = "123456789";
  std::string out = "before";
  append_tfrecord(out, data);
  REQUIRE(out.size() == 6 + 8 + 4 + data.size() + 4);
  const std::string record = out.substr(6);
  CHECK(record.substr(0, 8) == std::string("\x09\0\0\0\0\0\0\0", 8));
  CHECK(little_endian_u32(record, 8) == mask_crc32c(crc32c(record.substr(0, 8))));
  CHECK(record.substr(12, data.size()) == data);
  CHECK(little_endian_u32(record, 12 + data.size()) == mask_crc32c(0xE3069283u));
}

TEST_CASE("an empty record is still framed") {
  std::string out;
  append_tfrecord(out, "");
  REQUIRE(out.size() == 16);
  CHECK(little_endian_u32(out, 12) == mask_crc32c(0));
}

}  // namespace
}  // namespace dslaunch::core
