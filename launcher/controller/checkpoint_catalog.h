#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dslaunch::controller {

// The checkpoints of one job, as the controller sees them on disk:
//   <root>/step_00000120/            one folder per saved step
//   <root>/step_00000120/<shards>    one file per data-parallel rank, written by the rank
//   <root>/step_00000120/manifest.json  written by the controller alone, last,
//                                    when every rank has reported its shard
//   <root>/latest                    "step_00000120\n", moved after the manifest
// A checkpoint without a valid manifest cannot be resumed; one without any
// manifest.json is a save that did not complete (see CheckpointVerdict).
// Functions return false / nullopt and set `error` (naming the
// file and the reason) on failure. Not thread-safe: the controller serialises
// writes; readers may run beside a save (they see the old state or the new).

// One rank's shard as the rank reported it.
struct ShardRecord {
  int rank = 0;
  std::string path;  // relative to the checkpoint folder
  int64_t size_bytes = 0;
  std::string xxh64;  // 16 lowercase hex digits, as file_xxh64 gives it
  int64_t begin = 0;  // the range [begin, end) of its flat layout it holds
  int64_t end = 0;
  // The slice of the model the rank held: its tensor rank, its pipeline
  // stage and the elements of its flat layout. A whole model's manifest
  // (tensor_parallel x pipeline_parallel = 1) leaves them out: 0, 0 and 0,
  // which stands for the manifest's total_parameters.
  int tensor_rank = 0;
  int stage = 0;
  int64_t slice_parameters = 0;
};

struct CheckpointManifest {
  int format_version = 2;  // the manifest's and its shards'; 1 is read too
  std::string job_id;
  std::string spec_hash;  // spec_hash() of the resolved spec the job ran with
  int64_t step = 0;
  int64_t tokens_seen = 0;
  int64_t samples_seen = 0;
  int attempt = 0;
  int data_parallel = 1;
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int zero_stage = 0;
  // The whole model's parameters, as one rank without tensor or pipeline
  // parallelism holds them (the vocabulary padded as for one tensor rank).
  int64_t total_parameters = 0;
  // Opaque to the controller: handed back to the workers on resume as saved.
  nlohmann::json data_positions;
  nlohmann::json rng_states;
  nlohmann::json scheduler;
  nlohmann::json loss_scaler;
  // The model's shape (GPT-2's hyperparameters), so that a checkpoint says
  // by itself what it holds: `dslaunch export` reads it.
  nlohmann::json model;
  int64_t created_unix_ms = 0;
  // Sorted by (stage, tensor_rank, begin): each slice's shards tile its
  // layout, and every (stage, tensor rank) of the grid has its slice.
  std::vector<ShardRecord> shards;
};

nlohmann::json manifest_to_json(const CheckpointManifest& manifest);
// Strict: every field present with its type (the four opaque fields may hold
// any JSON value), a known format_version, parallel sizes >= 1, zero_stage in
// 0..3, shard paths relative and inside the folder, and the shards sorted by
// begin covering [0, total_parameters) with no gap or overlap. `error` names
// the field, or the gap / overlap and the shards around it.
std::optional<CheckpointManifest> manifest_from_json(const nlohmann::json& json,
                                                     std::string& error);

// "step_00000120" for 120 (wider past 8 digits). Precondition: step >= 0.
std::string checkpoint_dir_name(int64_t step);
// 120 for "step_00000120"; nullopt for any name checkpoint_dir_name does not give.
std::optional<int64_t> step_of_dir_name(std::string_view name);

// Writes <checkpoint_dir>/manifest.json: a temporary file in the same folder,
// fsynced, renamed over manifest.json, then the folder fsynced. On failure
// (ENOSPC, ...) the temporary file is removed and no manifest.json is left
// half-written. Refuses a manifest that manifest_from_json would reject.
// The folder must exist.
bool write_manifest(const std::string& checkpoint_dir, const CheckpointManifest& manifest,
                    std::string& error);

