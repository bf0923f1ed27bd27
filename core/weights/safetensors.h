#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/mapped_file.h"

namespace dslaunch::core {

// The safetensors format (Hugging Face): 8 bytes, a little-endian uint64 N;
// N bytes of UTF-8 JSON mapping each tensor name to {"dtype", "shape",
// "data_offsets": [begin, end)} (byte offsets into the data that follows),
// plus an optional "__metadata__" map of strings; then the tensors' bytes,
// little-endian, C order, back to back.

// Element types, in the order of the reference implementation's enum, which
// is increasing alignment: the writer stores tensors by descending alignment
// as the reference does.
enum class SafetensorsDtype {
  kBool,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
};

// The header's name of a dtype ("F32", "BF16", ...).
std::string_view dtype_name(SafetensorsDtype dtype);
// The dtype a header name stands for; nullopt for a name not in the format.
std::optional<SafetensorsDtype> dtype_from_name(std::string_view name);
// Bytes per element.
int64_t dtype_size(SafetensorsDtype dtype);

// One tensor of a file, as its header describes it.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;  // empty for a scalar
  int64_t numel = 0;
  int64_t begin = 0;  // data_offsets, in bytes from the start of the data
  int64_t end = 0;
};

// A safetensors file mapped read-only and checked as a whole when opened, so
// that every tensor it lists lies inside the file. Movable, not copyable;
// const methods are safe to call from several threads at once. The file must
// not be truncated while open.
class SafetensorsFile {
 public:
  // Maps and checks `path`. On failure returns false and sets `error` to one
  // sentence naming the file and what is wrong: too short for a header, a
  // header length past the end of the file or above 100 MB (the reference
  // implementation's limit), a header that is not a UTF-8 JSON object, a
  // tensor entry without a known dtype, a shape of non-negative integers or
  // two data_offsets, offsets whose length disagrees with dtype and shape,
  // tensors that overlap, leave gaps or run past the end of the file, bytes
  // after the last tensor, a non-string metadata value.
  bool open(const std::string& path, std::string& error);

  const std::string& path() const { return mapped_.path(); }
  // In file order (by data offset).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr if the file has no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // The "__metadata__" map; empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Converts one of this file's tensors to float into out[0, numel). F32,
  // F64, F16 and BF16 convert (F64 rounds to nearest); any other dtype
  // returns false with `error` naming the tensor, its dtype and the file.
  bool read_floats(const SafetensorsTensor& tensor, float* out, std::string& error) const;

 private:
  core::MappedFile mapped_;
  const uint8_t* data_ = nullptr;  // the first byte after the header
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: the bytes are the caller's and must hold numel *
// dtype_size(dtype) bytes, little-endian, C order: in memory at `data`, or,
// where they are not (parameters in a swap file), read by `source`:
// source(offset, bytes, out) puts bytes [offset, offset + bytes) of the
// tensor in out and returns "" or what failed. write_safetensors reads it
// in order, in pieces of at most kSafetensorsSourcePiece bytes (a multiple
// of every dtype's size).
using SafetensorsSource = std::function<std::string(int64_t offset, int64_t bytes, void* out)>;
inline constexpr int64_t kSafetensorsSourcePiece = int64_t{16} << 20;
struct SafetensorsTensorData {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  SafetensorsSource source = nullptr;
};

// Writes `tensors` and `metadata` (omitted from the header when empty) to
// `path` as the reference implementation lays a file out: tensors sorted by
// descending dtype alignment, then by name, stored back to back from offset
// 0; the header compact JSON with "__metadata__" first, padded with spaces to
// a multiple of 8 bytes so that every tensor starts 8-byte aligned. Writes
// atomically (write_file_atomically): a reader sees the old file or the
// new one, never a part. Streams the tensors, so the file is never in memory
// whole. Returns false with `error` naming the file (or the offending tensor:
// an empty, duplicate or non-UTF-8 name, a negative dimension, no data, a
// failed source) on failure. Every source is read exactly once, in the
// file's order and pieces, whatever fails, so sources may be collective:
// every rank of a group reading together while one writes.
bool write_safetensors(const std::string& path, const std::vector<SafetensorsTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata, std::string& error);

// The reads write_safetensors makes of the same tensors' sources, in the
// same order and pieces, writing nothing: what the ranks beside the writer
// run when the sources are collective. "" or the first source's error.
std::string read_safetensors_sources(const std::vector<SafetensorsTensorData>& tensors);

}  // namespace dslaunch::core
