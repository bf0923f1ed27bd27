#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/file_system.h"

namespace dslaunch::core {

// One data-parallel rank's part of a checkpoint. The engine keeps parameters
// and AdamW's two moments as flat float32 buffers of `total_parameters`
// floats each; rank `rank` of `ranks` owns the indices [begin, end) of all
// three (end == begin for a rank that owns nothing).
struct ShardHeader {
  int64_t step = 0;
  int rank = 0;
  int ranks = 1;
  int64_t total_parameters = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t optimizer_step = 0;
};

enum class ShardArray { kParams, kAdamM, kAdamV };

// The three arrays over [begin, end), end - begin floats each; may be null
// when that is 0.
struct ShardArrays {
  const float* params = nullptr;
  const float* adam_m = nullptr;
  const float* adam_v = nullptr;
};

struct WrittenShard {
  std::string error;       // empty on success
  int64_t size_bytes = 0;  // the whole file
  std::string xxh64;       // of the whole file, as xxh64_hex gives it
  bool ok() const { return error.empty(); }
};

// The file layout, all little-endian:
//   bytes 0-7    magic "DSLSHRD1"
//   bytes 8-11   uint32 format version (1)
//   bytes 12-15  uint32 header length H
//   16 .. 16+H   the header as JSON text: every ShardHeader field, plus
//                "header_xxh64", the xxh64 of the JSON nlohmann dumps for the
//                other fields, so a damaged header is never taken as another
//                valid one
//   zero padding to a multiple of 64 bytes, then params, adam_m and adam_v,
//   (end - begin) float32 each, one after the other.
inline constexpr char kShardMagic[8] = {'D', 'S', 'L', 'S', 'H', 'R', 'D', '1'};
inline constexpr uint32_t kShardFormatVersion = 1;

// Writes the shard to `path` + ".tmp" in large blocks, hashing each byte as
// it is written, syncs it, renames it over `path` and syncs the directory.
// The temporary file is created new, mode 0600 (a stale one from a writer
// that died is removed first; a link planted at its name is never written
// through). On failure (a missing directory, a full disk, an I/O error) the
// result's error names `path` and the reason, and neither `path` nor the
// temporary file is left behind: `path` only ever holds a whole shard. Two
// writers must not write the same path at once (they would share the
// temporary file). Thread-safe otherwise; blocks until the data is on disk.
// Every file call goes through `fs`.
WrittenShard write_shard(const std::string& path, const ShardHeader& header,
                         const ShardArrays& arrays,
                         core::FileSystem& fs = core::default_file_system());

// The header of the shard at `path`, after checking the magic, the version,
// the header JSON and its checksum, that 0 <= begin <= end <= total and
// 0 <= rank < ranks, and that the file has exactly the bytes the header
// implies. nullopt with `error` naming the file and what is wrong otherwise.
// Does not read or check the arrays (the manifest's whole-file xxh64 does).
std::optional<ShardHeader> read_shard_header(const std::string& path, std::string& error);

// Reads `array`'s floats [from, to) (absolute indices, within the header's
// [begin, end)) from the shard at `path` into `out` (to - from floats).
// `header` is what read_shard_header returned; the file is checked again to
// still match it. False with `error` on a bad range or a failed read.
bool read_shard_range(const std::string& path, const ShardHeader& header, ShardArray array,
                      int64_t from, int64_t to, float* out, std::string& error);

// Where one shard file is and the range [begin, end) it holds.
struct ShardLocation {
  std::string path;
  int64_t begin = 0;
  int64_t end = 0;
};

// Reads `array`'s floats [from, to) into `out` (to - from floats), from
// whichever of `shards` (in any order) hold them: how a checkpoint is resumed
// on a different number of ranks. Each overlapping shard's header is read and
// validated once, and must agree with its location. False with `error` when
// a shard is bad or unreadable, or naming the first index no shard holds.
bool read_flat_range(const std::vector<ShardLocation>& shards, ShardArray array, int64_t from,
                     int64_t to, float* out, std::string& error);

}  // namespace dslaunch::core
