#include "core/checkpoint/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string_view>

#include <fmt/format.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "core/file_system.h"
#include "core/json_input.h"
#include "core/checkpoint/file_checksum.h"

namespace dslaunch::core {
namespace {

static_assert(std::endian::native == std::endian::little,
              "shard arrays are written and read as little-endian floats in place");

constexpr int64_t kPreambleBytes = 16;  // magic, version, header length
constexpr int64_t kDataAlignment = 64;
constexpr int64_t kMaxHeaderBytes = 64 << 10;
// Blocks small enough that each is still in cache when write() copies it
// after hashing, large enough that system calls cost nothing.
constexpr size_t kWriteBlockBytes = 4 << 20;

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int64_t data_offset(int64_t header_bytes) {
  const int64_t unpadded = kPreambleBytes + header_bytes;
  return (unpadded + kDataAlignment - 1) / kDataAlignment * kDataAlignment;
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
  // Three float arrays must fit in a file size.
  if (header.end - header.begin > (INT64_MAX - data_offset(kMaxHeaderBytes)) / 12) {
    return fmt::format("range [{}, {}) is too large for a file", header.begin, header.end);
  }
  return "";
}

nlohmann::json header_fields(const ShardHeader& header) {
  return {{"step", header.step},
          {"rank", header.rank},
          {"ranks", header.ranks},
          {"total_parameters", header.total_parameters},
          {"begin", header.begin},
          {"end", header.end},
          {"optimizer_step", header.optimizer_step}};
}

std::string header_checksum(const nlohmann::json& fields) {
  const std::string text = fields.dump();
  return xxh64_hex(XXH64(text.data(), text.size(), 0));
}

// Everything before the arrays: preamble, header JSON and padding.
std::string shard_prefix(const ShardHeader& header) {
  nlohmann::json fields = header_fields(header);
  fields["header_xxh64"] = header_checksum(fields);
  const std::string text = fields.dump();
  const uint32_t version = kShardFormatVersion;
  const uint32_t length = static_cast<uint32_t>(text.size());
  std::string prefix(kShardMagic, sizeof kShardMagic);
  prefix.append(reinterpret_cast<const char*>(&version), sizeof version);
  prefix.append(reinterpret_cast<const char*>(&length), sizeof length);
  prefix += text;
  prefix.resize(static_cast<size_t>(data_offset(static_cast<int64_t>(text.size()))), '\0');
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

// "" when all `bytes` were read, else why not.
std::string read_exactly(int fd, char* out, int64_t bytes, int64_t offset) {
  while (bytes > 0) {
    const ssize_t got = ::pread(fd, out, static_cast<size_t>(std::min<int64_t>(bytes, 1 << 30)),
                                static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return std::strerror(errno);
    if (got == 0) return fmt::format("the file ends {} bytes early", bytes);
    out += got;
    bytes -= got;
    offset += got;
  }
  return "";
}

// A shard file opened and its header validated.
struct OpenShard {
  std::unique_ptr<FileDescriptor> fd;
  ShardHeader header;
  int64_t data_offset = 0;
};

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

std::optional<ShardHeader> parse_header(const std::string& text, std::string& problem) {
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
  if (const std::string inconsistent = header_problem(header); !inconsistent.empty()) {
    problem = "its header's " + inconsistent;
    return std::nullopt;
  }
  return header;
}

bool open_shard(const std::string& path, OpenShard& shard, std::string& error) {
  shard.fd = std::make_unique<FileDescriptor>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  const int fd = shard.fd->get();
  struct stat info;
  if (fd < 0 || ::fstat(fd, &info) != 0) {
    error = fmt::format("cannot open checkpoint shard '{}': {}", path, std::strerror(errno));
    return false;
  }
  const int64_t file_bytes = info.st_size;
  const auto bad = [&](const std::string& problem) {
    error = fmt::format("'{}' is not a valid checkpoint shard: {}", path, problem);
    return false;
  };
  char preamble[kPreambleBytes];
  if (file_bytes < kPreambleBytes) {
    return bad(
        fmt::format("it has {} bytes, fewer than the {} of magic, version and header "
                    "length",
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
  if (version != kShardFormatVersion) {
    return bad(fmt::format("format version {} is not supported; this build reads version {}",
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
  const std::optional<ShardHeader> header = parse_header(text, problem);
  if (!header) return bad(problem);
  shard.header = *header;
  shard.data_offset = data_offset(header_bytes);
  const int64_t expected = shard.data_offset + 12 * (header->end - header->begin);
  if (file_bytes != expected) {
    return bad(
        fmt::format("its header (parameters [{}, {})) implies {} bytes, but the file has "
                    "{} ({})",
                    header->begin, header->end, expected, file_bytes,
                    file_bytes < expected ? "truncated" : "extended"));
  }
  return true;
}

bool read_open_range(const std::string& path, const OpenShard& shard, ShardArray array,
                     int64_t from, int64_t to, float* out, std::string& error) {
  const int64_t count = shard.header.end - shard.header.begin;
  const int64_t first = static_cast<int64_t>(array) * count + (from - shard.header.begin);
  const std::string failed = read_exactly(shard.fd->get(), reinterpret_cast<char*>(out),
                                          (to - from) * 4, shard.data_offset + first * 4);
  if (!failed.empty()) {
    error = fmt::format("cannot read checkpoint shard '{}': {}", path, failed);
    return false;
  }
  return true;
}

}  // namespace

WrittenShard write_shard(const std::string& path, const ShardHeader& header,
                         const ShardArrays& arrays, core::FileSystem& fs) {
  WrittenShard result;
  if (const std::string problem = header_problem(header); !problem.empty()) {
    result.error = fmt::format("cannot write checkpoint shard '{}': {}", path, problem);
    return result;
  }
  const std::string temporary = path + ".tmp";
  const auto fail = [&](int error_number) {
    (void)fs.remove(temporary);
    result.error =
        fmt::format("cannot write checkpoint shard '{}': {}", path, std::strerror(error_number));
    return result;
  };
  // A temporary file left by a writer that died is removed, so that the new
  // one is created afresh (never through a link planted at its name).
  if (const int failure = fs.remove(temporary); failure != 0 && failure != ENOENT) {
    return fail(failure);
  }
  std::unique_ptr<core::WritableFile> file;
  if (const int failure = fs.create_file(temporary, 0600, file)) return fail(failure);

  std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> hash(XXH64_createState(),
                                                                  XXH64_freeState);
  XXH64_reset(hash.get(), 0);
  const std::string prefix = shard_prefix(header);
  const size_t array_bytes = static_cast<size_t>(header.end - header.begin) * sizeof(float);
  const auto bytes = [](const float* array) { return reinterpret_cast<const char*>(array); };
  int failure = write_hashed(*file, hash.get(), prefix.data(), prefix.size());
  if (failure == 0) failure = write_hashed(*file, hash.get(), bytes(arrays.params), array_bytes);
  if (failure == 0) failure = write_hashed(*file, hash.get(), bytes(arrays.adam_m), array_bytes);
  if (failure == 0) failure = write_hashed(*file, hash.get(), bytes(arrays.adam_v), array_bytes);
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
        "checkpoint shard '{}' is written but its directory cannot be "
        "synced: {}",
        path, std::strerror(sync_failure));
    return result;
  }
  result.size_bytes = static_cast<int64_t>(prefix.size() + 3 * array_bytes);
  result.xxh64 = xxh64_hex(XXH64_digest(hash.get()));
  return result;
}

std::optional<ShardHeader> read_shard_header(const std::string& path, std::string& error) {
  OpenShard shard;
  if (!open_shard(path, shard, error)) return std::nullopt;
  return shard.header;
}

bool read_shard_range(const std::string& path, const ShardHeader& header, ShardArray array,
                      int64_t from, int64_t to, float* out, std::string& error) {
  if (from < header.begin || from > to || to > header.end) {
    error = fmt::format("cannot read [{}, {}) from checkpoint shard '{}': it holds [{}, {})", from,
                        to, path, header.begin, header.end);
    return false;
  }
  OpenShard shard;
  if (!open_shard(path, shard, error)) return false;
  if (shard.header.begin != header.begin || shard.header.end != header.end) {
    error = fmt::format("checkpoint shard '{}' now holds [{}, {}), not the [{}, {}) read before",
                        path, shard.header.begin, shard.header.end, header.begin, header.end);
    return false;
  }
  return read_open_range(path, shard, array, from, to, out, error);
}

bool read_flat_range(const std::vector<ShardLocation>& shards, ShardArray array, int64_t from,
                     int64_t to, float* out, std::string& error) {
  if (from < 0 || from > to) {
    error = fmt::format("cannot read [{}, {}) from a checkpoint: not a range", from, to);
    return false;
  }
  std::vector<const ShardLocation*> by_begin;
  for (const ShardLocation& shard : shards) by_begin.push_back(&shard);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const ShardLocation* a, const ShardLocation* b) { return a->begin < b->begin; });
  // Everything before `next` has been read.
  int64_t next = from;
  for (const ShardLocation* location : by_begin) {
    if (next == to) break;
    if (location->end <= next) continue;
    if (location->begin > next) break;
    OpenShard shard;
    if (!open_shard(location->path, shard, error)) return false;
    if (shard.header.begin != location->begin || shard.header.end != location->end) {
      error = fmt::format(
          "checkpoint shard '{}' holds [{}, {}), but the checkpoint lists it as "
          "holding [{}, {})",
          location->path, shard.header.begin, shard.header.end, location->begin, location->end);
      return false;
    }
    const int64_t stop = std::min(location->end, to);
    if (!read_open_range(location->path, shard, array, next, stop, out + (next - from), error)) {
      return false;
    }
    next = stop;
  }
  if (next != to) {
    error = fmt::format("cannot read [{}, {}) from a checkpoint: no shard holds index {}", from, to,
                        next);
    return false;
  }
  return true;
}

}  // namespace dslaunch::core
