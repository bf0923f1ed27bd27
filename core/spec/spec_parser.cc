#include "core/spec/spec_parser.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/ipv4_subnet.h"
#include "core/path_pattern.h"
#include "core/shell_words.h"
#include "core/spec/deepspeed_config.h"
#include "core/spec/merge_keys.h"
#include "core/spec/overrides.h"
#include "core/spec/text_file.h"
#include "core/spec/yaml_document.h"
#include "core/spec/yaml_reader.h"
#include "topology/hostfile.h"

namespace dslaunch::spec {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kNoLimit = std::numeric_limits<int64_t>::max();
constexpr double kUnbounded = std::numeric_limits<double>::max();

// The longest job name (it names the job's folder) and controller address
// (a DNS name has at most 253 characters, plus the port).
constexpr size_t kMaxNameLength = 128;
constexpr size_t kMaxAddressLength = 255;

// Bounds far above any real cluster, low enough that counts of ranks, cores,
// bytes and deadlines derived from them stay inside their types.
constexpr int64_t kMaxNodes = 1 << 16;
constexpr int64_t kMaxRanksPerHost = 1024;
constexpr int64_t kMaxCoresPerHost = 1 << 14;
constexpr int64_t kMaxNumaNodesPerHost = 1024;
constexpr double kMaxDeviceMemoryGb = 1 << 16;  // 64 TiB per device
constexpr int64_t kMaxBucketElements = int64_t{1} << 40;
constexpr double kMaxHeartbeatIntervalS = 3600;
constexpr double kMaxHeartbeatTimeoutS = 7 * 24 * 3600;
constexpr int64_t kMaxEvalBatches = 1 << 20;
constexpr double kMaxFaultDelayS = 3600;

// Relative paths are relative to the folder of the file that holds them (the
// spec, or the DeepSpeed config for the keys it supplies), as in
// docker-compose files; values from the command line are relative to the
// working directory, and stay as given.
std::string resolve_path(const std::string& value, const Location& where) {
  if (value.empty() || value == "demo" || fs::path(value).is_absolute() || !where.origin.empty()) {
    return value;
  }
  return fs::absolute(fs::path(where.file).parent_path() / value).lexically_normal().string();
}

// What a relative path in a message is relative to.
std::string relative_to(const Location& where, const std::string& spec_path) {
  if (!where.origin.empty()) return "the working directory (it was given on the command line)";
  if (where.file == spec_path) return "the spec's folder";
  return fmt::format("the folder of {}", where.file);
}

// A value as shown in a message: long ones cut, so that a 50 KB value does
// not become a 50 KB message.
std::string shown(std::string_view value) {
  constexpr size_t kShown = 40;
  if (value.size() <= kShown) return "'" + std::string(value) + "'";
  return fmt::format("'{}...' ({} characters)", value.substr(0, kShown), value.size());
}

bool ascii_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

bool ascii_digit(char c) { return c >= '0' && c <= '9'; }

template <typename Enum>
void read_enum(MapReader& reader, std::string_view key, const std::vector<std::string>& names,
               Enum& out) {
  int index = static_cast<int>(out);
  reader.choice(key, names, index);
  out = static_cast<Enum>(index);
}

// The job's name names its folder: a letter or digit, then letters, digits,
// '.', '_' and '-', at most kMaxNameLength in all. "" when it is fine.
// (Character checks, not std::regex: its recursive matcher overflows the
// stack on long input.)
std::string name_problem(const std::string& name) {
  if (name.size() > kMaxNameLength) {
    return fmt::format(
        "name {} is too long; a job name has at most {} characters (it names the "
        "job's folder)",
        shown(name), kMaxNameLength);
  }
  const bool valid_characters = std::all_of(name.begin(), name.end(), [](char c) {
    return ascii_alnum(c) || c == '.' || c == '_' || c == '-';
  });
  if (!valid_characters || name.empty() || !ascii_alnum(name.front())) {
    return fmt::format(
        "name {} may hold only letters, digits, '.', '_' and '-', starting with a "
        "letter or digit (it names the job's folder)",
        shown(name));
  }
  return "";
}

// host, host:port, [v6]:port or [v6]; the port, when given, in 1..65535.
bool valid_controller_address(std::string_view address) {
  std::string_view port;
  bool has_port = false;
  if (address.starts_with('[')) {
    const size_t close = address.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (const char c : address.substr(1, close - 1)) {
      const bool hex = ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex && c != ':' && c != '.') return false;
    }
    const std::string_view rest = address.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return false;
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = address.find(':');
    const std::string_view host = address.substr(0, colon);
    if (host.empty()) return false;
    for (const char c : host) {
      // Blanks and control characters, and the characters of [v6] and :port.
      if (static_cast<unsigned char>(c) <= ' ' || c == 0x7f || c == '[' || c == ']') return false;
    }
    if (colon != std::string_view::npos) {
      port = address.substr(colon + 1);
      has_port = true;
    }
  }
  if (!has_port) return true;
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ascii_digit)) {
    return false;
  }
  const int number = std::stoi(std::string(port));
  return number >= 1 && number <= 65535;
}

void check_controller_address(MapReader& cluster, const std::string& address) {
  if (address.empty()) return;
  if (address.size() > kMaxAddressLength) {
    cluster.error("controller_address",
                  fmt::format("cluster.controller_address {} is too long; give a host or "
                              "host:port of at most {} characters",
                              shown(address), kMaxAddressLength));
  } else if (!valid_controller_address(address)) {
    cluster.error("controller_address",
                  fmt::format("cluster.controller_address '{}' must be host or host:port (port "
                              "1-65535), such as 10.0.0.5:29500 or [fd00::5]:29500",
                              address));
  }
}

// An interface name as Linux allows one (1-15 characters, no '/', blank or
// ':'), or an IPv4 subnet in CIDR form, which Open MPI takes in its place.
void check_network_interface(MapReader& cluster, const std::string& name) {
  if (name.empty()) return;
  if (core::looks_like_subnet(name)) {
    if (!core::Ipv4Subnet::parse(name)) {
      cluster.error("network_interface",
                    fmt::format("cluster.network_interface {} is neither an interface name nor "
                                "an IPv4 subnet such as 10.0.0.0/16",
                                shown(name)));
    }
    return;
  }
  if (name.size() > 15 || name.find_first_of(" \t\n:") != std::string::npos) {
    cluster.error("network_interface",
                  fmt::format("cluster.network_interface {} is not an interface name (at most "
                              "15 characters, no blanks or ':'); give one such as eth0, or an "
                              "IPv4 subnet such as 10.0.0.0/16",
                              shown(name)));
  }
}

// Inline hosts as the hostfile parser takes them: a valid, distinct name
// (the planner would place a repeated host's slots twice) and 1 to
// kMaxSlotsPerHost slots.
void read_hosts(MapReader& cluster, ClusterSpec& out) {
  std::map<std::string, Location> first_listed;
  for (MapReader host : cluster.map_list("hosts")) {
    InlineHost entry;
    host.string("host", entry.host);
    host.integer("slots", entry.slots, 1, topology::kMaxSlotsPerHost);
    entry.line = host.location().line;
    if (entry.host.empty()) {
      host.error("host", host.path() + " needs a host name: host: NAME");
    } else if (std::string problem = topology::host_name_problem(entry.host); !problem.empty()) {
      host.error("host", fmt::format("{}.host: {}", host.path(), problem));
    } else if (auto first = first_listed.find(entry.host); first != first_listed.end()) {
      host.error("host", fmt::format("{}: host '{}' is already listed (first at {}); list each "
                                     "host once",
                                     host.path(), entry.host, first->second.to_string()));
    } else {
      first_listed.emplace(entry.host, host.location_of("host"));
    }
    if (!host.has("slots")) host.error("slots", host.path() + " needs slots: N (N >= 1)");
    host.finish();
    out.hosts.push_back(entry);
  }
}

void read_tls(MapReader tls, TlsSpec& out) {
  const auto read_file_key = [&](const char* key, std::string& path) {
    tls.string(key, path);
    path = resolve_path(path, tls.location_of(key));
    std::error_code ignored;
    if (!path.empty() && !fs::is_regular_file(path, ignored)) {
      tls.error(key, fmt::format("{}.{}: no file at '{}'", tls.path(), key, path));
    }
  };
  read_file_key("cert", out.cert);
  read_file_key("key", out.key);
  read_file_key("ca", out.ca);
  tls.boolean("client_certificates", out.client_certificates);
  const int given = !out.cert.empty() + !out.key.empty() + !out.ca.empty();
  if (given != 0 && given != 3) {
    tls.error("cert", fmt::format("{} needs cert (the controller's certificate), key (its "
                                  "private key) and ca (what ranks verify it with), all three",
                                  tls.path()));
  }
  tls.finish();
}

