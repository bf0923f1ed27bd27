#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/file_system.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::core {

// What an array of a shard holds, per element of the parameter layout.
enum class StateKind {
  kParameter,      // the weights as the model reads them
  kMaster,         // fp32 master weights (16-bit training)
  kAdamM,          // Adam's first moment
  kAdamV,          // Adam's second moment
  kErrorFeedback,  // compressed communication's error compensation
  kFreshVariance,  // 1-bit LAMB's variance reconstructed after its warm-up
};
std::string_view state_kind_name(StateKind kind);  // "param", "master", "adam_m", ...
std::optional<StateKind> state_kind_from_name(std::string_view name);

// One tensor of the layout that wrote a shard: its name, its global shape,
// the slice the writing rank held (TensorSplit, as core/layout cuts it) and
// where that slice lies in the writer's flat buffer.
struct LayoutTensor {
  std::string name;
  std::vector<int64_t> global_shape;
  TensorSplit split;
  int64_t offset = 0;
  int64_t numel = 0;
};
// The layout of a parameter table, as a shard records it.
std::vector<LayoutTensor> layout_of(const ParameterTable& table);

// One rank's part of a checkpoint (`rank` of `ranks`: its place in the
// job's world). The writing rank keeps its
// model state as flat buffers laid out by its parameter table (`layout`:
// `total_parameters` elements, any tensor or pipeline slice of the model),
// and owns the elements [begin, end) of each array it saves (ZeRO's
// partition; end == begin for a rank that owns nothing). `arrays` names
// them in file order: which state, in which element type. With the layout
// in the shard, any other layout can read it (resharding).
struct ShardArrayInfo {
  StateKind kind = StateKind::kParameter;
  DType dtype = DType::kF32;
};
// fp16 training's dynamic loss scaler as the step left it (the same on every
// rank), so a resumed run scales, skips and grows exactly as it would have.
struct LossScalerState {
  double scale = 1;
  int64_t iteration = 0;  // steps seen, skipped ones included
  int64_t last_overflow_iteration = -1;
  int64_t hysteresis_left = 1;
  int64_t skipped_steps = 0;
};

// State that belongs to one rank rather than to elements of the layout
// (compressed communication's error feedback, an optimizer's counters):
// saved in the rank's shard, resumed by a rank in the same place.
struct RankStateArray {
  std::string name;           // [a-z0-9_]+, unique within the state
  DType dtype = DType::kF32;  // kF32 or kF64
  int64_t count = 0;          // elements, >= 0
};
struct RankState {
  // Whose it is: the writer's place in the data group and in the grid.
  int data_rank = 0;
  int data_ranks = 1;
  int tensor_rank = 0;
  int tensor_ranks = 1;
  int stage = 0;
  int stages = 1;
  std::map<std::string, double> scalars;  // names [a-z0-9_]+, finite values
  std::vector<RankStateArray> arrays;
};

struct ShardHeader {
  uint32_t format_version = 2;
  int64_t step = 0;
  int rank = 0;
  int ranks = 1;
  int64_t total_parameters = 0;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t optimizer_step = 0;  // steps the optimizer took (fp16's skipped steps not counted)
  std::optional<LossScalerState> loss_scaler;  // fp16 training only ("loss_scaler")
  std::vector<LayoutTensor> layout;    // empty in a format-1 file (the whole model)
  std::vector<ShardArrayInfo> arrays;  // format 1: param, adam_m, adam_v in fp32
  std::optional<RankState> rank_state;  // format 2 only, when the writer has some
};

// An array to write: end - begin elements of its dtype (may be null when that is 0).
struct ShardArrayData {
  // Instead of `data`, for state that is not in memory (swapped to NVMe):
  // fills out with elements [from, from + count) of the array, "" or what
  // failed. The writer reads it a piece at a time.
  using Reader = std::function<std::string(int64_t from, int64_t count, void* out)>;

  ShardArrayData() = default;
  ShardArrayData(ShardArrayInfo array, const void* values) : info(array), data(values) {}
  static ShardArrayData streamed(ShardArrayInfo array, Reader reader) {
    ShardArrayData streamed;
    streamed.info = array;
    streamed.read = std::move(reader);
    return streamed;
  }

  ShardArrayInfo info;
  const void* data = nullptr;
  Reader read;
};

struct WrittenShard {
  std::string error;       // empty on success
  int64_t size_bytes = 0;  // the whole file
  std::string xxh64;       // of the whole file, as xxh64_hex gives it
  bool ok() const { return error.empty(); }
};

