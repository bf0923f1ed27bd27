#include "core/checkpoint/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "core/checkpoint/file_checksum.h"
#include "core/checkpoint/open_shard.h"
#include "core/errno_status.h"
#include "core/file_system.h"
#include "core/json_input.h"

namespace dslaunch::core {

using shard_internal::FileDescriptor;
using shard_internal::OpenShard;
using shard_internal::read_exactly;

namespace {

static_assert(std::endian::native == std::endian::little,
              "shard arrays are written and read as little-endian values in place");

constexpr int64_t kPreambleBytes = 16;  // magic, version, header length
constexpr int64_t kDataAlignment = 64;
// A format-2 header lists every tensor: about 150 bytes each, 600 tensors for
// a 48-block GPT-2; the cap keeps a damaged length from sizing a huge read.
constexpr int64_t kMaxHeaderBytes = 16 << 20;
constexpr int64_t kMaxArrays = 16;
constexpr size_t kMaxLayoutTensors = 1 << 20;
constexpr int kMaxDims = 8;
// A rank's own state is small next to the layout's arrays (an error-feedback
// buffer is one rank's chunk of the gradient); the caps keep a damaged
// header from sizing a huge read and every size in an int64_t.
constexpr size_t kMaxRankStateArrays = 64;
constexpr size_t kMaxRankStateScalars = 1024;
constexpr int64_t kMaxRankStateElements = int64_t{1} << 40;
constexpr int64_t kMaxRankStateBytes =
    static_cast<int64_t>(kMaxRankStateArrays) * (kDataAlignment + kMaxRankStateElements * 8);
// Blocks small enough that each is still in cache when write() copies it
// after hashing, large enough that system calls cost nothing.
constexpr size_t kWriteBlockBytes = 4 << 20;

int64_t align_up(int64_t offset) {
  return (offset + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

// Where each array starts in a shard's file, and the file's size.
struct ShardOffsets {
  std::vector<int64_t> arrays;       // one per header.arrays
  std::vector<int64_t> rank_arrays;  // one per header.rank_state->arrays
  int64_t file_bytes = 0;
};

// The offsets from the header's length. Format 1 packs its three arrays with
// no gap; format 2 starts each array, rank-state ones included, at a
// multiple of 64 bytes.
ShardOffsets shard_offsets(const ShardHeader& header, int64_t header_bytes) {
  ShardOffsets offsets;
  int64_t offset = align_up(kPreambleBytes + header_bytes);
  const int64_t count = header.end - header.begin;
  for (const ShardArrayInfo& array : header.arrays) {
    if (header.format_version >= 2) offset = align_up(offset);
    offsets.arrays.push_back(offset);
    offset += count * dtype_bytes(array.dtype);
  }
  if (header.rank_state) {
    for (const RankStateArray& array : header.rank_state->arrays) {
      offset = align_up(offset);
      offsets.rank_arrays.push_back(offset);
      offset += array.count * dtype_bytes(array.dtype);
    }
  }
  offsets.file_bytes = offset;
  return offsets;
}

// A scalar's or a rank-state array's name: [a-z0-9_]+.
bool valid_state_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// What is wrong with a rank state, or "".
std::string rank_state_problem(const RankState& state) {
  const auto place_problem = [](const char* what, int rank, int ranks) {
    return ranks < 1 || rank < 0 || rank >= ranks
               ? fmt::format("rank_state's {} {} of {} is not 0 <= rank < ranks", what, rank, ranks)
               : std::string();
  };
  for (std::string problem : {place_problem("data_rank", state.data_rank, state.data_ranks),
                              place_problem("tensor_rank", state.tensor_rank, state.tensor_ranks),
                              place_problem("stage", state.stage, state.stages)}) {
    if (!problem.empty()) return problem;
  }
  if (state.scalars.size() > kMaxRankStateScalars) {
    return fmt::format("rank_state has {} scalars (at most {})", state.scalars.size(),
                       kMaxRankStateScalars);
  }
  for (const auto& [name, value] : state.scalars) {
    if (!valid_state_name(name)) {
      return fmt::format("rank_state's scalar \"{}\" is not named with [a-z0-9_]+", name);
    }
    // JSON has no NaN or infinity: nlohmann would write null.
    if (!std::isfinite(value)) {
      return fmt::format("rank_state's scalar {} is {}, not a finite number", name, value);
    }
  }
  if (state.arrays.size() > kMaxRankStateArrays) {
    return fmt::format("rank_state has {} arrays (at most {})", state.arrays.size(),
                       kMaxRankStateArrays);
  }
  std::set<std::string_view> names;
  for (const RankStateArray& array : state.arrays) {
    if (!valid_state_name(array.name)) {
      return fmt::format("rank_state's array \"{}\" is not named with [a-z0-9_]+", array.name);
    }
    if (!names.insert(array.name).second) {
      return fmt::format("rank_state names array {} twice", array.name);
    }
    if (array.dtype != DType::kF32 && array.dtype != DType::kF64) {
      return fmt::format("rank_state's array {} is {} (fp32 or fp64 only)", array.name,
                         dtype_name(array.dtype));
    }
    if (array.count < 0 || array.count > kMaxRankStateElements) {
      return fmt::format("rank_state's array {} has {} elements (0 to {})", array.name, array.count,
                         kMaxRankStateElements);
    }
  }
  return "";
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

// What is wrong with one layout tensor, or "".
std::string layout_tensor_problem(const LayoutTensor& t) {
  const auto dims_ok = [](const std::vector<int64_t>& dims) {
    if (dims.empty() || dims.size() > kMaxDims) return false;
    int64_t n = 1;
    for (const int64_t d : dims) {
      if (d < 1 || d > INT64_MAX / 16 / n) return false;
      n *= d;
    }
    return true;
  };
  if (!dims_ok(t.global_shape)) {
    return fmt::format("tensor {} has the shape [{}]", t.name, fmt::join(t.global_shape, ", "));
  }
  const TensorSplit& split = t.split;
  if (split.parts < 1 || split.index < 0 || split.index >= split.parts) {
    return fmt::format("tensor {} is slice {} of {}", t.name, split.index, split.parts);
  }
  if (split.parts > 1) {
    if (!dims_ok(split.view) || product(split.view) != product(t.global_shape) ||
        split.dim < 0 || split.dim >= static_cast<int>(split.view.size()) ||
        split.view[split.dim] % split.parts != 0) {
      return fmt::format("tensor {} is cut along dimension {} of [{}] into {} parts", t.name,
                         split.dim, fmt::join(split.view, ", "), split.parts);
    }
  }
  if (t.numel != product(t.global_shape) / split.parts) {
    return fmt::format("tensor {} holds {} elements, not 1/{} of its {}", t.name, t.numel,
                       split.parts, product(t.global_shape));
  }
  return "";
}

// What is wrong with the header's fields, or "" when they are consistent.
std::string header_problem(const ShardHeader& header) {
  if (header.ranks < 1 || header.rank < 0 || header.rank >= header.ranks) {
    return fmt::format("rank {} of {} ranks is not 0 <= rank < ranks", header.rank, header.ranks);
  }
  if (header.begin < 0 || header.begin > header.end || header.end > header.total_parameters) {
    return fmt::format("range [{}, {}) is not within [0, {}) parameters", header.begin, header.end,
                       header.total_parameters);
  }
  if (header.arrays.empty() || static_cast<int64_t>(header.arrays.size()) > kMaxArrays) {
    return fmt::format("it lists {} arrays (1 to {})", header.arrays.size(), kMaxArrays);
  }
  std::set<StateKind> kinds;
  for (const ShardArrayInfo& array : header.arrays) {
    if (!kinds.insert(array.kind).second) {
      return fmt::format("it lists {} twice", state_kind_name(array.kind));
    }
  }
  // Every array must fit in a file size, rank-state arrays after them.
  if (header.end - header.begin > (INT64_MAX - align_up(kPreambleBytes + kMaxHeaderBytes) -
                                   kMaxArrays * kDataAlignment - kMaxRankStateBytes) /
                                      8 / kMaxArrays) {
    return fmt::format("range [{}, {}) is too large for a file", header.begin, header.end);
  }
  if (header.rank_state) {
    if (header.format_version < 2) return "rank_state, which format 1 does not have";
    if (std::string problem = rank_state_problem(*header.rank_state); !problem.empty()) {
      return problem;
    }
  }
  if (header.format_version < 2) return "";
  if (header.layout.empty() || header.layout.size() > kMaxLayoutTensors) {
    return fmt::format("its layout lists {} tensors", header.layout.size());
  }
  int64_t next = 0;
  std::set<std::string_view> names;
  for (const LayoutTensor& tensor : header.layout) {
    if (std::string problem = layout_tensor_problem(tensor); !problem.empty()) return problem;
    if (!names.insert(tensor.name).second) {
      return fmt::format("its layout names tensor {} twice", tensor.name);
    }
    if (tensor.offset != next) {
      return fmt::format("tensor {} starts at {}, not at {} where the one before it ends",
                         tensor.name, tensor.offset, next);
    }
    next += tensor.numel;
  }
  if (next != header.total_parameters) {
    return fmt::format("its layout's tensors hold {} elements, not the {} of total_parameters",
                       next, header.total_parameters);
  }
  return "";
}

nlohmann::json layout_json(const std::vector<LayoutTensor>& layout) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const LayoutTensor& t : layout) {
    tensors.push_back({{"name", t.name},
                       {"global_shape", t.global_shape},
                       {"view", t.split.view},
                       {"dim", t.split.dim},
                       {"index", t.split.index},
                       {"parts", t.split.parts},
                       {"offset", t.offset},
                       {"numel", t.numel}});
  }
  return tensors;
}

nlohmann::json header_fields(const ShardHeader& header) {
  nlohmann::json fields = {{"step", header.step},
                           {"rank", header.rank},
                           {"ranks", header.ranks},
                           {"total_parameters", header.total_parameters},
                           {"begin", header.begin},
                           {"end", header.end},
                           {"optimizer_step", header.optimizer_step}};
  if (header.loss_scaler) {
    const LossScalerState& scaler = *header.loss_scaler;
    fields["loss_scaler"] = {{"scale", scaler.scale},
                             {"iteration", scaler.iteration},
                             {"last_overflow_iteration", scaler.last_overflow_iteration},
                             {"hysteresis_left", scaler.hysteresis_left},
                             {"skipped_steps", scaler.skipped_steps}};
  }
  if (header.format_version >= 2) {
    nlohmann::json arrays = nlohmann::json::array();
    for (const ShardArrayInfo& array : header.arrays) {
      arrays.push_back({{"kind", state_kind_name(array.kind)}, {"dtype", dtype_name(array.dtype)}});
    }
    fields["arrays"] = std::move(arrays);
    fields["layout"] = layout_json(header.layout);
  }
  // Only when set, so that a shard without one is byte for byte what it was
  // before rank state existed.
  if (header.rank_state) {
    const RankState& state = *header.rank_state;
    nlohmann::json arrays = nlohmann::json::array();
    for (const RankStateArray& array : state.arrays) {
      arrays.push_back(
          {{"name", array.name}, {"dtype", dtype_name(array.dtype)}, {"count", array.count}});
    }
    nlohmann::json scalars = nlohmann::json::object();
    for (const auto& [name, value] : state.scalars) scalars[name] = value;
    fields["rank_state"] = {{"data_rank", state.data_rank},
                            {"data_ranks", state.data_ranks},
                            {"tensor_rank", state.tensor_rank},
                            {"tensor_ranks", state.tensor_ranks},
                            {"stage", state.stage},
                            {"stages", state.stages},
                            {"scalars", std::move(scalars)},
                            {"arrays", std::move(arrays)}};
  }
  return fields;
}

std::string header_checksum(const nlohmann::json& fields) {
  const std::string text = fields.dump();
  return xxh64_hex(XXH64(text.data(), text.size(), 0));
}

// The preamble and the header JSON (the padding after it is written with
// the arrays).
std::string shard_prefix(const ShardHeader& header) {
  nlohmann::json fields = header_fields(header);
  fields["header_xxh64"] = header_checksum(fields);
  const std::string text = fields.dump();
  const uint32_t version = header.format_version;
  const uint32_t length = static_cast<uint32_t>(text.size());
  std::string prefix(kShardMagic, sizeof kShardMagic);
  prefix.append(reinterpret_cast<const char*>(&version), sizeof version);
  prefix.append(reinterpret_cast<const char*>(&length), sizeof length);
  prefix += text;
  return prefix;
}

// Writes every byte (going on after short writes) and adds it to the hash;
// 0 or the errno value it failed with.
int write_hashed(core::WritableFile& file, XXH64_state_t* hash, const char* data, size_t size) {
  while (size > 0) {
    const size_t block = std::min(size, kWriteBlockBytes);
    XXH64_update(hash, data, block);
    if (const int failure = file.write_all(std::string_view(data, block))) return failure;
    data += block;
    size -= block;
  }
  return 0;
}

// Readers of the header's JSON fields: false with `problem` set.
bool header_int(const nlohmann::json& fields, const char* name, int64_t& value,
                std::string& problem) {
  const auto found = fields.find(name);
  if (found == fields.end() || !found->is_number_integer()) {
    problem = fmt::format("its header has no integer \"{}\"", name);
    return false;
  }
  value = found->get<int64_t>();
  return true;
}

bool int_list(const nlohmann::json& fields, const char* name, std::vector<int64_t>& out,
              std::string& problem) {
  const auto found = fields.find(name);
  if (found == fields.end() || !found->is_array() || found->size() > kMaxDims) {
    problem = fmt::format("a layout tensor has no list \"{}\" of at most {} integers", name,
                          kMaxDims);
    return false;
  }
  out.clear();
  for (const nlohmann::json& value : *found) {
    if (!value.is_number_integer()) {
      problem = fmt::format("a layout tensor's \"{}\" holds a non-integer", name);
      return false;
    }
    out.push_back(value.get<int64_t>());
  }
  return true;
}

bool small_int(const nlohmann::json& fields, const char* name, int& out, std::string& problem) {
  int64_t value = 0;
  if (!header_int(fields, name, value, problem)) return false;
  if (value < INT_MIN || value > INT_MAX) {
    problem = fmt::format("its header's \"{}\" is {}", name, value);
    return false;
  }
  out = static_cast<int>(value);
  return true;
}

bool parse_layout(const nlohmann::json& fields, std::vector<LayoutTensor>& layout,
                  std::string& problem) {
  const auto found = fields.find("layout");
  if (found == fields.end() || !found->is_array()) {
    problem = "its header has no \"layout\" list";
    return false;
  }
  for (const nlohmann::json& entry : *found) {
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string()) {
      problem = "a layout tensor has no \"name\"";
      return false;
    }
    LayoutTensor tensor;
    tensor.name = entry["name"].get<std::string>();
    if (!int_list(entry, "global_shape", tensor.global_shape, problem) ||
        !int_list(entry, "view", tensor.split.view, problem) ||
        !small_int(entry, "dim", tensor.split.dim, problem) ||
        !small_int(entry, "index", tensor.split.index, problem) ||
        !small_int(entry, "parts", tensor.split.parts, problem) ||
        !header_int(entry, "offset", tensor.offset, problem) ||
        !header_int(entry, "numel", tensor.numel, problem)) {
      problem += fmt::format(" (tensor {})", tensor.name);
      return false;
    }
    layout.push_back(std::move(tensor));
  }
  return true;
}

bool parse_arrays(const nlohmann::json& fields, std::vector<ShardArrayInfo>& arrays,
                  std::string& problem) {
  const auto found = fields.find("arrays");
  if (found == fields.end() || !found->is_array()) {
    problem = "its header has no \"arrays\" list";
    return false;
  }
  for (const nlohmann::json& entry : *found) {
    const auto kind = entry.is_object() && entry.contains("kind") && entry["kind"].is_string()
                          ? state_kind_from_name(entry["kind"].get<std::string>())
                          : std::nullopt;
    const auto dtype = entry.is_object() && entry.contains("dtype") && entry["dtype"].is_string()
                           ? dtype_from_name(entry["dtype"].get<std::string>())
                           : std::nullopt;
    if (!kind || !dtype) {
      problem = fmt::format("its header's array {} is not a known kind and dtype",
                            json_excerpt(entry, 80));
      return false;
    }
    arrays.push_back({*kind, *dtype});
  }
  return true;
}

// The header's "rank_state"; its values are checked by rank_state_problem.
bool parse_rank_state(const nlohmann::json& fields, RankState& state, std::string& problem) {
  if (!fields.is_object()) {
    problem = "its header's \"rank_state\" is not an object";
    return false;
  }
  if (!small_int(fields, "data_rank", state.data_rank, problem) ||
      !small_int(fields, "data_ranks", state.data_ranks, problem) ||
      !small_int(fields, "tensor_rank", state.tensor_rank, problem) ||
      !small_int(fields, "tensor_ranks", state.tensor_ranks, problem) ||
      !small_int(fields, "stage", state.stage, problem) ||
      !small_int(fields, "stages", state.stages, problem)) {
    problem += " (in rank_state)";
    return false;
  }
  const auto scalars = fields.find("scalars");
  if (scalars == fields.end() || !scalars->is_object()) {
    problem = "its header's rank_state has no \"scalars\" object";
    return false;
  }
  for (const auto& [name, value] : scalars->items()) {
    if (!value.is_number()) {
      problem = fmt::format("its header's rank_state scalar {} is {}, not a number",
                            json_excerpt(name, 80), json_excerpt(value, 80));
      return false;
    }
    state.scalars[name] = value.get<double>();
  }
  const auto arrays = fields.find("arrays");
  if (arrays == fields.end() || !arrays->is_array()) {
    problem = "its header's rank_state has no \"arrays\" list";
    return false;
  }
  for (const nlohmann::json& entry : *arrays) {
    const auto dtype = entry.is_object() && entry.contains("dtype") && entry["dtype"].is_string()
                           ? dtype_from_name(entry["dtype"].get<std::string>())
                           : std::nullopt;
    RankStateArray array;
    if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !dtype ||
        !header_int(entry, "count", array.count, problem)) {
      problem = fmt::format("its header's rank_state array {} has no name, known dtype and count",
                            json_excerpt(entry, 80));
      return false;
    }
    array.name = entry["name"].get<std::string>();
    array.dtype = *dtype;
    state.arrays.push_back(std::move(array));
  }
  return true;
}

std::optional<ShardHeader> parse_header(const std::string& text, uint32_t version,
                                        std::string& problem) {
  std::string parse_error;
  std::optional<nlohmann::json> parsed = core::parse_untrusted_json(text, parse_error);
  if (!parsed) {
    problem = "its header is not valid JSON: " + parse_error;
    return std::nullopt;
  }
  nlohmann::json& fields = *parsed;
  if (!fields.is_object()) {
    problem = "its header is not a JSON object";
    return std::nullopt;
  }
  const auto checksum = fields.find("header_xxh64");
  if (checksum == fields.end() || !checksum->is_string()) {
    problem = "its header has no \"header_xxh64\" checksum";
    return std::nullopt;
  }
  const std::string written = checksum->get<std::string>();
  fields.erase(checksum);
  if (const std::string computed = header_checksum(fields); computed != written) {
    problem = fmt::format("its header's checksum is {}, but the header hashes to {} (damaged)",
                          written, computed);
    return std::nullopt;
  }
  ShardHeader header;
  header.format_version = version;
  int64_t rank = 0;
  int64_t ranks = 0;
  if (!header_int(fields, "step", header.step, problem) ||
      !header_int(fields, "rank", rank, problem) || !header_int(fields, "ranks", ranks, problem) ||
      !header_int(fields, "total_parameters", header.total_parameters, problem) ||
      !header_int(fields, "begin", header.begin, problem) ||
      !header_int(fields, "end", header.end, problem) ||
      !header_int(fields, "optimizer_step", header.optimizer_step, problem)) {
    return std::nullopt;
  }
  if (ranks < 1 || ranks > INT_MAX || rank < 0 || rank >= ranks) {
    problem = fmt::format("its header's rank {} of {} ranks is not 0 <= rank < ranks", rank, ranks);
    return std::nullopt;
  }
  header.rank = static_cast<int>(rank);
  header.ranks = static_cast<int>(ranks);
  if (version == 1) {
    header.arrays = {{StateKind::kParameter, DType::kF32},
                     {StateKind::kAdamM, DType::kF32},
                     {StateKind::kAdamV, DType::kF32}};
  } else if (!parse_arrays(fields, header.arrays, problem) ||
             !parse_layout(fields, header.layout, problem)) {
    return std::nullopt;
  }
  if (const auto scaler = fields.find("loss_scaler"); scaler != fields.end()) {
    LossScalerState state;
    const auto scale = scaler->find("scale");
    if (scale == scaler->end() || !scale->is_number() || !(scale->get<double>() > 0) ||
        !std::isfinite(scale->get<double>())) {
      problem = "its header's loss_scaler has no positive, finite \"scale\"";
      return std::nullopt;
    }
    state.scale = scale->get<double>();
    if (!header_int(*scaler, "iteration", state.iteration, problem) ||
        !header_int(*scaler, "last_overflow_iteration", state.last_overflow_iteration, problem) ||
        !header_int(*scaler, "hysteresis_left", state.hysteresis_left, problem) ||
        !header_int(*scaler, "skipped_steps", state.skipped_steps, problem)) {
      return std::nullopt;
    }
    // What a scaler can have reached after `iteration` steps.
    if (state.iteration < 0 || state.last_overflow_iteration < -1 ||
        state.last_overflow_iteration >= state.iteration ||
        state.hysteresis_left < 0 || state.skipped_steps < 0 ||
        state.skipped_steps > state.iteration) {
      problem = fmt::format(
          "its header's loss_scaler (iteration {}, last overflow {}, hysteresis {}, skipped {}) "
          "is not one a run can reach",
          state.iteration, state.last_overflow_iteration, state.hysteresis_left,
          state.skipped_steps);
      return std::nullopt;
    }
    header.loss_scaler = state;
  }
  if (const auto state = fields.find("rank_state"); state != fields.end()) {
    header.rank_state.emplace();
    if (!parse_rank_state(*state, *header.rank_state, problem)) return std::nullopt;
  }
  if (const std::string inconsistent = header_problem(header); !inconsistent.empty()) {
    problem = "its header's " + inconsistent;
    return std::nullopt;
  }
  return header;
}

}  // namespace

