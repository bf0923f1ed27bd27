#pragma once

#include <cstdint>
#include <string_view>

namespace dslaunch::core {

// CRC-32C (Castagnoli: polynomial 0x1EDC6F41, bit-reflected, initial value
// and final xor 0xFFFFFFFF), the checksum of TFRecord files; crc32c("123456789")
// is 0xE3069283. Pure and thread-safe.
//
// Hand-written: Debian bookworm packages no C++ CRC-32C library (no crc32c,
// no abseil crc, and zlib's crc32 is the other polynomial), and the records
// it checks are a few dozen bytes, so a byte-at-a-time table is fast enough.
uint32_t crc32c(std::string_view data);

}  // namespace dslaunch::core