void read_cluster(MapReader cluster, ClusterSpec& out) {
  read_enum(cluster, "runner", {"local", "openmpi", "slurm"}, out.runner);
  read_enum(cluster, "device", {"cpu", "cuda", "auto"}, out.device);
  cluster.string("hostfile", out.hostfile);
  out.hostfile = resolve_path(out.hostfile, cluster.location_of("hostfile"));
  read_hosts(cluster, out);
  if (!out.hostfile.empty() && !out.hosts.empty()) {
    cluster.error("hosts", "give cluster.hostfile or cluster.hosts, not both");
  }
  cluster.string("include", out.include);
  cluster.string("exclude", out.exclude);
  const auto read_count = [&](const char* key, int& out_count, int64_t max) {
    cluster.integer(key, out_count, -1, max);
    if (out_count == 0) {
      cluster.error(key, fmt::format("cluster.{} must be -1 (all) or at least 1", key));
    }
  };
  read_count("num_nodes", out.num_nodes, kMaxNodes);
  read_count("num_gpus", out.num_gpus, kMaxRanksPerHost);
  cluster.integer("ssh_port", out.ssh_port, 1, 65535);
  cluster.string("master_addr", out.master_addr);
  cluster.integer("master_port", out.master_port, 1, 65535);
  cluster.integer("metrics_port", out.metrics_port, 1, 65535);
  cluster.string("metrics_token_file", out.metrics_token_file);
  out.metrics_token_file =
      resolve_path(out.metrics_token_file, cluster.location_of("metrics_token_file"));
  if (!out.metrics_token_file.empty() && out.metrics_port == 0) {
    cluster.error("metrics_token_file",
                  "cluster.metrics_token_file guards the metrics endpoint; set "
                  "cluster.metrics_port too");
  }
  cluster.string("network_interface", out.network_interface);
  check_network_interface(cluster, out.network_interface);
  std::string launcher_args;
  cluster.string("launcher_args", launcher_args);
  std::string split_error;
  if (std::optional<std::vector<std::string>> words =
          core::split_shell_words(launcher_args, split_error)) {
    out.launcher_args = std::move(*words);
  } else {
    cluster.error("launcher_args",
                  "cluster.launcher_args cannot be split into arguments: " + split_error);
  }
  cluster.string("controller_address", out.controller_address);
  check_controller_address(cluster, out.controller_address);

  read_tls(cluster.map("tls"), out.tls);

  MapReader topology = cluster.map("topology");
  topology.integer("cores_per_host", out.topology.cores_per_host, 1, kMaxCoresPerHost);
  topology.integer("numa_nodes_per_host", out.topology.numa_nodes_per_host, 1,
                   kMaxNumaNodesPerHost);
  topology.integer_lists("gpu_islands", out.topology.gpu_islands, 0);
  topology.number("device_memory_gb", out.topology.device_memory_gb, 0, kMaxDeviceMemoryGb);
  topology.finish();
  cluster.finish();
}

// Far above any trained model, and low enough that parameter and byte
// counts (12 h^2 per layer, 16 bytes per parameter) stay inside 64 bits.
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHidden = 1 << 20;
constexpr int64_t kMaxSequence = 1 << 24;
constexpr int64_t kMaxParallel = 1 << 16;
constexpr int64_t kMaxVocab = 1 << 24;

void read_model(MapReader model, ModelSpec& out) {
  model.integer("num_layers", out.num_layers, 1, kMaxLayers);
  model.integer("hidden_size", out.hidden_size, 1, kMaxHidden);
  model.integer("num_attention_heads", out.num_attention_heads, 1, kMaxHidden);
  model.integer("vocab_size", out.vocab_size, 1, kMaxVocab);
  model.integer("seq_length", out.seq_length, 1, kMaxSequence);
  model.integer("max_position_embeddings", out.max_position_embeddings, 1, kMaxSequence);
  if (model.read_ok("seq_length") && model.read_ok("max_position_embeddings") &&
      out.max_position_embeddings != 0 && out.max_position_embeddings < out.seq_length) {
    model.error("max_position_embeddings",
                fmt::format("model.max_position_embeddings {} is below model.seq_length {}: the "
                            "position embedding needs a row for every position of a sequence",
                            out.max_position_embeddings, out.seq_length));
  }
  model.number("dropout", out.dropout, 0, 1);
  if (out.dropout == 1) model.error("dropout", "model.dropout must be below 1");
  model.integer("init_seed", out.init_seed);
  model.integer("make_vocab_size_divisible_by", out.make_vocab_size_divisible_by, 1, kMaxParallel);
  if (model.read_ok("hidden_size") && model.read_ok("num_attention_heads") &&
      out.hidden_size % out.num_attention_heads != 0) {
    model.error("hidden_size",
                fmt::format("model.hidden_size {} must be divisible by model.num_attention_heads "
                            "{} (each head gets hidden_size / heads dimensions)",
                            out.hidden_size, out.num_attention_heads));
  }
  model.finish();
}

// The paths under `key` (data.train or data.valid) as written: one
// string, or a list of scalars (numbers among them for a blend).
std::vector<MapReader::ListScalar> data_items(MapReader& data, const char* key) {
  std::vector<MapReader::ListScalar> items;
  if (data.is_list(key)) {
    data.scalar_list(key, items);
    return items;
  }
  std::string path;
  data.string(key, path);
  if (!path.empty()) items.push_back({path, std::nullopt});
  return items;
}

// data.train as datasets: a list whose first item is a number is Megatron's
// blend of weights and paths, anything else one dataset.
std::optional<std::vector<Dataset>> datasets_of(MapReader& data,
                                                const std::vector<MapReader::ListScalar>& items) {
  if (items.empty() || !items.front().number) {
    Dataset one;
    for (const MapReader::ListScalar& item : items) one.paths.push_back(item.text);
    if (one.paths.empty()) return std::vector<Dataset>{};
    return std::vector<Dataset>{one};
  }
  std::vector<Dataset> blend;
  for (size_t i = 0; i < items.size(); i += 2) {
    const bool weight_missing = !items[i].number;
    if (weight_missing || i + 1 == items.size() || items[i + 1].number) {
      data.error("train",
                 fmt::format("data.train: a blend lists weights and paths in turn, as Megatron's "
                             "data_path does ([0.3, path1, 0.7, path2]); item {} is not a {}",
                             weight_missing ? i + 1 : i + 2, weight_missing ? "weight" : "path"));
      return std::nullopt;
    }
    const double weight = *items[i].number;
    if (!(weight > 0) || !std::isfinite(weight)) {
      data.error("train", fmt::format("data.train: blend weight {} must be a positive number",
                                      items[i].text));
      return std::nullopt;
    }
    blend.push_back({weight, {items[i + 1].text}});
  }
  return blend;
}