namespace shard_internal {

FileDescriptor::~FileDescriptor() {
  if (fd_ >= 0) ::close(fd_);
}

std::string read_exactly(int fd, char* out, int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)),
                                static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return core::errno_text(errno);
    if (got == 0) return fmt::format("the file ends {} bytes early", bytes);
    out += got;
    bytes -= got;
    offset += got;
  }
  return "";
}

bool open_shard(const std::string& path, OpenShard& shard, std::string& error) {
  shard.fd = std::make_unique<FileDescriptor>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = shard.fd->get();
  struct stat info;
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    error = fmt::format("cannot open checkpoint shard '{}': {}", path, core::errno_text(errno));
    return false;
  }
  const int64_t file_bytes = info.st_size;
  const auto bad = [&](const std::string& problem) {
    error = fmt::format("'{}' is not a valid checkpoint shard: {}", path, problem);
    return false;
  };
  char preamble[kPreambleBytes];
  if (file_bytes < kPreambleBytes) {
    return bad(fmt::format("it has {} bytes, fewer than the {} of magic, version and header length",
                           file_bytes, kPreambleBytes));
  }
  if (std::string failed = read_exactly(fd, preamble, kPreambleBytes, 0); !failed.empty()) {
    error = fmt::format("cannot read checkpoint shard '{}': {}", path, failed);
    return false;
  }
  if (std::memcmp(preamble, kShardMagic, sizeof kShardMagic) != 0) {
    return bad("it does not start with the magic \"DSLSHRD1\"");
  }
  uint32_t version = 0;
  uint32_t header_bytes = 0;
  std::memcpy(&version, preamble + 8, sizeof version);
  std::memcpy(&header_bytes, preamble + 12, sizeof header_bytes);
  if (version < 1 || version > kShardFormatVersion) {
    return bad(fmt::format("format version {} is not supported; this build reads versions 1 to {}",
                           version, kShardFormatVersion));
  }
  if (header_bytes > kMaxHeaderBytes || header_bytes > file_bytes - kPreambleBytes) {
    return bad(
        fmt::format("its header length {} does not fit in its {} bytes", header_bytes, file_bytes));
  }
  std::string text(header_bytes, '\0');
  if (std::string failed = read_exactly(fd, text.data(), header_bytes, kPreambleBytes);
      !failed.empty()) {
    error = fmt::format("cannot read checkpoint shard '{}': {}", path, failed);
    return false;
  }
  std::string problem;
  std::optional<ShardHeader> header = parse_header(text, version, problem);
  if (!header) return bad(problem);
  ShardOffsets offsets = shard_offsets(*header, header_bytes);
  const int64_t expected = offsets.file_bytes;
  if (file_bytes != expected) {
    const std::string rank_arrays =
        header->rank_state
            ? fmt::format(" and {} rank-state arrays", header->rank_state->arrays.size())
            : "";
    return bad(fmt::format(
        "its header (elements [{}, {}) of {} arrays{}) implies {} bytes, but the file has {} ({})",
        header->begin, header->end, header->arrays.size(), rank_arrays, expected, file_bytes,
        file_bytes < expected ? "truncated" : "extended"));
  }
  shard.array_offsets = std::move(offsets.arrays);
  shard.header = std::move(*header);
  return true;
}

}  // namespace shard_internal