// What a check found, and so what a resume may do with the folder. Only a
// save that provably never committed may be removed: the controller writes
// manifest.json last, so a folder without one never committed (or lost its
// manifest to a pruning cut short). Anything with a manifest is kept.
enum class CheckpointVerdict {
  kValid,
  kNeverCommitted,  // no manifest.json: an unfinished save; may be removed
  kBroken,          // committed, but the manifest or a shard fails a check: set aside, keep
  kUnusable,        // cannot be judged here (a newer format, an unreadable manifest):
                    // a resume stops and touches nothing
};

struct CheckpointCheck {
  std::string dir;
  int64_t step = -1;  // from the folder name; -1 when the name is not step_<N>
  CheckpointVerdict verdict = CheckpointVerdict::kValid;
  // Set whenever manifest.json parses and is valid, even if a shard is bad.
  std::optional<CheckpointManifest> manifest;
  // The manifest's "model" when manifest.json is a JSON object that has one,
  // even if the rest of it is invalid: what the foreign-model check compares.
  nlohmann::json recorded_model;
  std::string problem;  // one line, "checkpoint step_00000120: ..."; "" when usable
  bool valid() const { return verdict == CheckpointVerdict::kValid; }
};

// Valid when manifest.json exists and parses, its step is the folder name's,
// and every shard file exists with its recorded size and, if
// `verify_checksums`, its recorded xxh64 (this reads every shard in full).
// Reports the first problem found; sizes are all checked before any checksum.
// A format_version newer than this build's, or a manifest.json that exists
// but cannot be read, is kUnusable.
CheckpointCheck check_checkpoint(const std::string& checkpoint_dir, bool verify_checksums);

// Every step_<N> folder under `root`, newest (largest step) first, checked.
// A missing root gives an empty list.
// A root that exists but cannot be listed sets *error (when given).
std::vector<CheckpointCheck> list_checkpoints(const std::string& root, bool verify_checksums,
                                              std::string* error = nullptr);

struct NewestValid {
  std::optional<CheckpointCheck> found;  // none when no checkpoint is valid
  std::vector<CheckpointCheck> skipped;  // newer ones that failed, newest first
  // The root exists but cannot be listed, or the search met a kUnusable
  // checkpoint before any valid one: nothing may be resumed or touched.
  std::string error;
};
// The checkpoint to resume from, checksums verified. Stops at the first valid
// one, so older checkpoints are not read, and at the first kUnusable one.
NewestValid find_newest_valid(const std::string& root);

// Replaces <root>/latest with "step_<N>\n" atomically (temporary file,
// rename, folder fsynced). Precondition: step >= 0.
bool write_latest(const std::string& root, int64_t step, std::string& error);
// The step <root>/latest names; nullopt when it is missing or malformed.
// A hint only: find_newest_valid is what decides where to resume.
std::optional<int64_t> read_latest(const std::string& root);

// Keeps the newest `keep` valid checkpoints (manifest and shard sizes checked,
// not checksums) and deletes older valid ones and the unfinished saves
// (kNeverCommitted) older than the newest valid one. Broken and unusable
// checkpoints are committed data and are never deleted. Folders newer than
// the newest valid one may be saves in progress and are left alone; the
// newest valid one is never deleted (a keep below 1 counts as 1). Each folder
// loses its manifest.json first, so a deletion cut short leaves a folder that
// is plainly unfinished. Returns the folders removed, oldest first; on a
// failure `error` is set and the folders removed until then are returned.
// Only folders up to `up_to_step` are considered (the step just committed):
// newer ones may be saves in progress.
std::vector<std::string> prune_checkpoints(const std::string& root, int keep, std::string& error,
                                           int64_t up_to_step = INT64_MAX);

// Renames a broken checkpoint folder to <dir>.broken (or .broken-2, ...),
// which no listing counts, so that steps trained again are saved into a
// fresh folder and nothing is deleted. The new path, or "" with `error`.
std::string set_aside_checkpoint(const std::string& dir, std::string& error);

// The xxh64 of the resolved spec text as 16 hex digits: a resumed job must run
// the spec its checkpoint was saved with.
std::string spec_hash(std::string_view resolved_spec_yaml);

}  // namespace dslaunch::controller
