#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/file_system.h"

namespace dslaunch::controller {

// Where jobs live: $DSLAUNCH_HOME/jobs, else ~/.dslaunch/jobs.
std::string default_jobs_root();

// "<name>-<YYYYmmdd-HHMMSS>-<4 hex>": sortable by start time, unique enough
// for one user's jobs.
std::string new_job_id(const std::string& name);

// The record of one job on disk, written by the controller alone:
//   <dir>/spec.yaml                 the resolved spec
//   <dir>/state.json                the job and every rank now (atomically replaced)
//   <dir>/events.jsonl              one JSON object per event: time, rank, kind, detail
//   <dir>/metrics.jsonl             one JSON object per training step
//   <dir>/token                     the job's secret, mode 0600 (for `status`/`stop`)
//   <dir>/logs/controller.log       the controller's log, appended by every run
//   <dir>/logs/attempt_<k>/rank_<r>/{stdout,stderr}.log
// Beside them, written by others: <dir>/checkpoints/ (the ranks' shards, the
// committer's manifests; see checkpoint_catalog.h), <dir>/weights/ (rank 0),
// and <dir>/.lock (DirectoryLock, held by the dslaunch running the job).
// Private to the user: the folders it makes are 0700, the files 0600.
// Methods return false and set `error` (naming the file and the reason) on
// failure. Files are created, replaced and synced through the FileSystem
// given (which must outlive the object); events and metrics are appended
// with plain POSIX calls. Not thread-safe: the controller serialises writes.
class JobDirectory {
 public:
  // Creates `root`/`job_id` (and `root`, as needed); an existing folder is
  // reused (a resumed job) as it is.
  static std::optional<JobDirectory> create(const std::string& root, const std::string& job_id,
                                            std::string& error,
                                            core::FileSystem& fs = core::default_file_system());
  // An existing job folder (for status, logs, stop).
  static std::optional<JobDirectory> open(const std::string& dir, std::string& error,
                                          core::FileSystem& fs = core::default_file_system());

  const std::string& path() const { return path_; }
  std::string job_id() const;

  bool write_spec(std::string_view yaml, std::string& error);
  // Written to a temporary file, fsynced and renamed over state.json, so a
  // reader never sees half a state.
  bool write_state(const nlohmann::json& state, std::string& error);
  std::optional<nlohmann::json> read_state(std::string& error) const;
  bool append_event(int rank, std::string_view kind, std::string_view detail, std::string& error);
  bool append_metrics(const nlohmann::json& step_metrics, std::string& error);
  bool write_token(std::string_view token, std::string& error);
  std::optional<std::string> read_token(std::string& error) const;
  // The log file of one rank in one attempt, created empty (0600) with its
  // folders when missing, or "" with `error` set.
  std::string rank_log_path(int attempt, int rank, std::string_view stream /* stdout|stderr */,
                            std::string& error) const;
  // logs/controller.log, created empty (0600) with its folder when missing,
  // or "" with `error` set.
  std::string controller_log_path(std::string& error) const;

 private:
  JobDirectory(std::string path, core::FileSystem& fs) : path_(std::move(path)), fs_(&fs) {}
  // `folder`/`name`, made (private) with its folders when missing.
  std::string private_log(const std::string& folder, std::string_view name,
                          std::string& error) const;
  std::string path_;
  core::FileSystem* fs_;
};

// Job folders under `root`, oldest first (by job id).
std::vector<std::string> list_job_dirs(const std::string& root);

}  // namespace dslaunch::controller