std::string_view state_kind_name(StateKind kind) {
  switch (kind) {
    case StateKind::kParameter:
      return "param";
    case StateKind::kMaster:
      return "master";
    case StateKind::kAdamM:
      return "adam_m";
    case StateKind::kAdamV:
      return "adam_v";
    case StateKind::kErrorFeedback:
      return "error_feedback";
    case StateKind::kFreshVariance:
      return "fresh_v";
  }
  return "unknown";
}

std::optional<StateKind> state_kind_from_name(std::string_view name) {
  for (const StateKind kind :
       {StateKind::kParameter, StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV,
        StateKind::kErrorFeedback, StateKind::kFreshVariance}) {
    if (state_kind_name(kind) == name) return kind;
  }
  return std::nullopt;
}

std::vector<LayoutTensor> layout_of(const ParameterTable& table) {
  std::vector<LayoutTensor> layout;
  for (const TensorInfo& t : table.tensors()) {
    TensorSplit split = t.split;
    if (split.view.empty()) split.view = t.global_shape;
    layout.push_back({t.name, t.global_shape, std::move(split), t.offset, t.numel});
  }
  return layout;
}

WrittenShard write_shard(const std::string& path, ShardHeader header,
                         const std::vector<ShardArrayData>& arrays, core::FileSystem& fs) {
  return write_shard(path, std::move(header), arrays, {}, fs);
}