void read_data(MapReader data, DataSpec& out, const std::string& spec_path, JobKind kind) {
  const std::vector<MapReader::ListScalar> train_items = data_items(data, "train");
  const std::vector<MapReader::ListScalar> valid_items = data_items(data, "valid");
  read_enum(data, "format", {"auto", "llmc", "megatron"}, out.format);
  if (std::optional<std::vector<Dataset>> datasets = datasets_of(data, train_items)) {
    out.train = std::move(*datasets);
  }
  for (const MapReader::ListScalar& item : valid_items) {
    if (item.number) {
      data.error("valid",
                 "data.valid: a blend of weights is for data.train only; list the evaluation "
                 "files (they are read one after the other)");
      break;
    }
    out.valid.push_back(item.text);
  }
  if (train_items.empty() && data.read_ok("train") && kind == JobKind::kTrain) {
    data.error("train",
               "data.train is required: an llm.c token file, a Megatron dataset prefix "
               "(path without .bin/.idx), a glob pattern or a list of them, a blend "
               "[weight, path, ...], or 'demo' for the built-in corpus");
  }
  // The error_code overloads: a path the OS refuses (too long, no
  // permission) is "no data there", not an exception out of the parser.
  const auto is_file = [](const std::string& candidate) {
    std::error_code ignored;
    return fs::is_regular_file(candidate, ignored);
  };
  // A Megatron prefix, also when given as its .bin or .idx file.
  const auto has_pair = [&](const std::string& prefix) {
    return is_file(prefix + ".bin") && is_file(prefix + ".idx");
  };
  const auto found = [&](const std::string& path) {
    const std::string extension = fs::path(path).extension().string();
    const bool megatron =
        has_pair(path) || ((extension == ".bin" || extension == ".idx") &&
                           has_pair(path.substr(0, path.size() - extension.size())));
    return out.format == DataFormat::kLlmc       ? is_file(path)
           : out.format == DataFormat::kMegatron ? megatron
                                                 : is_file(path) || megatron;
  };
  const auto check_paths = [&](const char* key, std::vector<std::string>& paths) {
    const Location where = data.location_of(key);
    for (std::string& path : paths) {
      const bool relative = !fs::path(path).is_absolute();
      path = resolve_path(path, where);
      if (path == kDemoData) {
        if (std::string_view(key) == "valid" || !out.demo()) {
          data.error(key, fmt::format("data.{}: 'demo' names the built-in corpus only under "
                                      "data.train, alone: it brings its own evaluation "
                                      "split; {}",
                                      key,
                                      std::string_view(key) == "valid"
                                          ? "leave valid out or give a path"
                                          : "it cannot be listed or blended with other data"));
        }
        continue;
      }
      const std::string folder_note =
          relative ? "; the path is relative to " + relative_to(where, spec_path) : "";
      if (core::has_wildcards(path)) {
        const std::vector<std::string> matches = core::matching_paths(path);
        if (matches.empty()) {
          data.error(key, fmt::format("data.{}: no files match '{}'{}", key, path, folder_note));
        }
        for (const std::string& match : matches) {
          if (!found(match)) {
            data.error(key, fmt::format("data.{}: '{}' (matched by '{}') is not token data of "
                                        "format {}",
                                        key, match, path, out.format == DataFormat::kMegatron
                                                              ? "megatron (.bin with .idx)"
                                                              : "llmc or megatron"));
          }
        }
        continue;
      }
      if (!found(path)) {
        data.error(key, fmt::format("data.{}: no data at '{}' (looked for that file, and for "
                                    "{}.bin with {}.idx){}",
                                    key, path, path, path, folder_note));
      }
    }
  };
  for (Dataset& dataset : out.train) check_paths("train", dataset.paths);
  check_paths("valid", out.valid);
  data.finish();
}

// `optimizer`: offload_optimizer, which has the partial offload's ratio;
// `stage3`: the ZeRO stage was read, and is 3.
void read_offload(MapReader offload, OffloadSpec& out, bool optimizer, bool stage3) {
  read_enum(offload, "device", {"none", "cpu", "nvme"}, out.device);
  offload.string("nvme_path", out.nvme_path);
  out.nvme_path = resolve_path(out.nvme_path, offload.location_of("nvme_path"));
  offload.boolean("pin_memory", out.pin_memory);
  offload.integer("buffer_count", out.buffer_count, 1, 1024);
  if (optimizer) {
    offload.number("ratio", out.ratio, 0, 1);
    // As DeepSpeed has it: a share of the states stays on the GPU, the rest
    // goes to CPU Adam; with nvme every state goes to the drive.
    if (offload.read_ok("ratio") && out.ratio < 1 && out.device != OffloadDevice::kCpu) {
      offload.error("ratio", offload.path() +
                                 ".ratio below 1 keeps the rest of the optimizer states on the GPU "
                                 "beside CPU Adam: it goes with device cpu only");
    }
  }
  if (out.device == OffloadDevice::kNvme && out.nvme_path.empty()) {
    offload.error("device", offload.path() +
                                ".device is nvme: give nvme_path, a folder on "
                                "the NVMe drive");
  }
  // Stage 3 pins nothing yet but partial offload's own buffers.
  if (out.pin_memory && stage3 && !(optimizer && out.ratio < 1)) {
    offload.warning("pin_memory",
                    fmt::format("{} has no effect at ZeRO stage 3 yet: the parameters it gathers "
                                "and the gradients it reduces pass through pageable host memory",
                                offload.child_path("pin_memory")));
  }
  offload.finish();
}

// Reads the key under either of DeepSpeed's spellings (stage3_x or x).
void read_zero_alias(MapReader& zero, const std::string& key, int64_t& out) {
  const std::string prefixed = "stage3_" + key;
  if (zero.has(prefixed) && zero.has(key)) {
    zero.error(key, fmt::format("give {}.{} or {}.{}, not both (they are the same setting)",
                                zero.path(), prefixed, zero.path(), key));
  }
  zero.integer(prefixed, out, 0, kMaxBucketElements);
  zero.integer(key, out, 0, kMaxBucketElements);
}

void read_zero(MapReader zero, ZeroSpec& out) {
  zero.integer("stage", out.stage, 0, 3);
  zero.integer("reduce_bucket_size", out.reduce_bucket_size, 1, kMaxBucketElements);
  zero.integer("allgather_bucket_size", out.allgather_bucket_size, 1, kMaxBucketElements);
  // DeepSpeed overlaps communication by default only at stage 3.
  out.overlap_comm = out.stage == 3;
  zero.boolean("overlap_comm", out.overlap_comm);
  zero.boolean("contiguous_gradients", out.contiguous_gradients);
  read_zero_alias(zero, "prefetch_bucket_size", out.prefetch_bucket_size);
  read_zero_alias(zero, "param_persistence_threshold", out.param_persistence_threshold);
  read_zero_alias(zero, "max_live_parameters", out.max_live_parameters);
  // Hugging Face's ZeRO-3 example sets 1e14: any size is a valid "all at once".
  zero.integer("sub_group_size", out.sub_group_size, 1, kNoLimit);
  // A stage that could not be read is not 0: the rules below would blame
  // the default.
  const bool stage_read = zero.read_ok("stage");
  const bool stage3 = stage_read && out.stage == 3;
  read_offload(zero.map("offload_optimizer"), out.offload_optimizer, /*optimizer=*/true, stage3);
  read_offload(zero.map("offload_param"), out.offload_param, /*optimizer=*/false, stage3);
  zero.boolean("zero_quantized_weights", out.quantized_weights);
  zero.boolean("zero_quantized_gradients", out.quantized_gradients);
  zero.integer("zero_hpz_partition_size", out.hpz_partition_size, 1, kMaxParallel);
  for (const auto& [key, given] :
       {std::pair{"zero_quantized_weights", out.quantized_weights},
        std::pair{"zero_quantized_gradients", out.quantized_gradients},
        std::pair{"zero_hpz_partition_size", out.hpz_partition_size > 1}}) {
    if (stage_read && given && out.stage != 3) {
      zero.error(key, fmt::format("{} (ZeRO++) works at ZeRO stage 3, as in DeepSpeed; set "
                                  "{}.stage: 3 or remove it",
                                  key, zero.path()));
    }
  }
  if (stage_read && out.offload_param.device != OffloadDevice::kNone && out.stage != 3) {
    zero.error("offload_param",
               fmt::format("offload_param needs ZeRO stage 3 (parameters are partitioned only "
                           "there); set {}.stage: 3 or remove offload_param",
                           zero.path()));
  }
  if (stage_read && out.offload_optimizer.device != OffloadDevice::kNone && out.stage == 0) {
    zero.error(
        "offload_optimizer",
        fmt::format("offload_optimizer needs ZeRO stage 1, 2 or 3; set {}.stage", zero.path()));
  }
  zero.finish();
}

