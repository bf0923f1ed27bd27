#include "launcher/controller/checkpoint_catalog.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <limits>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <xxhash.h>

#include "core/errno_status.h"
#include "core/json_input.h"
#include "core/checkpoint/file_checksum.h"
#include "launcher/controller/posix_file.h"
#include "core/atomic_file.h"

namespace dslaunch::controller {
namespace {

using nlohmann::json;

// Format 2: shards record their tensor layout and the state arrays they
// hold (core/checkpoint/shard_file.h). Format 1 (shards of the whole model's
// flat buffer) is still read.
constexpr int kOldestFormatVersion = 1;
constexpr int kFormatVersion = 2;
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLatestFile = "latest";
constexpr std::string_view kDirPrefix = "step_";

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The file's bytes, or nullopt with `error_number` set.
std::optional<std::string> read_whole_file(const std::string& path, int& error_number) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.ok()) {
    error_number = errno;
    return std::nullopt;
  }
  std::string content;
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      error_number = errno;
      return std::nullopt;
    }
    content.append(buffer, static_cast<size_t>(got));
  }
  return content;
}

// Reads the fields of one JSON object, naming each `<prefix><key>` in errors.
// After the first error every read gives a default value and ok() is false.
class FieldReader {
 public:
  FieldReader(const json& object, std::string prefix, std::string& error)
      : object_(object), prefix_(std::move(prefix)), error_(error) {}

  bool ok() const { return ok_; }
  bool has(const char* key) const { return object_.contains(key); }

  const json* get(const char* key) {
    if (!ok_) return nullptr;
    const auto found = object_.find(key);
    if (found == object_.end()) return fail(fmt::format("field '{}{}' is missing", prefix_, key));
    return &*found;
  }

  std::string string(const char* key) {
    const json* value = typed(key, value_is_string, "a string");
    return value ? value->get<std::string>() : std::string();
  }

  int64_t integer(const char* key, int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) {
    const json* value = typed(key, value_is_integer, "an integer");
    if (!value) return 0;
    const bool too_big =
        value->is_number_unsigned() && value->get<uint64_t>() > static_cast<uint64_t>(max);
    const int64_t number = too_big ? max : value->get<int64_t>();
    if (too_big || number < min || number > max) {
      fail(max == std::numeric_limits<int64_t>::max()
               ? fmt::format("field '{}{}' must be at least {}, not {}", prefix_, key, min,
                             core::json_excerpt(*value))
               : fmt::format("field '{}{}' must be in {}..{}, not {}", prefix_, key, min, max,
                             core::json_excerpt(*value)));
      return 0;
    }
    return number;
  }

  json any(const char* key) {
    const json* value = get(key);
    return value ? *value : json();
  }

  const json* array(const char* key) { return typed(key, value_is_array, "an array"); }

 private:
  static bool value_is_string(const json& value) { return value.is_string(); }
  static bool value_is_integer(const json& value) { return value.is_number_integer(); }
  static bool value_is_array(const json& value) { return value.is_array(); }

  const json* typed(const char* key, bool (*is_type)(const json&), const char* type) {
    const json* value = get(key);
    if (!value || is_type(*value)) return value;
    // A float, even 120.0, is a "number", which is not what an integer field holds.
    return fail(fmt::format(
        "field '{}{}' must be {}, not {}", prefix_, key, type,
        value->is_number_float() ? "a fractional number" : std::string(value->type_name())));
  }

  const json* fail(std::string message) {
    ok_ = false;
    error_ = std::move(message);
    return nullptr;
  }

  const json& object_;
  std::string prefix_;
  std::string& error_;
  bool ok_ = true;
};