// The file layout, all little-endian:
//   bytes 0-7    magic "DSLSHRD1" (the preamble's own version, not the format's)
//   bytes 8-11   uint32 format version: 2 (1 is read too)
//   bytes 12-15  uint32 header length H
//   16 .. 16+H   the header as JSON text: every ShardHeader field (format 2:
//                "layout", a list of {name, global_shape, view, dim, index,
//                parts, offset, numel}, "arrays", a list of {kind, dtype},
//                and, only when there is one, "rank_state": {data_rank,
//                data_ranks, tensor_rank, tensor_ranks, stage, stages,
//                scalars: {name: number}, arrays: [{name, dtype, count}]}),
//                plus "header_xxh64", the xxh64 of the JSON nlohmann dumps
//                for the other fields, so a damaged header is never taken
//                as another valid one
//   then each array, (end - begin) elements of its dtype, starting at a
//   multiple of 64 bytes (zero padding before it);
//   then each rank-state array, `count` elements of its dtype, in the order
//   the header lists them, also starting at a multiple of 64 bytes. A file
//   without "rank_state" ends with the last array, as before it existed.
// Format 1 has no layout or arrays fields: its arrays are param, adam_m and
// adam_v in fp32 over the whole model's flat layout, one after the other.
inline constexpr char kShardMagic[8] = {'D', 'S', 'L', 'S', 'H', 'R', 'D', '1'};
inline constexpr uint32_t kShardFormatVersion = 2;

// Writes the shard to `path` + ".tmp" in large blocks, hashing each byte as
// it is written, syncs it, renames it over `path` and syncs the directory.
// `header.arrays` is taken from `arrays`; the header's format_version must be
// 2. The temporary file is created new, mode 0600 (a stale one from a writer
// that died is removed first; a link planted at its name is never written
// through). On failure (a missing directory, a full disk, an I/O error, an
// inconsistent header) the result's error names `path` and the reason, and
// neither `path` nor the temporary file is left behind: `path` only ever
// holds a whole shard. Two writers must not write the same path at once
// (they would share the temporary file). Thread-safe otherwise; blocks until
// the data is on disk. Every file call goes through `fs`.
//
// `rank_arrays[i]` holds header.rank_state->arrays[i].count elements of that
// array's dtype (may be null when that is 0); there must be exactly one per
// rank-state array (none without a rank_state), and the rank state must be
// valid (see read_shard_header), else nothing is written. The overload
// without `rank_arrays` writes no rank-state arrays, so it refuses a
// rank_state that lists some.
WrittenShard write_shard(const std::string& path, ShardHeader header,
                         const std::vector<ShardArrayData>& arrays,
                         const std::vector<const void*>& rank_arrays,
                         core::FileSystem& fs = core::default_file_system());
WrittenShard write_shard(const std::string& path, ShardHeader header,
                         const std::vector<ShardArrayData>& arrays,
                         core::FileSystem& fs = core::default_file_system());

// The header of the shard at `path`, after checking the magic, the version,
// the header JSON and its checksum, that 0 <= begin <= end <= total and
// 0 <= rank < ranks, that the layout's tensors tile [0, total), that a
// rank_state is valid (each of its places 0 <= rank < ranks, names of
// [a-z0-9_]+ with no array named twice, scalars finite, arrays of kF32 or
// kF64 with a count >= 0, at most 64 arrays and 1024 scalars), and that the
// file has exactly the bytes the header implies. nullopt with `error`
// naming the file and what is wrong otherwise. Does not read or check the
// arrays (the manifest's whole-file xxh64 does).
std::optional<ShardHeader> read_shard_header(const std::string& path, std::string& error);

// Reads the rank-state array `name` (its count elements of its dtype) of the
// shard at `path`, whose header read_shard_header returned as `header`, into
// `out`. False with `error` naming the file when the header has no
// rank_state or no such array, or the file cannot be read or no longer has
// the size the header implies.
bool read_rank_state_array(const std::string& path, const ShardHeader& header,
                           std::string_view name, void* out, std::string& error);

// Where one shard file is and the range [begin, end) it holds.
struct ShardLocation {
  std::string path;
  int64_t begin = 0;
  int64_t end = 0;
};

// Reads `kind`'s elements [from, to) of the reader's flat layout `reader`
// into `out` (to - from floats), from whichever of `shards` (any order, any
// layout) hold them: each tensor's slice is assembled from the slices the
// shards hold, so a checkpoint resumes on another data-parallel size, ZeRO
// stage, or tensor and pipeline layout. A format-1 shard is read as the
// whole model laid out as `reader`, which must then hold every tensor whole.
// Each shard's header is read and validated once per call, and must agree
// with its location. False with `error` when a shard is bad or unreadable,
// holds the state in another dtype, or naming the first element of a tensor
// no shard holds.
bool read_flat_range(const std::vector<ShardLocation>& shards,
                     const std::vector<LayoutTensor>& reader, StateKind kind, int64_t from,
                     int64_t to, float* out, std::string& error);

}  // namespace dslaunch::core