// The params each optimizer type takes (DeepSpeed's, for its optimizers;
// the ones that change nothing here, like cuda_aware, are accepted).
void read_optimizer_params(MapReader& params, OptimizerSpec& out) {
  params.number("lr", out.lr, 0, kUnbounded);
  std::vector<double> betas(out.betas.begin(), out.betas.end());
  params.number_list("betas", betas);
  if (betas.size() != 2 || betas[0] < 0 || betas[0] >= 1 || betas[1] < 0 || betas[1] >= 1) {
    params.error("betas", params.path() +
                              ".betas must be two numbers in [0, 1), such as "
                              "[0.9, 0.999]");
  } else {
    out.betas = {betas[0], betas[1]};
  }
  params.number("eps", out.eps, 0, kUnbounded);
  params.number("weight_decay", out.weight_decay, 0, kUnbounded);
  const OptimizerType type = out.type;
  if (type == OptimizerType::kAdam || type == OptimizerType::kAdamW) {
    // DeepSpeed's "Adam" decouples weight decay (AdamW) unless adam_w_mode is false.
    params.boolean("adam_w_mode", out.decoupled_weight_decay);
    return;
  }
  // DeepSpeed's Lamb and 1-bit optimizers take amsgrad and raise on true.
  bool amsgrad = false;
  params.boolean("amsgrad", amsgrad);
  if (amsgrad) {
    params.error("amsgrad", fmt::format("{}.amsgrad: DeepSpeed's Lamb and 1-bit optimizers do not "
                                        "support the AMSGrad variant; remove it",
                                        params.path()));
  }
  if (type == OptimizerType::kLamb) {
    params.boolean("bias_correction", out.bias_correction);
    params.boolean("eps_inside_sqrt", out.eps_inside_sqrt);
  }
  if (type == OptimizerType::kLamb || type == OptimizerType::kOneBitLamb) {
    params.number("max_coeff", out.max_coeff, 0, kUnbounded);
    params.number("min_coeff", out.min_coeff, 0, kUnbounded);
    if (params.read_ok("max_coeff") && params.read_ok("min_coeff") &&
        out.min_coeff > out.max_coeff) {
      params.error("min_coeff", fmt::format("{}.min_coeff ({}) is above max_coeff ({})",
                                            params.path(), out.min_coeff, out.max_coeff));
    }
  }
  if (!compresses_communication(type)) return;
  // Where DeepSpeed's 1-bit optimizers run their collectives and whether MPI
  // may take GPU memory: the CPU engine's data group is MPI whatever they say.
  bool cuda_aware = false;
  params.boolean("cuda_aware", cuda_aware);
  int backend = 0;
  params.choice("comm_backend_name", {"nccl", "mpi", "compressed", "hccl"}, backend);
  if (type == OptimizerType::kZeroOneAdam) {
    params.integer("var_freeze_step", out.var_freeze_step, 1, kNoLimit);
    params.integer("var_update_scaler", out.var_update_scaler, 1, kNoLimit);
    params.integer("local_step_scaler", out.local_step_scaler, 1, kNoLimit);
    params.integer("local_step_clipper", out.local_step_clipper, 1, kNoLimit);
    return;
  }
  params.integer("freeze_step", out.freeze_step, 1, kNoLimit);
  if (type == OptimizerType::kOneBitLamb) {
    params.number("coeff_beta", out.coeff_beta, 0, 1);
    params.number("factor_max", out.factor_max, 0, kUnbounded);
    params.number("factor_min", out.factor_min, 0, kUnbounded);
    params.number("factor_threshold", out.factor_threshold, 0, kUnbounded);
    if (params.read_ok("factor_max") && params.read_ok("factor_min") &&
        out.factor_min > out.factor_max) {
      params.error("factor_min", fmt::format("{}.factor_min ({}) is above factor_max ({})",
                                             params.path(), out.factor_min, out.factor_max));
    }
  }
}