bool is_xxh64_hex(const std::string& text) {
  return text.size() == 16 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// A shard's path must name a file inside the checkpoint folder.
bool is_inside_path(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string_view part(path.data() + start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

std::optional<ShardRecord> shard_from_json(const json& value, size_t index, std::string& error) {
  const std::string prefix = fmt::format("shards[{}].", index);
  if (!value.is_object()) {
    error = fmt::format("field 'shards[{}]' must be an object, not {}", index, value.type_name());
    return std::nullopt;
  }
  FieldReader fields(value, prefix, error);
  ShardRecord shard;
  shard.rank = static_cast<int>(fields.integer("rank", 0, std::numeric_limits<int>::max()));
  shard.path = fields.string("path");
  shard.size_bytes = fields.integer("size_bytes", 0);
  shard.xxh64 = fields.string("xxh64");
  shard.begin = fields.integer("begin", 0);
  shard.end = fields.integer("end", 0);
  // Only a model cut into slices has them (slice_total() reads the absence).
  if (fields.has("tensor_rank") || fields.has("stage") || fields.has("slice_parameters")) {
    shard.tensor_rank =
        static_cast<int>(fields.integer("tensor_rank", 0, std::numeric_limits<int>::max()));
    shard.stage = static_cast<int>(fields.integer("stage", 0, std::numeric_limits<int>::max()));
    shard.slice_parameters = fields.integer("slice_parameters", 0);
  }
  if (!fields.ok()) return std::nullopt;
  if (!is_inside_path(shard.path)) {
    error =
        fmt::format("field '{}path' must be a relative path inside the checkpoint folder, not '{}'",
                    prefix, shard.path);
    return std::nullopt;
  }
  if (!is_xxh64_hex(shard.xxh64)) {
    error = fmt::format("field '{}xxh64' must be 16 lowercase hex digits, not '{}'", prefix,
                        shard.xxh64);
    return std::nullopt;
  }
  if (shard.begin > shard.end) {
    error = fmt::format("shards[{}] (rank {}) has begin {} after end {}", index, shard.rank,
                        shard.begin, shard.end);
    return std::nullopt;
  }
  return shard;
}

std::string shard_name(const std::vector<ShardRecord>& shards, size_t index) {
  return fmt::format("shards[{}] (rank {})", index, shards[index].rank);
}

// What a slice's shards are named by in messages.
std::string slice_name(const ShardRecord& shard) {
  return fmt::format("tensor rank {} of stage {}", shard.tensor_rank, shard.stage);
}

// The elements of the layout a shard's slice holds.
int64_t slice_total(const CheckpointManifest& manifest, const ShardRecord& shard) {
  return shard.slice_parameters > 0 ? shard.slice_parameters : manifest.total_parameters;
}

// Shards [first, last) hold one slice of the model: sorted by begin, they
// tile [0, its slice_parameters) exactly. With one slice (no tensor or
// pipeline parallelism), messages speak of the whole model.
bool check_slice_coverage(const CheckpointManifest& manifest, size_t first, size_t last,
                          bool one_slice, std::string& error) {
  const std::vector<ShardRecord>& shards = manifest.shards;
  const int64_t total = slice_total(manifest, shards[first]);
  const std::string of = one_slice ? "" : " of " + slice_name(shards[first]);
  int64_t covered = 0;  // [0, covered) is in the shards before `i`
  for (size_t i = first; i < last; ++i) {
    const ShardRecord& shard = shards[i];
    if (slice_total(manifest, shard) != total) {
      error = fmt::format("{} says {} holds {} parameters, {} says {}", shard_name(shards, i),
                          slice_name(shard), slice_total(manifest, shard),
                          shard_name(shards, first), total);
      return false;
    }
    if (shard.begin > covered) {
      error = i == first
                  ? fmt::format("parameters [0, {}){} are in no shard: a gap before {}",
                                shard.begin, of, shard_name(shards, i))
                  : fmt::format("parameters [{}, {}){} are in no shard: a gap between {} and {}",
                                covered, shard.begin, of, shard_name(shards, i - 1),
                                shard_name(shards, i));
      return false;
    }
    if (shard.begin < covered) {
      error = fmt::format("{} and {} overlap: parameters [{}, {}){} are in both",
                          shard_name(shards, i - 1), shard_name(shards, i), shard.begin,
                          std::min(covered, shard.end), of);
      return false;
    }
    covered = shard.end;
  }
  const std::string holds = one_slice ? fmt::format("total_parameters {}", total)
                                      : fmt::format("{} holds {}", slice_name(shards[first]), total);
  if (covered < total) {
    error = fmt::format("parameters [{}, {}){} are in no shard: a gap after {} ({})", covered,
                        total, of, shard_name(shards, last - 1), holds);
    return false;
  }
  if (covered > total) {
    error = fmt::format("{} ends at {}, past {}", shard_name(shards, last - 1), covered,
                        one_slice ? fmt::format("total_parameters {}", total)
                                  : fmt::format("the {} parameters{}", total, of));
    return false;
  }
  return true;
}

// The shards are sorted by (stage, tensor rank, begin); each rank and each
// file appears once; each slice of the manifest's tensor x pipeline grid is
// there, and its shards tile it exactly.
bool check_coverage(const CheckpointManifest& manifest, std::string& error) {
  const std::vector<ShardRecord>& shards = manifest.shards;
  if (shards.empty()) {
    error = "field 'shards' is empty";
    return false;
  }
  const int64_t expected =
      static_cast<int64_t>(manifest.tensor_parallel) * manifest.pipeline_parallel;
  const bool one_slice = expected == 1;
  std::set<int> ranks;
  std::set<std::string> paths;
  const auto key = [](const ShardRecord& shard) {
    return std::tuple(shard.stage, shard.tensor_rank, shard.begin);
  };
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardRecord& shard = shards[i];
    if (!ranks.insert(shard.rank).second) {
      error = fmt::format("{}: rank {} has more than one shard", shard_name(shards, i), shard.rank);
      return false;
    }
    if (!paths.insert(shard.path).second) {
      error = fmt::format("{}: file '{}' is named by more than one shard", shard_name(shards, i),
                          shard.path);
      return false;
    }
    if (shard.tensor_rank >= manifest.tensor_parallel || shard.stage >= manifest.pipeline_parallel) {
      error = fmt::format("{} holds {}, outside the manifest's tensor_parallel {} x "
                          "pipeline_parallel {}",
                          shard_name(shards, i), slice_name(shard), manifest.tensor_parallel,
                          manifest.pipeline_parallel);
      return false;
    }
    if (i > 0 && key(shard) < key(shards[i - 1])) {
      error = one_slice
                  ? fmt::format("shards are not sorted by begin: {} begins at {}, before {} at {}",
                                shard_name(shards, i), shard.begin, shard_name(shards, i - 1),
                                shards[i - 1].begin)
                  : fmt::format(
                        "shards are not sorted by stage, tensor rank and begin: {} ({}, begin "
                        "{}) comes after {} ({}, begin {})",
                        shard_name(shards, i), slice_name(shard), shard.begin,
                        shard_name(shards, i - 1), slice_name(shards[i - 1]), shards[i - 1].begin);
      return false;
    }
  }
  size_t first = 0;
  int64_t slices = 0;
  for (size_t i = 1; i <= shards.size(); ++i) {
    if (i < shards.size() && shards[i].stage == shards[first].stage &&
        shards[i].tensor_rank == shards[first].tensor_rank) {
      continue;
    }
    if (!check_slice_coverage(manifest, first, i, one_slice, error)) return false;
    ++slices;
    first = i;
  }
  if (slices != expected) {
    error = fmt::format(
        "the shards hold {} slice(s) of the model, but tensor_parallel {} x pipeline_parallel {} "
        "makes {}",
        slices, manifest.tensor_parallel, manifest.pipeline_parallel, expected);
    return false;
  }
  return true;
}

// The step_<N> folders under `root`, newest first. A missing root has none;
// a root that cannot be listed (EACCES, EIO, a stale NFS handle) sets
// `error` when given, since "no checkpoint" would restart from step 0.
std::vector<std::pair<int64_t, std::string>> step_folders(const std::string& root,
                                                          std::string* error) {
  namespace fs = std::filesystem;
  const std::string base = strip_trailing_slashes(root);
  std::vector<std::pair<int64_t, std::string>> folders;
  std::error_code status;
  for (fs::directory_iterator it(base, status), end; !status && it != end; it.increment(status)) {
    const auto step = step_of_dir_name(it->path().filename().string());
    std::error_code ignored;
    if (!step || !it->is_directory(ignored)) continue;
    folders.emplace_back(*step, join_path(base, it->path().filename().string()));
  }
  if (status && status != std::errc::no_such_file_or_directory && error != nullptr) {
    *error = fmt::format("cannot list the checkpoints in '{}': {}", base, status.message());
  }
  std::sort(folders.begin(), folders.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  return folders;
}

}  // namespace

json manifest_to_json(const CheckpointManifest& manifest) {
  json shards = json::array();
  // A model cut into tensor or pipeline slices says which slice each shard
  // holds; a whole model's manifest reads as before such slices existed.
  const bool sliced = manifest.tensor_parallel * manifest.pipeline_parallel > 1;
  for (const ShardRecord& shard : manifest.shards) {
    json record = {{"rank", shard.rank},
                   {"path", shard.path},
                   {"size_bytes", shard.size_bytes},
                   {"xxh64", shard.xxh64},
                   {"begin", shard.begin},
                   {"end", shard.end}};
    if (sliced) {
      record["tensor_rank"] = shard.tensor_rank;
      record["stage"] = shard.stage;
      record["slice_parameters"] = slice_total(manifest, shard);
    }
    shards.push_back(std::move(record));
  }
  return {{"format_version", manifest.format_version},
          {"job_id", manifest.job_id},
          {"spec_hash", manifest.spec_hash},
          {"step", manifest.step},
          {"tokens_seen", manifest.tokens_seen},
          {"samples_seen", manifest.samples_seen},
          {"attempt", manifest.attempt},
          {"data_parallel", manifest.data_parallel},
          {"tensor_parallel", manifest.tensor_parallel},
          {"pipeline_parallel", manifest.pipeline_parallel},
          {"zero_stage", manifest.zero_stage},
          {"total_parameters", manifest.total_parameters},
          {"data_positions", manifest.data_positions},
          {"rng_states", manifest.rng_states},
          {"scheduler", manifest.scheduler},
          {"loss_scaler", manifest.loss_scaler},
          {"model", manifest.model},
          {"created_unix_ms", manifest.created_unix_ms},
          {"shards", std::move(shards)}};
}

std::optional<CheckpointManifest> manifest_from_json(const json& value, std::string& error) {
  if (!value.is_object()) {
    error = fmt::format("the manifest must be a JSON object, not {}", value.type_name());
    return std::nullopt;
  }
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  FieldReader fields(value, "", error);
  CheckpointManifest manifest;
  // The version first: a newer format may differ in any other field.
  manifest.format_version = static_cast<int>(fields.integer("format_version", 0, kIntMax));
  if (!fields.ok()) return std::nullopt;
  if (manifest.format_version < kOldestFormatVersion || manifest.format_version > kFormatVersion) {
    error = fmt::format("format_version {} is not known (this dslaunch reads versions {} to {})",
                        manifest.format_version, kOldestFormatVersion, kFormatVersion);
    return std::nullopt;
  }
  manifest.job_id = fields.string("job_id");
  manifest.spec_hash = fields.string("spec_hash");
  manifest.step = fields.integer("step", 0);
  manifest.tokens_seen = fields.integer("tokens_seen", 0);
  manifest.samples_seen = fields.integer("samples_seen", 0);
  manifest.attempt = static_cast<int>(fields.integer("attempt", 0, kIntMax));
  manifest.data_parallel = static_cast<int>(fields.integer("data_parallel", 1, kIntMax));
  manifest.tensor_parallel = static_cast<int>(fields.integer("tensor_parallel", 1, kIntMax));
  manifest.pipeline_parallel = static_cast<int>(fields.integer("pipeline_parallel", 1, kIntMax));
  manifest.zero_stage = static_cast<int>(fields.integer("zero_stage", 0, 3));
  manifest.total_parameters = fields.integer("total_parameters", 0);
  manifest.data_positions = fields.any("data_positions");
  manifest.rng_states = fields.any("rng_states");
  manifest.scheduler = fields.any("scheduler");
  manifest.loss_scaler = fields.any("loss_scaler");
  manifest.model = fields.any("model");
  manifest.created_unix_ms = fields.integer("created_unix_ms", 0);
  const json* shards = fields.array("shards");
  if (!fields.ok()) return std::nullopt;
  for (size_t i = 0; i < shards->size(); ++i) {
    auto shard = shard_from_json((*shards)[i], i, error);
    if (!shard) return std::nullopt;
    manifest.shards.push_back(std::move(*shard));
  }
  if (!check_coverage(manifest, error)) return std::nullopt;
  return manifest;
}

std::string checkpoint_dir_name(int64_t step) { return fmt::format("step_{:08d}", step); }

std::optional<int64_t> step_of_dir_name(std::string_view name) {
  if (name.substr(0, kDirPrefix.size()) != kDirPrefix) return std::nullopt;
  const std::string_view digits = name.substr(kDirPrefix.size());
  // 18 digits always fit in an int64_t.
  if (digits.size() < 8 || digits.size() > 18) return std::nullopt;
  int64_t step = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  // Only the name checkpoint_dir_name gives: no extra leading zeros.
  if (checkpoint_dir_name(step) != name) return std::nullopt;
  return step;
}

bool write_manifest(const std::string& checkpoint_dir, const CheckpointManifest& manifest,
                    std::string& error) {
  const std::string dir = strip_trailing_slashes(checkpoint_dir);
  const json value = manifest_to_json(manifest);
  std::string invalid;
  if (!manifest_from_json(value, invalid)) {
    error = fmt::format("refusing to write '{}': {}", join_path(dir, kManifestFile), invalid);
    return false;
  }
  return core::replace_file_durably(dir, kManifestFile, value.dump(2) + "\n", 0600, error);
}

CheckpointCheck check_checkpoint(const std::string& checkpoint_dir, bool verify_checksums) {
  CheckpointCheck check;
  check.dir = strip_trailing_slashes(checkpoint_dir);
  const std::string name = base_name(check.dir);
  const auto report = [&](CheckpointVerdict verdict, const std::string& problem) {
    check.verdict = verdict;
    check.problem = fmt::format("checkpoint {}: {}", name, problem);
    return check;
  };
  const auto broken = [&](const std::string& problem) {
    return report(CheckpointVerdict::kBroken, problem);
  };
  check.step = step_of_dir_name(name).value_or(-1);
  // Listings only hand over step_<N> folders; anything else is no checkpoint.
  if (check.step < 0) return broken("the folder name is not step_<8 or more digits>");

  const std::string manifest_path = join_path(check.dir, kManifestFile);
  int error_number = 0;
  const auto text = read_whole_file(manifest_path, error_number);
  if (!text && error_number == ENOENT) {
    return report(CheckpointVerdict::kNeverCommitted,
                  "no manifest.json (the save did not complete)");
  }
  if (!text) {
    return report(CheckpointVerdict::kUnusable,
                  fmt::format("cannot read manifest.json: {}; fix the access to it and try again",
                              core::errno_text(error_number)));
  }
  std::string error;
  const std::optional<json> value = core::parse_untrusted_json(*text, error);
  if (!value) return broken(fmt::format("manifest.json is not valid JSON: {}", error));
  if (value->is_object()) {
    if (const auto model = value->find("model"); model != value->end()) {
      check.recorded_model = *model;
    }
    if (const auto version = value->find("format_version");
        version != value->end() && version->is_number_integer() && *version > kFormatVersion) {
      return report(CheckpointVerdict::kUnusable,
                    fmt::format("manifest.json has format_version {}, newer than the {} this "
                                "dslaunch reads; resume it with a newer dslaunch",
                                version->dump(), kFormatVersion));
    }
  }
  check.manifest = manifest_from_json(*value, error);
  if (!check.manifest) return broken(fmt::format("manifest.json: {}", error));
  if (check.manifest->step != check.step) {
    return broken(fmt::format("manifest.json says step {}, the folder name says step {}",
                              check.manifest->step, check.step));
  }

  // Every size before any checksum: a missing or short file is found without
  // reading the others.
  for (const ShardRecord& shard : check.manifest->shards) {
    struct stat info {};
    if (::stat(join_path(check.dir, shard.path).c_str(), &info) != 0) {
      if (errno == ENOENT) return broken(fmt::format("shard {} is missing", shard.path));
      return report(CheckpointVerdict::kUnusable,
                    fmt::format("shard {} cannot be read: {}; fix the access to it and try again",
                                shard.path, core::errno_text(errno)));
    }
    if (!S_ISREG(info.st_mode)) return broken(fmt::format("shard {} is not a file", shard.path));
    if (info.st_size != shard.size_bytes) {
      return broken(fmt::format("shard {} is {} bytes, the manifest says {}{}", shard.path,
                                info.st_size, shard.size_bytes,
                                info.st_size < shard.size_bytes ? " (truncated?)" : ""));
    }
  }
  if (!verify_checksums) return check;
  for (const ShardRecord& shard : check.manifest->shards) {
    const auto checksum = core::file_xxh64(join_path(check.dir, shard.path), error);
    if (!checksum) return broken(error);
    if (*checksum != shard.xxh64) {
      return broken(fmt::format("shard {} checksum {} does not match the manifest's {} (corrupted)",
                                shard.path, *checksum, shard.xxh64));
    }
  }
  return check;
}

std::vector<CheckpointCheck> list_checkpoints(const std::string& root, bool verify_checksums,
                                              std::string* error) {
  std::vector<CheckpointCheck> checks;
  for (const auto& [step, dir] : step_folders(root, error)) {
    checks.push_back(check_checkpoint(dir, verify_checksums));
  }
  return checks;
}

NewestValid find_newest_valid(const std::string& root) {
  NewestValid result;
  for (const auto& [step, dir] : step_folders(root, &result.error)) {
    CheckpointCheck check = check_checkpoint(dir, /*verify_checksums=*/true);
    if (check.valid()) {
      result.found = std::move(check);
      break;
    }
    if (check.verdict == CheckpointVerdict::kUnusable) {
      result.error = check.problem;
      break;
    }
    result.skipped.push_back(std::move(check));
  }
  return result;
}

bool write_latest(const std::string& root, int64_t step, std::string& error) {
  return core::replace_file_durably(strip_trailing_slashes(root), kLatestFile,
                                           checkpoint_dir_name(step) + "\n", 0600, error);
}

std::optional<int64_t> read_latest(const std::string& root) {
  int error_number = 0;
  auto text = read_whole_file(join_path(strip_trailing_slashes(root), kLatestFile), error_number);
  if (!text || text->empty() || text->back() != '\n') return std::nullopt;
  text->pop_back();
  return step_of_dir_name(*text);
}

std::vector<std::string> prune_checkpoints(const std::string& root, int keep, std::string& error,
                                           int64_t up_to_step) {
  std::vector<CheckpointCheck> checks =
      list_checkpoints(root, /*verify_checksums=*/false, &error);
  if (!error.empty()) return {};
  // Folders past up_to_step are not this commit's business: saves in
  // progress, or ones a resume set aside.
  checks.erase(std::remove_if(checks.begin(), checks.end(),
                              [up_to_step](const CheckpointCheck& check) {
                                return check.step > up_to_step;
                              }),
               checks.end());
  const auto newest_valid = std::find_if(
      checks.begin(), checks.end(), [](const CheckpointCheck& check) { return check.valid(); });
  std::vector<std::string> doomed;
  int kept = 0;
  for (auto it = newest_valid; it != checks.end(); ++it) {
    if (it->valid() && kept < std::max(keep, 1)) {
      ++kept;
    } else if (it->valid() || it->verdict == CheckpointVerdict::kNeverCommitted) {
      doomed.push_back(it->dir);
    }
  }
  // Oldest first, so that a failure part-way leaves the newer ones.
  std::reverse(doomed.begin(), doomed.end());
  std::vector<std::string> removed;
  for (const std::string& dir : doomed) {
    const std::string manifest = join_path(dir, kManifestFile);
    if (::unlink(manifest.c_str()) != 0 && errno != ENOENT) {
      error = fmt::format("cannot remove '{}': {}", manifest, core::errno_text(errno));
      return removed;
    }
    std::error_code status;
    std::filesystem::remove_all(dir, status);
    if (status) {
      error = fmt::format("cannot remove checkpoint folder '{}': {}", dir, status.message());
      return removed;
    }
    removed.push_back(dir);
  }
  return removed;
}

std::string set_aside_checkpoint(const std::string& dir, std::string& error) {
  const std::string base = strip_trailing_slashes(dir);
  std::string target = base + ".broken";
  for (int n = 2; std::filesystem::exists(target); ++n) target = fmt::format("{}.broken-{}", base, n);
  if (::rename(base.c_str(), target.c_str()) != 0) {
    error = fmt::format("cannot rename '{}' to '{}': {}", base, target, core::errno_text(errno));
    return "";
  }
  return target;
}

std::string spec_hash(std::string_view resolved_spec_yaml) {
  return core::xxh64_hex(
      XXH64(resolved_spec_yaml.data(), resolved_spec_yaml.size(), 0));
}

}  // namespace dslaunch::controller
