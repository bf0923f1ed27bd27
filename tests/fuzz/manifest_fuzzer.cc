// libFuzzer target: checkpoint manifests (manifest.json), read by
// manifest_from_json and checked in a checkpoint folder by check_checkpoint
// beside one fuzzed shard file (rank_0.bin). Besides crashes, hangs and
// sanitizer reports, it traps when a promise is broken: an accepted manifest
// has a known version, parallel sizes >= 1, a ZeRO stage, paths inside the
// folder and shards tiling [0, total_parameters), and survives
// manifest_to_json unchanged; a rejected one has an error; a check keeps its
// manifest exactly when manifest_from_json accepts it, says a problem exactly
// when the checkpoint is not valid, and is valid only for the folder's step.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "launcher/controller/checkpoint_catalog.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using dslaunch::fuzz::require;
namespace controller = dslaunch::controller;

constexpr int64_t kStep = 120;

bool inside_folder(const std::string& path) {
  if (path.empty() || path.front() == '/') return false;
  for (size_t start = 0; start <= path.size();) {
    const size_t slash = std::min(path.find('/', start), path.size());
    const std::string part = path.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

void check_manifest(const controller::CheckpointManifest& manifest) {
  require(manifest.format_version == 1 || manifest.format_version == 2);
  require(manifest.data_parallel >= 1 && manifest.tensor_parallel >= 1 &&
          manifest.pipeline_parallel >= 1);
  require(manifest.zero_stage >= 0 && manifest.zero_stage <= 3);
  require(!manifest.shards.empty());
  int64_t covered = 0;
  for (const controller::ShardRecord& shard : manifest.shards) {
    require(inside_folder(shard.path));
    require(shard.begin == covered && shard.end >= shard.begin && shard.size_bytes >= 0);
    covered = shard.end;
  }
  require(covered == manifest.total_parameters);

  std::string error;
  const nlohmann::json written = controller::manifest_to_json(manifest);
  const auto reread = controller::manifest_from_json(written, error);
  require(reread.has_value() && controller::manifest_to_json(*reread) == written);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const std::string shard = input.ConsumeRandomLengthString(512);
  const std::string text = input.ConsumeRemainingBytesAsString();

  std::optional<controller::CheckpointManifest> accepted;
  std::string error;
  if (const auto json = dslaunch::core::parse_untrusted_json(text, error)) {
    accepted = controller::manifest_from_json(*json, error);
    if (accepted) {
      check_manifest(*accepted);
    } else {
      require(!error.empty());
    }
  }

  dslaunch::fuzz::clear_scratch_dir();
  const std::string dir =
      dslaunch::fuzz::scratch_dir() + "/" + controller::checkpoint_dir_name(kStep);
  dslaunch::fuzz::write_scratch_file(controller::checkpoint_dir_name(kStep) + "/rank_0.bin", shard);
  dslaunch::fuzz::write_scratch_file(controller::checkpoint_dir_name(kStep) + "/manifest.json",
                                     text);
  const controller::CheckpointCheck check = controller::check_checkpoint(dir, true);
  require(check.step == kStep);
  require(check.verdict != controller::CheckpointVerdict::kNeverCommitted);
  require(check.valid() == check.problem.empty());
  require(check.manifest.has_value() == accepted.has_value());
  if (accepted) {
    require(controller::manifest_to_json(*check.manifest) ==
            controller::manifest_to_json(*accepted));
  }
  if (check.valid()) require(accepted && accepted->step == kStep);
  return 0;
}