void read_optimizer(MapReader optimizer, OptimizerSpec& out) {
  read_enum(optimizer, "type", {"Adam", "AdamW", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb"},
            out.type);
  MapReader params = optimizer.map("params");
  read_optimizer_params(params, out);
  if (out.type == OptimizerType::kAdamW) {
    if (!out.decoupled_weight_decay && optimizer.read_ok("type")) {
      params.error("adam_w_mode",
                   "AdamW always decouples weight decay; use type: Adam with "
                   "adam_w_mode: false for L2-coupled Adam");
    }
    out.decoupled_weight_decay = true;
  }
  params.finish();
  optimizer.finish();
}

void read_scheduler(MapReader scheduler, SchedulerSpec& out) {
  read_enum(scheduler, "type", {"none", "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}, out.type);
  MapReader params = scheduler.map("params");
  if (!scheduler.read_ok("type")) {
    // Which params are valid depends on the type: without it, checking them
    // would only add false "unknown key" errors to the one about the type.
    for (const std::string& key : params.keys()) params.accept(key);
    params.finish();
    scheduler.finish();
    return;
  }
  params.integer("warmup_num_steps", out.warmup_num_steps, 0, kNoLimit);
  read_enum(params, "warmup_type", {"log", "linear"}, out.warmup_type);
  if (out.type == SchedulerType::kWarmupLR || out.type == SchedulerType::kWarmupDecayLR) {
    params.number("warmup_min_lr", out.warmup_min_lr, 0, kUnbounded);
    params.number("warmup_max_lr", out.warmup_max_lr, 0, kUnbounded);
  }
  if (out.type == SchedulerType::kWarmupDecayLR || out.type == SchedulerType::kWarmupCosineLR) {
    params.integer("total_num_steps", out.total_num_steps, 1, kNoLimit);
    if (!params.has("total_num_steps")) {
      params.error("total_num_steps", scheduler.path() +
                                          " needs params.total_num_steps, the step where the "
                                          "decay ends");
    } else if (params.read_ok("warmup_num_steps") && params.read_ok("total_num_steps") &&
               out.warmup_num_steps > out.total_num_steps) {
      params.error("warmup_num_steps",
                   fmt::format("{}.warmup_num_steps {} is past total_num_steps {}", params.path(),
                               out.warmup_num_steps, out.total_num_steps));
    }
  }
  if (out.type == SchedulerType::kWarmupCosineLR) {
    params.number("warmup_min_ratio", out.warmup_min_ratio, 0, 1);
    params.number("cos_min_ratio", out.cos_min_ratio, 0, 1);
  }
  // DeepSpeed's resume position; dslaunch restores schedulers from checkpoints.
  int64_t last_batch_iteration = -1;
  params.integer("last_batch_iteration", last_batch_iteration, -1, kNoLimit);
  if (last_batch_iteration != -1) {
    params.error("last_batch_iteration",
                 "last_batch_iteration is not needed: dslaunch resumes the scheduler from the "
                 "checkpoint; remove it");
  }
  params.finish();
  scheduler.finish();
}

// Far above any real run, low enough that the elastic batch search's
// products stay inside 64 bits.
constexpr int64_t kMaxElasticBatch = int64_t{1} << 40;

// A non-empty list of whole numbers from 1 to kMaxElasticBatch, as DeepSpeed
// requires.
void read_micro_batch_sizes(MapReader& elasticity, std::vector<int64_t>& out) {
  std::vector<double> sizes;
  elasticity.number_list("micro_batch_sizes", sizes);
  if (!elasticity.has("micro_batch_sizes") || !elasticity.read_ok("micro_batch_sizes")) return;
  const bool whole = !sizes.empty() && std::all_of(sizes.begin(), sizes.end(), [](double size) {
    return size >= 1 && size <= kMaxElasticBatch && size == std::floor(size);
  });
  if (!whole) {
    elasticity.error("micro_batch_sizes",
                     "training.elasticity.micro_batch_sizes must be a non-empty list of whole "
                     "numbers of at least 1, such as [2, 4, 6]");
    return;
  }
  out.assign(sizes.begin(), sizes.end());
}

// DeepSpeed's elasticity keys and defaults, and its checks between them when
// enabled. `model_parallel` is parallelism.tensor x pipeline, or 0 when
// either failed to read.
void read_elasticity(MapReader elasticity, ElasticitySpec& out, int64_t model_parallel) {
  elasticity.boolean("enabled", out.enabled);
  elasticity.integer("max_train_batch_size", out.max_train_batch_size, 1, kMaxElasticBatch);
  read_micro_batch_sizes(elasticity, out.micro_batch_sizes);
  elasticity.integer("min_gpus", out.min_gpus, 1, kMaxNodes * kMaxRanksPerHost);
  elasticity.integer("max_gpus", out.max_gpus, 1, kMaxNodes * kMaxRanksPerHost);
  elasticity.number("min_time", out.min_time, 0, kUnbounded);
  elasticity.number("version", out.version, 0, kUnbounded);
  const bool version_ok =
      elasticity.read_ok("version") && (out.version == 0.1 || out.version == 0.2);
  if (elasticity.read_ok("version") && !version_ok) {
    elasticity.error("version", fmt::format("training.elasticity.version must be 0.1 or 0.2 "
                                            "(DeepSpeed's latest, the default), got {}",
                                            out.version));
  }
  elasticity.boolean("prefer_larger_batch", out.prefer_larger_batch);
  elasticity.boolean("ignore_non_elastic_batch_info", out.ignore_non_elastic_batch_info);
  int model_parallel_size = 1;
  elasticity.integer("model_parallel_size", model_parallel_size, 1, kMaxParallel);
  const bool model_parallel_size_ok =
      elasticity.has("model_parallel_size") && elasticity.read_ok("model_parallel_size");
  if (model_parallel_size_ok) out.model_parallel_size = model_parallel_size;
  elasticity.integer("num_gpus_per_node", out.num_gpus_per_node, 1, kMaxRanksPerHost);
  elasticity.finish();
  if (!out.enabled) return;

  if (!elasticity.has("max_train_batch_size")) {
    elasticity.error("max_train_batch_size",
                     "training.elasticity.max_train_batch_size is required with elasticity "
                     "enabled: the largest global batch to train with");
  }
  if (!elasticity.has("micro_batch_sizes")) {
    elasticity.error("micro_batch_sizes",
                     "training.elasticity.micro_batch_sizes is required with elasticity enabled: "
                     "the micro batches a rank may run, such as [2, 4, 6]");
  }
  if (elasticity.read_ok("min_gpus") && elasticity.read_ok("max_gpus") &&
      out.max_gpus < out.min_gpus) {
    elasticity.error("max_gpus", fmt::format("training.elasticity.max_gpus {} is below min_gpus {}",
                                             out.max_gpus, out.min_gpus));
  }
  if (model_parallel_size_ok && model_parallel != 0 && model_parallel != model_parallel_size) {
    elasticity.error("model_parallel_size",
                     fmt::format("training.elasticity.model_parallel_size {} differs from the "
                                 "job's model-parallel size, parallelism.tensor x pipeline = {}; "
                                 "remove it (it defaults to that) or make them match",
                                 model_parallel_size, model_parallel));
  }
  if (model_parallel_size_ok && version_ok && out.version == 0.1 && model_parallel_size > 1) {
    elasticity.error("model_parallel_size",
                     "training.elasticity.model_parallel_size above 1 needs version 0.2, as in "
                     "DeepSpeed (version 0.1 counts data-parallel ranks only); set version: 0.2 "
                     "or remove model_parallel_size");
  }
  // Version 0.2 grows and shrinks the job by whole nodes of model-parallel groups.
  const int64_t group = model_parallel_size_ok ? model_parallel_size : model_parallel;
  if (version_ok && out.version == 0.2 && group != 0 && elasticity.read_ok("num_gpus_per_node") &&
      out.num_gpus_per_node % group != 0) {
    elasticity.error("num_gpus_per_node",
                     fmt::format("training.elasticity.num_gpus_per_node {} is not divisible by the "
                                 "model-parallel size {}: version 0.2 places whole model-parallel "
                                 "groups on each node; give the ranks of one node",
                                 out.num_gpus_per_node, group));
  }
}

// With elasticity enabled the batch is computed, so the batch keys would go
// unused: DeepSpeed refuses them unless told to ignore them.
void check_elastic_batch_keys(MapReader& training, const ElasticitySpec& elasticity) {
  if (!elasticity.enabled || elasticity.ignore_non_elastic_batch_info) return;
  std::vector<std::string> given;
  for (const char* key :
       {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"}) {
    if (training.has(key)) given.push_back(key);
  }
  if (given.empty()) return;
  training.error(given.front(),
                 fmt::format("training.{} cannot be given with training.elasticity enabled, "
                             "which computes the batch for each data-parallel size; remove {}, or "
                             "set training.elasticity.ignore_non_elastic_batch_info: true to have "
                             "{} ignored",
                             fmt::join(given, ", training."), given.size() == 1 ? "it" : "them",
                             given.size() == 1 ? "it" : "them"));
}

// What DeepSpeed refuses beside the Lamb family and the 1-bit optimizers.
void check_optimizer_combinations(MapReader& training, const TrainingSpec& out) {
  const OptimizerType type = out.optimizer.type;
  if (type == OptimizerType::kAdam || type == OptimizerType::kAdamW) return;
  const char* name = optimizer_type_name(type);
  if (out.zero.stage >= 1 && compresses_communication(type)) {
    training.error("optimizer",
                   fmt::format("optimizer {} cannot be combined with ZeRO stage {}, as in "
                               "DeepSpeed: it averages the whole momentum on every rank itself, "
                               "compressed; set zero_optimization.stage: 0",
                               name, out.zero.stage));
  } else if (out.zero.stage >= 1) {
    training.error("optimizer",
                   fmt::format("optimizer Lamb cannot be combined with ZeRO stage {}: its trust "
                               "ratio is per tensor, and ZeRO's flat partitions cut tensors apart "
                               "(DeepSpeed runs it only as an untested optimizer); set "
                               "zero_optimization.stage: 0",
                               out.zero.stage));
  }
  const bool lamb = type == OptimizerType::kLamb || type == OptimizerType::kOneBitLamb;
  if (lamb && out.fp16.enabled && out.fp16.loss_scale > 0) {
    training.error("fp16",
                   fmt::format("optimizer {} needs dynamic loss scaling, as in DeepSpeed; set "
                               "fp16.loss_scale: 0",
                               name));
  }
}

// `parallelism_read_ok` tells whether a parallelism key ("tensor") was read
// without a problem.
// DeepSpeed features that change what is trained and that dslaunch does not
// build: refused when enabled, so that nobody trains something other than
// their config asks for; accepted with `enabled: false`.
void refuse_unbuilt_features(MapReader& training) {
  static const std::pair<const char*, const char*> kFeatures[] = {
      {"amp", "NVIDIA Apex AMP (use bf16 or fp16)"},
      {"compression_training", "compression training (quantization and pruning while training)"},
      {"data_efficiency", "data efficiency (curriculum data sampling and routing)"},
      {"curriculum_learning", "curriculum learning"},
      {"progressive_layer_drop", "progressive layer drop"},
      {"sparse_attention", "sparse attention"},
      {"eigenvalue", "eigenvalue computation (for quantization schedules)"},
      {"quantize_training", "quantize training (MoQ)"},
      {"wandb", "the wandb monitor (it needs the network; use tensorboard or csv_monitor)"},
      {"comet", "the Comet monitor (it needs the network; use tensorboard or csv_monitor)"},
  };
  for (const auto& [key, feature] : kFeatures) {
    if (!training.has(key)) continue;
    MapReader section = training.map(key);
    bool enabled = true;
    section.boolean("enabled", enabled);
    section.accept_prefix("");
    section.finish();
    if (enabled && training.read_ok(key)) {
      training.error(key, fmt::format("training.{}: DeepSpeed's {} is not built in dslaunch; "
                                      "remove the section or set enabled: false",
                                      key, feature));
    }
  }
}

void read_monitor_output(MapReader section, MonitorOutput& out) {
  section.boolean("enabled", out.enabled);
  section.string("output_path", out.output_path);
  out.output_path = resolve_path(out.output_path, section.location_of("output_path"));
  section.string("job_name", out.job_name);
  if (out.job_name.find('/') != std::string::npos || out.job_name == ".." ||
      out.job_name == ".") {
    section.error("job_name", fmt::format("{}.job_name '{}' must be a folder name, not a path",
                                          section.path(), out.job_name));
  }
  section.finish();
}

void read_monitoring(MapReader& training, MonitorSpec& out) {
  read_monitor_output(training.map("tensorboard"), out.tensorboard);
  read_monitor_output(training.map("csv_monitor"), out.csv_monitor);
  MapReader comms = training.map("comms_logger");
  comms.boolean("enabled", out.comms_logger);
  // DeepSpeed's finer switches: what it prints; the summary here is by
  // operation either way.
  for (const char* key : {"verbose", "prof_all", "debug", "prof_ops"}) comms.accept(key);
  comms.finish();
  training.integer("steps_per_print", out.steps_per_print, 1, kNoLimit);
  training.boolean("wall_clock_breakdown", out.wall_clock_breakdown);
}

void read_training(MapReader training, TrainingSpec& out, const ParallelismSpec& parallelism,
                   JobKind kind, const std::function<bool(const char*)>& parallelism_read_ok) {
  training.optional_integer("train_batch_size", out.batch.train_batch_size, 1);
  training.optional_integer("train_micro_batch_size_per_gpu", out.batch.micro_batch_per_gpu, 1);
  training.optional_integer("gradient_accumulation_steps", out.batch.gradient_accumulation_steps,
                            1);
  training.integer("steps", out.steps, 1, kNoLimit);
  if (!training.has("steps") && kind == JobKind::kTrain) {
    training.error("steps", "training.steps is required: the number of optimizer steps to run");
  }
  MapReader fp16 = training.map("fp16");
  fp16.boolean("enabled", out.fp16.enabled);
  fp16.number("loss_scale", out.fp16.loss_scale, 0, kUnbounded);
  fp16.integer("initial_scale_power", out.fp16.initial_scale_power, 0, 64);
  fp16.integer("loss_scale_window", out.fp16.loss_scale_window, 1, kNoLimit);
  fp16.integer("hysteresis", out.fp16.hysteresis, 1, kNoLimit);
  fp16.boolean("consecutive_hysteresis", out.fp16.consecutive_hysteresis);
  fp16.boolean("raise_error_at_min_scale", out.fp16.raise_error_at_min_scale);
  fp16.number("min_loss_scale", out.fp16.min_loss_scale, 0, kUnbounded);
  fp16.finish();
  MapReader bf16 = training.map("bf16");
  bf16.boolean("enabled", out.bf16);
  bf16.finish();
  if (out.fp16.enabled && out.bf16) {
    training.error("bf16", "fp16.enabled and bf16.enabled are both true; choose one precision");
  }
  read_zero(training.map("zero_optimization"), out.zero);
  MapReader aio = training.map("aio");
  aio.integer("block_size", out.aio.block_size, 4096, int64_t{1} << 30);
  if (out.aio.block_size % 4096 != 0) {
    aio.error("block_size", fmt::format("aio.block_size is {}: give a multiple of 4096 (requests "
                                        "go to the drive with O_DIRECT)",
                                        out.aio.block_size));
  }
  aio.integer("queue_depth", out.aio.queue_depth, 1, 4096);
  aio.boolean("single_submit", out.aio.single_submit);
  aio.finish();
  if (parallelism.pipeline > 1 && out.zero.stage >= 2) {
    training.error("zero_optimization",
                   fmt::format("ZeRO stage {} cannot be combined with pipeline parallelism "
                               "(pipeline {}), as in DeepSpeed; use stage 0 or 1",
                               out.zero.stage, parallelism.pipeline));
  }
  read_optimizer(training.map("optimizer"), out.optimizer);
  check_optimizer_combinations(training, out);
  if (training.has("communication_data_type")) {
    int type = 0;
    training.choice("communication_data_type", {"fp32", "fp16", "bf16"}, type);
    if (training.read_ok("communication_data_type")) {
      out.communication_data_type = static_cast<CommunicationDataType>(type + 1);
    }
  }
  read_scheduler(training.map("scheduler"), out.scheduler);
  training.number("gradient_clipping", out.gradient_clipping, 0, kUnbounded);
  training.integer("seed", out.seed);
  training.integer("eval_interval", out.eval_interval, 0, kNoLimit);
  training.integer("eval_batches", out.eval_batches, 1, kMaxEvalBatches);
  read_monitoring(training, out.monitor);
  refuse_unbuilt_features(training);
  training.string("init_from", out.init_from);
  if (!out.init_from.empty()) {
    const Location where = training.location_of("init_from");
    out.init_from = resolve_path(out.init_from, where);
    std::error_code ignored;
    if (!fs::is_regular_file(out.init_from, ignored)) {
      training.error("init_from",
                     fmt::format("training.init_from: no file '{}' (Hugging Face GPT-2 weights, "
                                 ".safetensors, as `dslaunch export` writes them)",
                                 out.init_from));
    }
  }
  if (training.has("activation_checkpointing")) {
    ActivationCheckpointingSpec& checkpointing = out.activation_checkpointing;
    checkpointing.enabled = true;
    MapReader section = training.map("activation_checkpointing");
    section.boolean("partition_activations", checkpointing.partition_activations);
    // At most the layers a model may have: more would recompute them all.
    if (section.has("number_checkpoints")) {
      int64_t count = 0;
      section.integer("number_checkpoints", count, 1, kMaxLayers);
      if (section.read_ok("number_checkpoints")) checkpointing.number_checkpoints = count;
    } else {
      section.accept("number_checkpoints");
    }
    section.boolean("cpu_checkpointing", checkpointing.cpu_checkpointing);
    section.boolean("contiguous_memory_optimization", checkpointing.contiguous_memory_optimization);
    section.boolean("synchronize_checkpoint_boundary",
                    checkpointing.synchronize_checkpoint_boundary);
    section.boolean("profile", checkpointing.profile);
    section.finish();
  } else {
    training.accept("activation_checkpointing");
  }
  const int64_t model_parallel = parallelism_read_ok("tensor") && parallelism_read_ok("pipeline")
                                     ? int64_t{parallelism.tensor} * parallelism.pipeline
                                     : 0;
  read_elasticity(training.map("elasticity"), out.elasticity, model_parallel);
  check_elastic_batch_keys(training, out.elasticity);
  training.finish();
}

// `read_ok` tells whether a model key ("hidden_size") was read without a
// problem: a rule is checked only when all its inputs were.
void read_parallelism(MapReader parallelism, ParallelismSpec& out, const ModelSpec& model,
                      const std::function<bool(const char*)>& model_read_ok) {
  parallelism.integer("tensor", out.tensor, 1, kMaxParallel);
  parallelism.integer("pipeline", out.pipeline, 1, kMaxParallel);
  parallelism.integer("virtual_stages", out.virtual_stages, 1, kMaxParallel);
  if (parallelism.is_list("pipeline_partition")) {
    std::vector<double> counts;
    parallelism.number_list("pipeline_partition", counts);
    const bool whole = std::all_of(counts.begin(), counts.end(), [](double count) {
      return count >= 1 && count <= kMaxParallel && count == std::floor(count);
    });
    if (!whole) {
      parallelism.error("pipeline_partition",
                        "parallelism.pipeline_partition must be 'parameters', 'uniform' or a list "
                        "of block counts, each a whole number of at least 1");
    } else {
      out.pipeline_partition = PipelinePartition::kExplicit;
      out.stage_layers.assign(counts.begin(), counts.end());
    }
  } else {
    int method = static_cast<int>(out.pipeline_partition);
    parallelism.choice("pipeline_partition", {"parameters", "uniform"}, method);
    out.pipeline_partition = static_cast<PipelinePartition>(method);
  }
  parallelism.finish();
  const bool tensor_read = parallelism.read_ok("tensor");
  const bool pipeline_read = parallelism.read_ok("pipeline");
  if (tensor_read && model_read_ok("num_attention_heads") &&
      model.num_attention_heads % out.tensor != 0) {
    parallelism.error("tensor", fmt::format("model.num_attention_heads {} is not divisible by "
                                            "parallelism.tensor {}: each tensor rank needs "
                                            "whole heads",
                                            model.num_attention_heads, out.tensor));
  }
  if (tensor_read && model_read_ok("hidden_size") && model.hidden_size % out.tensor != 0) {
    parallelism.error("tensor",
                      fmt::format("model.hidden_size {} is not divisible by parallelism.tensor {}",
                                  model.hidden_size, out.tensor));
  }
  const bool virtual_read = parallelism.read_ok("virtual_stages");
  if (pipeline_read && virtual_read && out.virtual_stages > 1 && out.pipeline < 2) {
    parallelism.error("virtual_stages",
                      fmt::format("parallelism.virtual_stages {} interleaves the stages of a "
                                  "pipeline, and parallelism.pipeline is 1; set pipeline to 2 or "
                                  "more, or remove virtual_stages",
                                  out.virtual_stages));
  }
  const int64_t virtual_stages = int64_t{out.pipeline} * out.virtual_stages;
  if (pipeline_read && virtual_read && model_read_ok("num_layers") &&
      model.num_layers < virtual_stages) {
    parallelism.error(
        out.virtual_stages > 1 ? "virtual_stages" : "pipeline",
        out.virtual_stages > 1
            ? fmt::format("model.num_layers {} is fewer than parallelism.pipeline {} x "
                          "virtual_stages {}: every virtual stage needs at least one "
                          "transformer block",
                          model.num_layers, out.pipeline, out.virtual_stages)
            : fmt::format("model.num_layers {} is fewer than parallelism.pipeline {}: "
                          "every stage needs at least one transformer block",
                          model.num_layers, out.pipeline));
  }
  if (pipeline_read && virtual_read && model_read_ok("num_layers") &&
      parallelism.read_ok("pipeline_partition") &&
      out.pipeline_partition == PipelinePartition::kExplicit) {
    const int64_t blocks =
        std::accumulate(out.stage_layers.begin(), out.stage_layers.end(), int64_t{0});
    if (static_cast<int64_t>(out.stage_layers.size()) != virtual_stages ||
        blocks != model.num_layers) {
      parallelism.error(
          "pipeline_partition",
          out.virtual_stages > 1
              ? fmt::format("parallelism.pipeline_partition gives {} virtual stage(s) of {} "
                            "block(s) in all; the job has parallelism.pipeline {} x "
                            "virtual_stages {} and model.num_layers {}",
                            out.stage_layers.size(), blocks, out.pipeline, out.virtual_stages,
                            model.num_layers)
              : fmt::format("parallelism.pipeline_partition gives {} stage(s) of {} block(s) in "
                            "all; the job has parallelism.pipeline {} and model.num_layers {}",
                            out.stage_layers.size(), blocks, out.pipeline, model.num_layers));
    }
  }
}

void read_commbench(MapReader commbench, CommbenchSpec& out) {
  commbench.choice_list("collectives", {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"},
                        out.collectives);
  // "model" and "pipe" are the tensor and pipeline axes' older names.
  commbench.choice_list("groups", {"world", "data", "tensor", "pipeline", "model", "pipe"},
                        out.groups);
  commbench.integer("min_bytes", out.min_bytes, 4, int64_t{1} << 34);
  commbench.integer("max_bytes", out.max_bytes, 4, int64_t{1} << 34);
  commbench.integer("iterations", out.iterations, 1, 1'000'000);
  commbench.integer("warmup", out.warmup, 0, 1'000'000);
  if (commbench.read_ok("min_bytes") && commbench.read_ok("max_bytes") &&
      out.max_bytes < out.min_bytes) {
    commbench.error("max_bytes", fmt::format("commbench.max_bytes {} is below min_bytes {}",
                                             out.max_bytes, out.min_bytes));
  }
  commbench.finish();
}

void read_checkpoint(MapReader checkpoint, CheckpointSpec& out) {
  checkpoint.string("dir", out.dir);
  out.dir = resolve_path(out.dir, checkpoint.location_of("dir"));
  checkpoint.integer("interval", out.interval, 0, kNoLimit);
  checkpoint.integer("keep", out.keep, 1, kNoLimit);
  checkpoint.boolean("write_in_place", out.write_in_place);
  checkpoint.finish();
}

void read_fault_tolerance(MapReader fault, FaultToleranceSpec& out) {
  fault.integer("max_restarts", out.max_restarts, 0, kNoLimit);
  fault.number("heartbeat_interval", out.heartbeat_interval_s, 0.01, kMaxHeartbeatIntervalS);
  fault.number("heartbeat_timeout", out.heartbeat_timeout_s, 0.01, kMaxHeartbeatTimeoutS);
  if (fault.read_ok("heartbeat_interval") && fault.read_ok("heartbeat_timeout") &&
      out.heartbeat_timeout_s <= out.heartbeat_interval_s) {
    fault.error("heartbeat_timeout",
                fmt::format("fault_tolerance.heartbeat_timeout ({}s) must be longer than "
                            "heartbeat_interval ({}s)",
                            out.heartbeat_timeout_s, out.heartbeat_interval_s));
  }
  fault.number("step_timeout", out.step_timeout_s, 0, kMaxHeartbeatTimeoutS);
  if (fault.read_ok("step_timeout") && out.step_timeout_s != 0) {
    if (out.step_timeout_s < 1) {
      fault.error("step_timeout",
                  fmt::format("fault_tolerance.step_timeout ({}s) must be 0 (off) or at least 1s",
                              out.step_timeout_s));
    } else if (fault.read_ok("heartbeat_interval") &&
               out.step_timeout_s <= out.heartbeat_interval_s) {
      // Progress is seen through heartbeats: a shorter timeout would fire
      // between two of them on a healthy rank.
      fault.error("step_timeout",
                  fmt::format("fault_tolerance.step_timeout ({}s) must be longer than "
                              "heartbeat_interval ({}s), or 0 (off)",
                              out.step_timeout_s, out.heartbeat_interval_s));
    }
  }
  fault.number("host_wait_timeout", out.host_wait_timeout_s, 0, kMaxHeartbeatTimeoutS);
  fault.number("collective_timeout", out.collective_timeout_s, 0, kMaxHeartbeatTimeoutS);
  if (fault.read_ok("collective_timeout") && out.collective_timeout_s != 0 &&
      out.collective_timeout_s < 1) {
    fault.error("collective_timeout",
                fmt::format("fault_tolerance.collective_timeout ({}s) must be 0 (off) or at "
                            "least 1s",
                            out.collective_timeout_s));
  } else if (fault.read_ok("collective_timeout") && fault.read_ok("heartbeat_interval") &&
             out.collective_timeout_s != 0 &&
             out.collective_timeout_s <= out.heartbeat_interval_s) {
    // The controller reads who never started the collective from heartbeats
    // sent since it began.
    fault.error("collective_timeout",
                fmt::format("fault_tolerance.collective_timeout ({}s) must be longer than "
                            "heartbeat_interval ({}s), or 0 (off)",
                            out.collective_timeout_s, out.heartbeat_interval_s));
  }
  fault.finish();
}

void read_fault(MapReader fault, FaultSpec& out) {
  if (!fault.has("kind")) {
    fault.error("kind",
                "testing.fault.kind is required: exit, abort, hang, stall_step, slow, "
                "stall_collective or nan_gradient");
  }
  // In FaultKind's order.
  const std::vector<std::string> kinds = {
      "exit", "abort", "hang", "stall_step", "slow", "stall_collective", "nan_gradient"};
  int kind = static_cast<int>(out.kind);
  fault.choice("kind", kinds, kind);
  out.kind = static_cast<FaultKind>(kind);
  fault.integer("rank", out.rank, 0, kMaxNodes * kMaxRanksPerHost);
  fault.integer("step", out.step, 1, kNoLimit);
  fault.integer("attempt", out.attempt, 0, std::numeric_limits<int>::max());
  fault.number("seconds", out.seconds, 0, kMaxFaultDelayS);
  if (out.kind == FaultKind::kSlow && out.seconds <= 0 && fault.read_ok("seconds")) {
    fault.error("seconds",
                "testing.fault.seconds (the delay before each step) must be given and above 0 "
                "for kind slow");
  }
  fault.finish();
}

void read_testing(MapReader testing, TestingSpec& out, JobKind kind) {
  if (testing.has("fault")) {
    if (kind != JobKind::kTrain) {
      testing.error("fault", "testing.fault strikes in the training loop: it needs kind: train");
    }
    read_fault(testing.map("fault"), out.fault.emplace());
  }
  testing.finish();
}

// Sets `path` in `node` to `value` when the spec gave that key.
void write_back(YAML::Node node, const std::string& path, const std::string& value) {
  std::stringstream parts(path);
  std::string key;
  std::vector<std::string> keys;
  while (std::getline(parts, key, '.')) keys.push_back(key);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    if (!node.IsMap() || !node[keys[i]].IsMap()) return;
    node.reset(node[keys[i]]);
  }
  if (node.IsMap() && node[keys.back()].IsScalar()) node[keys.back()] = value;
}

// Resolved data paths as the spec may write them: one path as a string,
// several as a list, a blend as [weight, path, ...].
YAML::Node paths_node(const std::vector<std::string>& paths) {
  if (paths.size() == 1) return YAML::Node(paths.front());
  YAML::Node list(YAML::NodeType::Sequence);
  for (const std::string& path : paths) list.push_back(path);
  return list;
}

YAML::Node data_node(const std::vector<Dataset>& datasets) {
  if (datasets.size() == 1 && datasets.front().weight == 1) {
    return paths_node(datasets.front().paths);
  }
  YAML::Node blend(YAML::NodeType::Sequence);
  for (const Dataset& dataset : datasets) {
    blend.push_back(dataset.weight);
    blend.push_back(dataset.paths.front());
  }
  return blend;
}

// The spec as ranks receive it: the document after --set overrides and the
// DeepSpeed merge, without `deepspeed_config` (already merged in), with the
// job's name and every path made absolute, so it reads the same wherever it
// is parsed.
std::string resolved_document(const YAML::Node& root, const JobSpec& spec) {
  YAML::Node resolved = YAML::Clone(root);
  resolved.remove("deepspeed_config");
  resolved["name"] = spec.name;
  write_back(resolved, "cluster.hostfile", spec.cluster.hostfile);
  if (resolved["data"].IsMap()) {
    if (!spec.data.train.empty()) resolved["data"]["train"] = data_node(spec.data.train);
    if (!spec.data.valid.empty()) resolved["data"]["valid"] = paths_node(spec.data.valid);
  }
  write_back(resolved, "training.init_from", spec.training.init_from);
  write_back(resolved, "training.tensorboard.output_path",
             spec.training.monitor.tensorboard.output_path);
  write_back(resolved, "training.csv_monitor.output_path",
             spec.training.monitor.csv_monitor.output_path);
  write_back(resolved, "checkpoint.dir", spec.checkpoint.dir);
  write_back(resolved, "cluster.tls.cert", spec.cluster.tls.cert);
  write_back(resolved, "cluster.tls.key", spec.cluster.tls.key);
  write_back(resolved, "cluster.tls.ca", spec.cluster.tls.ca);
  write_back(resolved, "training.zero_optimization.offload_optimizer.nvme_path",
             spec.training.zero.offload_optimizer.nvme_path);
  write_back(resolved, "training.zero_optimization.offload_param.nvme_path",
             spec.training.zero.offload_param.nvme_path);
  YAML::Emitter out;
  out << resolved;
  return std::string(out.c_str()) + "\n";
}

// The --set, --hostfile, --include and --exclude inputs, applied to the
// parsed YAML before it is read, so they are checked like the file's values.
void apply_command_line(YAML::Node& root, const LoadOptions& options, ReadContext& context) {
  std::vector<Override> overrides;
  for (const std::string& text : options.overrides) {
    ParsedOverride parsed = parse_override(text);
    if (!parsed.error.empty()) {
      context.diagnostics().error(Location{"", 0, 0, parsed.value.origin}, parsed.error);
      continue;
    }
    overrides.push_back(parsed.value);
  }
  const auto flag = [&](const std::string& name, const std::string& path, std::string value) {
    if (!value.empty()) overrides.push_back({path, YAML::Node(value), name + " " + value});
  };
  flag("--hostfile", "cluster.hostfile",
       options.hostfile.empty() ? "" : fs::absolute(options.hostfile).lexically_normal().string());
  // A filter on the command line replaces the spec's filter, include and
  // exclude alike: left beside a command-line --include, the spec's exclude
  // would make the pair the error "include and exclude cannot be used
  // together", which the user never wrote.
  if ((!options.include.empty() || !options.exclude.empty()) && root.IsMap()) {
    const YAML::Node& document = root;
    YAML::Node cluster = document["cluster"];
    if (cluster.IsDefined() && cluster.IsMap()) {
      while (cluster.remove("include")) {
      }
      while (cluster.remove("exclude")) {
      }
    }
  }
  flag("--include", "cluster.include", options.include);
  flag("--exclude", "cluster.exclude", options.exclude);
  flag("--num_nodes", "cluster.num_nodes", options.num_nodes);
  flag("--num_gpus", "cluster.num_gpus", options.num_gpus);
  flag("--master_addr", "cluster.master_addr", options.master_addr);
  flag("--master_port", "cluster.master_port", options.master_port);
  flag("--launcher", "cluster.runner", options.launcher);
  flag("--launcher_args", "cluster.launcher_args", options.launcher_args);
  for (const Override& override_value : overrides) {
    const std::string error = apply_override(root, override_value);
    if (!error.empty()) {
      context.diagnostics().error(Location{"", 0, 0, override_value.origin}, error);
      continue;
    }
    context.set_origin(override_value.path, Location{"", 0, 0, override_value.origin});
  }
}

// The node at a dotted path under `node` (undefined when absent).
YAML::Node node_at(const YAML::Node& node, const std::string& path) {
  YAML::Node current = node;
  std::stringstream parts(path);
  std::string key;
  while (std::getline(parts, key, '.')) {
    if (!current.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
    const YAML::Node& parent = current;
    current.reset(parent[key]);
  }
  return current;
}

// Merges the DeepSpeed JSON config named by `deepspeed_config` under the
// spec's training section. Values taken from the JSON are located in it.
void merge_deepspeed_config(YAML::Node& root, const std::string& json_path,
                            const Location& key_location, ReadContext& context) {
  DeepSpeedConfig config = load_deepspeed_config(json_path);
  if (!config.error.empty()) {
    context.diagnostics().error(
        config.error_location.line > 0 ? config.error_location : key_location, config.error);
    return;
  }
  for (const Diagnostic& problem : config.problems) {
    context.diagnostics().error(problem.location, problem.message);
  }
  std::vector<std::string> overridden;
  const YAML::Node spec_training = root["training"];
  // Merging would replace a training section that is not a mapping, and with
  // it the error that says so.
  if (spec_training.IsDefined() && !spec_training.IsNull() && !spec_training.IsMap()) return;
  root["training"] = merge_training(
      config.training, spec_training,
      [&](const std::string& path) { context.set_file("training." + path, json_path); },
      overridden);
  for (const std::string& path : overridden) {
    context.diagnostics().warning(
        context.location_of("training." + path, node_at(spec_training, path)),
        fmt::format("training.{} in the job spec overrides the value in {}", path, json_path));
  }
}

// DeepSpeed keys that dslaunch does not use are warnings wherever they
// appear under training, in the JSON config or in the YAML itself: users
// converting a DeepSpeed config to YAML bring the same keys, and refusing in
// one place what is accepted in the other would only make them delete keys
// by hand.
std::optional<std::string> ignored_training_key(const std::string& path) {
  constexpr std::string_view kTraining = "training.";
  if (!path.starts_with(kTraining)) return std::nullopt;
  const std::string_view key = std::string_view(path).substr(kTraining.size());
  if (!is_ignored_deepspeed_key(key)) return std::nullopt;
  return ignored_deepspeed_key_warning(key);
}

bool valid_env_name(const std::string& name) {
  return !name.empty() && !ascii_digit(name.front()) &&
         std::all_of(name.begin(), name.end(), [](char c) { return ascii_alnum(c) || c == '_'; });
}

// Why `name` cannot be an environment variable's name, with the name it
// probably should have been; "" when it is fine. POSIX shells and mpirun's
// -x take only these names.
std::string env_name_problem(const std::string& name) {
  if (valid_env_name(name)) return "";
  std::string fixed = name.substr(0, std::min(name.size(), kMaxNameLength));
  for (char& c : fixed) {
    if (!ascii_alnum(c)) c = '_';
  }
  if (fixed.empty() || ascii_digit(fixed.front())) fixed = "_" + fixed;
  return fmt::format(
      "env name {} is not a variable name: use letters, digits and '_', not "
      "starting with a digit, such as '{}'",
      shown(name), fixed);
}

}  // namespace

JobSpec load_job_spec(const std::string& path, const LoadOptions& options, Diagnostics& diagnostics,
                      SourceMap& locations) {
  std::string error;
  const std::optional<std::string> text = read_text_file(path, "job spec", error);
  if (!text) {
    JobSpec spec;
    spec.spec_path = path;
    diagnostics.error(Location{path, 0, 0, ""}, error);
    return spec;
  }
  return parse_job_spec(*text, path, options, diagnostics, locations);
}

JobSpec parse_job_spec(std::string_view text, const std::string& path, const LoadOptions& options,
                       Diagnostics& diagnostics, SourceMap& locations) {
  JobSpec spec;
  spec.spec_path = path;
  locations.set_fallback(Location{path, 0, 0, ""});
  std::optional<YAML::Node> document = read_yaml_document(text, path, diagnostics);
  if (!document) return spec;
  YAML::Node root = *document;
  if (!root.IsDefined() || root.IsNull()) {
    diagnostics.error(Location{path, 0, 0, ""},
                      "the job spec is empty; see jobs/demo.yaml for a complete example");
    return spec;
  }
  expand_merge_keys(root, path, diagnostics);
  ReadContext context(path, diagnostics, locations);
  context.set_ignored_keys(ignored_training_key);
  apply_command_line(root, options, context);

  MapReader top(context, root, "");
  if (!root.IsMap()) return spec;
  int kind = static_cast<int>(spec.kind);
  top.choice("kind", {"train", "commbench"}, kind);
  spec.kind = static_cast<JobKind>(kind);
  top.string("name", spec.name);
  if (spec.name.empty()) spec.name = fs::path(path).stem().string();
  if (std::string problem = name_problem(spec.name); !problem.empty()) {
    top.error("name", problem);
  }
  top.string("deepspeed_config", spec.deepspeed_config);
  if (!spec.deepspeed_config.empty()) {
    const Location where = top.location_of("deepspeed_config");
    spec.deepspeed_config = resolve_path(spec.deepspeed_config, where);
    merge_deepspeed_config(root, spec.deepspeed_config, where, context);
  }
  read_cluster(top.map("cluster"), spec.cluster);
  read_model(top.map("model"), spec.model);
  read_parallelism(top.map("parallelism"), spec.parallelism, spec.model,
                   [&](const char* key) { return context.read_ok(std::string("model.") + key); });
  read_data(top.map("data"), spec.data, path, spec.kind);
  read_training(
      top.map("training"), spec.training, spec.parallelism, spec.kind,
      [&](const char* key) { return context.read_ok(std::string("parallelism.") + key); });
  MapReader commbench = top.map("commbench");
  read_commbench(commbench, spec.commbench);
  if (spec.kind != JobKind::kCommbench && top.has("commbench")) {
    top.error("commbench", "the commbench section needs kind: commbench");
  }
  read_checkpoint(top.map("checkpoint"), spec.checkpoint);
  read_fault_tolerance(top.map("fault_tolerance"), spec.fault_tolerance);
  read_testing(top.map("testing"), spec.testing, spec.kind);
  top.string_map("env", spec.env, env_name_problem);
  // Top-level keys starting with "x-" hold YAML anchors for the rest of the
  // spec to merge or alias, as in docker-compose files; they are not read.
  top.accept_prefix("x-");
  top.finish();
  spec.resolved_yaml = resolved_document(root, spec);
  return spec;
}

void set_planned_device(JobSpec& spec, Device device) {
  spec.cluster.device = device;
  YAML::Node resolved = YAML::Load(spec.resolved_yaml);
  resolved["cluster"]["device"] = device == Device::kCuda ? "cuda" : "cpu";
  YAML::Emitter out;
  out << resolved;
  spec.resolved_yaml = std::string(out.c_str()) + "\n";
}

}  // namespace dslaunch::spec
