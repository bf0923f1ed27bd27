#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/layout/parameter_table.h"
#include "core/layout/zero3_prefetch.h"
#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "kernels/sparse_memory.h"
#include "worker/comm/communicator.h"
#include "worker/model/gpt2_model.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker::engine {

// ZeRO stage 3's parameters on a GPU, every one in its memory: this rank's
// partition of the weights the model reads (fp32; in 16-bit training the
// masters' rounding), and the workspace the model reads them from, both
// sparse (kernels/sparse_memory.h) over the whole layout's addresses, so a
// tensor is where the model expects it but only what is gathered takes
// memory. The workspace is cut as on the host (core::Zero3Regions): the
// persistent tensors stay whole, all-gathered after every optimizer step,
// and each region (wpe and ln_f, a block, a vocabulary chunk of wte) is
// committed and all-gathered over the data group's device communicator
// just before its use and released after, in the order the host's
// Zero3Parameters keeps (the last block stays from its forward to its
// backward; the embeddings from the start of forward to the end of
// backward).
//
// The persistent tensors are refreshed by one all-gather of every rank's
// floats of them, packed (as on the host).
//
// Prefetching (DeepSpeed's stage3_prefetch_bucket_size and
// stage3_max_live_parameters) follows core::Zero3Prefetch, as the host's
// does: when the model acquires a region, the regions that follow it are
// requested too — committed, and their all-gathers queued on the
// communicator's stream (NCCL's, which runs them after the GPU's work so
// far and beside the work queued after) — and the host waits only for the
// region acquired, just before the model queues the work that reads it.
// A gather then overlaps the work of the regions before its own.
// core::gathered_peak_bytes() replays the same requests for the plan.
// With one data rank (`comm` null) a gather is a copy from the partition,
// which then is the whole model.
//
// Every rank of the group must make the same calls in the same order. A
// gather that fails (or finds no room) throws from the hook, since the
// model would read what was not gathered; the failure sticks (status()),
// and no more collectives start.
class DeviceZero3Parameters final : public model::ParameterSource, private core::Zero3Gathering {
 public:
  using Range = std::pair<int64_t, int64_t>;

  // Throws std::bad_alloc when the device has no room for the partition or
  // the persistent tensors. `comm` (may be null for one rank), `device` and
  // `table` must outlive it.
  DeviceZero3Parameters(comm::Communicator* comm, kernels::Backend& device,
                        const core::ParameterTable& table, const ZeroPartition& partition,
                        int64_t persistence_threshold, int64_t prefetch_bucket_size,
                        int64_t max_live_parameters);
  // Waits for the gathers still queued (they write into the workspace).
  ~DeviceZero3Parameters() override;
  DeviceZero3Parameters(const DeviceZero3Parameters&) = delete;
  DeviceZero3Parameters& operator=(const DeviceZero3Parameters&) = delete;

  // The whole layout's address space (padded_total() floats) of which this
  // rank's partition holds memory: its weights, which the optimizer updates.
  float* master() { return static_cast<float*>(master_->data()); }
  // What the model reads (forward()/backward()'s params).
  const float* workspace() const { return static_cast<const float*>(workspace_->data()); }

  // Once the partition holds the initial parameters and after every
  // optimizer step: every rank's persistent floats gathered into the
  // workspace, and any region still gathered released. Collective.
  core::Status refresh_persistent();
  // Releases what a forward pass leaves gathered for its backward (the
  // embeddings and the last block), after one that has no backward.
  void end_forward_only();
  // The whole parameters' floats [from, to) into host memory `out`, a piece
  // at a time through a device buffer. Collective.
  core::Status read_whole(int64_t from, int64_t to, float* out);
  // "" or the first failure of a gather.
  const core::Status& status() const { return status_; }

  // Device bytes: the partition's pages, the persistent tensors' and the
  // workspace's most at once (persistent pages included).
  int64_t partition_bytes() const { return master_->resident_bytes(); }
  int64_t workspace_peak_bytes() const { return workspace_->peak_resident_bytes(); }
  // Over several ranks, the persistent tensors' packed copy.
  int64_t buffer_bytes() const { return packed_.bytes(); }

  void acquire_embeddings() override;
  void release_embeddings() override { release(0); }
  void acquire_vocab_chunk(int chunk, VocabUse use) override;
  void release_vocab_chunk(int chunk, VocabUse use) override;
  void acquire_block(int layer, Pass pass) override;
  void release_block(int layer, Pass pass) override;

 private:
  // Requests `region` unless it is live, calls `prefetch_next` (which
  // requests what follows), then waits for the region's gathers; throws
  // std::runtime_error when it cannot (no room, or a failed gather).
  template <typename PrefetchNext>
  void acquire(int region, const PrefetchNext& prefetch_next);
  // Waits for the region's gathers still queued, then gives its pages back
  // (stream-ordered: after the work queued that reads them).
  void release(int region);
  // Commits `region` and queues its gathers (throws as acquire()).
  void request(int region);
  // Waits for `region`'s queued gathers; the first failure sticks.
  core::Status wait_gathered(int region);
  // core::Zero3Gathering, for prefetch_.
  bool live(int region) const override { return live_[region]; }
  int64_t live_floats() const override { return live_floats_; }
  void prefetch(int region) override { request(region); }
  int64_t region_floats(int region) const;
  // Every rank's floats of each range all-gathered from the partitions into
  // `into` (addressed from the layout's start, or from `from` below), the
  // collectives' Works added to `queued` (with one rank: copies, no Work).
  void start_gather(const std::vector<Range>& ranges, float* into, int64_t from,
                    std::vector<std::unique_ptr<comm::Work>>& queued);
  // start_gather(), waited for.
  core::Status gather(const std::vector<Range>& ranges, float* into, int64_t from = 0);

  comm::Communicator* comm_;
  kernels::Backend& device_;
  const ZeroPartition partition_;
  const int rank_;
  int layers_ = 0;
  int chunks_ = 0;  // wte's vocabulary chunks (0: wte is persistent)
  std::vector<Range> persistent_;
  std::vector<std::vector<Range>> regions_;
  std::optional<core::Zero3Prefetch> prefetch_;
  std::vector<bool> live_;  // requested and not released
  int64_t live_floats_ = 0;
  // Per region, its gathers queued and not yet waited for.
  std::vector<std::vector<std::unique_ptr<comm::Work>>> queued_;
  std::unique_ptr<kernels::SparseMemory> master_;
  std::unique_ptr<kernels::SparseMemory> workspace_;
  // Every rank's floats of the persistent tensors, packed in layout order
  // (block r: rank r's), over several ranks.
  kernels::DeviceBuffer<float> packed_;
  comm::Blocks packed_blocks_;
  core::Status status_;
};

}  // namespace dslaunch::worker::engine