WrittenShard write_shard(const std::string& path, ShardHeader header,
                         const std::vector<ShardArrayData>& arrays,
                         const std::vector<const void*>& rank_arrays, core::FileSystem& fs) {
  WrittenShard result;
  header.arrays.clear();
  for (const ShardArrayData& array : arrays) header.arrays.push_back(array.info);
  const size_t rank_state_arrays = header.rank_state ? header.rank_state->arrays.size() : 0;
  std::string problem = header.format_version != kShardFormatVersion
                            ? fmt::format("format version {} cannot be written (only {})",
                                          header.format_version, kShardFormatVersion)
                            : header_problem(header);
  if (problem.empty() && rank_arrays.size() != rank_state_arrays) {
    problem = fmt::format("it is given {} rank-state arrays, but its rank_state lists {}",
                          rank_arrays.size(), rank_state_arrays);
  }
  if (!problem.empty()) {
    result.error = fmt::format("cannot write checkpoint shard '{}': {}", path, problem);
    return result;
  }
  const std::string temporary = path + ".tmp";
  const auto fail = [&](int error_number) {
    (void)fs.remove(temporary);
    result.error =
        fmt::format("cannot write checkpoint shard '{}': {}", path, core::errno_text(error_number));
    return result;
  };
  // A temporary file left by a writer that died is removed, so that the new
  // one is created afresh (never through a link planted at its name).
  if (const int failure = fs.remove(temporary); failure != 0 && failure != ENOENT) {
    return fail(failure);
  }
  std::unique_ptr<core::WritableFile> file;
  if (const int failure = fs.create_large_file(temporary, 0600, file)) return fail(failure);

  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> hash(XXH64_createState(),
                                                                  XXH64_freeState);
  XXH64_reset(hash.get(), 0);
  const std::string prefix = shard_prefix(header);
  const ShardOffsets offsets =
      shard_offsets(header, static_cast<int64_t>(prefix.size()) - kPreambleBytes);
  int failure = write_hashed(*file, hash.get(), prefix.data(), prefix.size());
  int64_t written = static_cast<int64_t>(prefix.size());
  const std::string padding(kDataAlignment, '\0');
  // Pads up to `offset`, then writes `bytes` of `data` there.
  const auto write_array = [&](int64_t offset, const void* data, int64_t bytes) {
    if (failure == 0) failure = write_hashed(*file, hash.get(), padding.data(), offset - written);
    if (failure == 0) {
      failure = write_hashed(*file, hash.get(), static_cast<const char*>(data),
                             static_cast<size_t>(bytes));
    }
    written = offset + bytes;
  };
  // Streamed arrays, a piece at a time through one buffer.
  std::string read_error;
  std::vector<char> piece;
  const auto write_streamed = [&](int64_t offset, const ShardArrayData& array, int64_t count) {
    constexpr int64_t kPieceBytes = int64_t{8} << 20;
    const int64_t element = dtype_bytes(array.info.dtype);
    const int64_t per_piece = std::max<int64_t>(1, kPieceBytes / element);
    piece.resize(static_cast<size_t>(std::min(count, per_piece) * element));
    if (failure == 0) failure = write_hashed(*file, hash.get(), padding.data(), offset - written);
    for (int64_t from = 0; from < count && failure == 0 && read_error.empty(); from += per_piece) {
      const int64_t n = std::min(per_piece, count - from);
      read_error = array.read(from, n, piece.data());
      if (read_error.empty()) {
        failure = write_hashed(*file, hash.get(), piece.data(), static_cast<size_t>(n * element));
      }
    }
    written = offset + count * element;
  };
  const int64_t count = header.end - header.begin;
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].read) {
      write_streamed(offsets.arrays[i], arrays[i], count);
    } else {
      write_array(offsets.arrays[i], arrays[i].data, count * dtype_bytes(arrays[i].info.dtype));
    }
  }
  if (!read_error.empty()) {
    (void)file->close();
    (void)fs.remove(temporary);
    result.error = fmt::format("cannot write checkpoint shard '{}': {}", path, read_error);
    return result;
  }
  for (size_t i = 0; i < rank_arrays.size(); ++i) {
    const RankStateArray& array = header.rank_state->arrays[i];
    write_array(offsets.rank_arrays[i], rank_arrays[i], array.count * dtype_bytes(array.dtype));
  }
  if (failure == 0) failure = file->sync();
  // close() reports late write errors (NFS does).
  const int close_failure = file->close();
  if (failure == 0) failure = close_failure;
  if (failure == 0) failure = fs.rename(temporary, path);
  if (failure != 0) return fail(failure);
  // Without this a power cut could lose the rename, though the data is synced.
  const std::string directory = core::parent_folder(path);
  if (const int sync_failure = fs.sync_folder(directory)) {
    result.error = fmt::format(
        "checkpoint shard '{}' is written but its directory cannot be synced: {}", path,
        core::errno_text(sync_failure));
    return result;
  }
  result.size_bytes = offsets.file_bytes;
  result.xxh64 = xxh64_hex(XXH64_digest(hash.get()));
  return result;
}

