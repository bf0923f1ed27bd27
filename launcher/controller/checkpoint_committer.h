#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/controller/checkpoint_catalog.h"
#include "proto/dslaunch.pb.h"

namespace dslaunch::controller {

// The controller's half of a checkpoint: it collects every rank's report
// that its shard of step S is durable, and only when all `ranks` have
// reported writes spec.yaml and the manifest (atomically), then moves `latest`, then
// deletes what checkpoint.keep no longer keeps. Until then the checkpoint
// does not exist. Not thread-safe: the job handler calls it under its lock.
class CheckpointCommitter {
 public:
  struct Settings {
    std::string root;  // checkpoint.dir, resolved
    int keep = 3;
    int ranks = 1;
    // Everything but the step's own fields (step, tokens_seen, samples_seen,
    // data_positions' consumed samples, scheduler step, shards, time).
    // total_parameters 0: taken from the first shard reported.
    CheckpointManifest base;
    int64_t samples_per_step = 0;  // the global batch
    int64_t tokens_per_step = 0;
    // Where this attempt began: the step resumed from and the samples and
    // tokens consumed by then (the global batch may have been another).
    int64_t first_step = 0;
    int64_t samples_before = 0;
    int64_t tokens_before = 0;
    // Saved as spec.yaml beside every manifest, so a checkpoint says by
    // itself what model it holds (dslaunch export reads it).
    std::string resolved_spec_yaml;
  };

  struct Outcome {
    bool committed = false;  // this report completed step `step`'s checkpoint
    int64_t step = -1;
    std::string error;                 // the manifest or `latest` could not be written
    std::vector<std::string> removed;  // checkpoints deleted by keep
  };

  explicit CheckpointCommitter(Settings settings);

  // One KIND_CHECKPOINT_WRITTEN event of `rank`. A rank reporting the same
  // step twice, or a shard outside the layout, is an error in `Outcome`.
  Outcome on_shard_written(int rank, const v1::WorkerEvent& event, int64_t now_unix_ms);

  // The newest step committed by this object.
  std::optional<int64_t> last_committed() const { return last_committed_; }

 private:
  Outcome commit(int64_t step, int64_t now_unix_ms);

  Settings settings_;
  // Per step not yet committed: each reporting rank's shard.
  std::map<int64_t, std::map<int, ShardRecord>> pending_;
  std::optional<int64_t> last_committed_;
};

}  // namespace dslaunch::controller
