#pragma once

#include <cstdint>
#include <string>
#include <string_view>

// TFRecord framing, TensorFlow's record format
// (tensorflow/core/lib/io/record_writer.cc), which TensorBoard's event files
// use. Each record is
//
//   uint64  length of data, little endian
//   uint32  masked_crc32c(the 8 length bytes), little endian
//   byte    data[length]
//   uint32  masked_crc32c(data), little endian
//
// so a reader can tell a torn or corrupted record from a good one before
// trusting its length. Pure functions, thread-safe.
namespace dslaunch::core {

// The CRC as a record stores it: rotated right by 15 bits, plus 0xa282ead8.
// TensorFlow masks because the CRC of bytes that embed CRCs is weak.
uint32_t mask_crc32c(uint32_t crc);

// Appends `data`, framed as one record, to `out`.
void append_tfrecord(std::string& out, std::string_view data);

}  // namespace dslaunch::core