std::optional<ShardHeader> read_shard_header(const std::string& path, std::string& error) {
  OpenShard shard;
  if (!shard_internal::open_shard(path, shard, error)) return std::nullopt;
  return shard.header;
}

bool read_rank_state_array(const std::string& path, const ShardHeader& header,
                           std::string_view name, void* out, std::string& error) {
  const auto cannot = [&](const std::string& why) {
    error = fmt::format("cannot read rank-state array {} of checkpoint shard '{}': {}", name, path,
                        why);
    return false;
  };
  if (!header.rank_state) return cannot("its header has no rank_state");
  const std::vector<RankStateArray>& arrays = header.rank_state->arrays;
  const auto found = std::find_if(arrays.begin(), arrays.end(),
                                  [&](const RankStateArray& array) { return array.name == name; });
  if (found == arrays.end()) {
    std::vector<std::string_view> names;
    for (const RankStateArray& array : arrays) names.push_back(array.name);
    return cannot(
        fmt::format("its rank_state has no such array (it has [{}])", fmt::join(names, ", ")));
  }
  // The offsets below are computed from `header`: it must be one that
  // read_shard_header accepts, so that they cannot overflow.
  if (const std::string problem = header_problem(header); !problem.empty()) {
    return cannot("the header given is inconsistent: " + problem);
  }
  const FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  struct stat info;
  if (fd.get() < 0 || ::fstat(fd.get(), &info) != 0) return cannot(core::errno_text(errno));
  // Only the header's length is needed from the file; the rest of the
  // header is the caller's.
  char preamble[kPreambleBytes];
  if (std::string failed = read_exactly(fd.get(), preamble, kPreambleBytes, 0); !failed.empty()) {
    return cannot(failed);
  }
  uint32_t header_bytes = 0;
  std::memcpy(&header_bytes, preamble + 12, sizeof header_bytes);
  if (std::memcmp(preamble, kShardMagic, sizeof kShardMagic) != 0 ||
      header_bytes > kMaxHeaderBytes) {
    return cannot("it is no longer a checkpoint shard");
  }
  // A file replaced or cut since its header was read.
  const ShardOffsets offsets = shard_offsets(header, header_bytes);
  if (offsets.file_bytes != info.st_size) {
    return cannot(fmt::format("the file has {} bytes, not the {} its header implies", info.st_size,
                              offsets.file_bytes));
  }
  const size_t index = static_cast<size_t>(found - arrays.begin());
  if (std::string failed =
          read_exactly(fd.get(), static_cast<char*>(out), found->count * dtype_bytes(found->dtype),
                       offsets.rank_arrays[index]);
      !failed.empty()) {
    return cannot(failed);
  }
  return true;
}

}  // namespace dslaunch::core
