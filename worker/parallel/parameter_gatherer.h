#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/layout/zero3_prefetch.h"
#include "worker/comm/communicator.h"
#include "worker/parallel/releasable_buffer.h"
#include "worker/parallel/zero_partition.h"

namespace dslaunch::worker {

// ZeRO stage 3's parameter gathering: each rank holds only its partition of
// the flat parameters (`master`); the model reads them from a full-size
// `workspace` in which only the regions acquired and not yet released are
// resident.
//
// A region is a list of float ranges [begin, end) of the flat layout (for
// example one transformer block's tensors, minus the small ones every rank
// keeps whole). Gathering a region is one all-gather per range, made by the
// stream thread of this object's communicator: rank r contributes the
// range's intersection with its partition, straight from master into the
// workspace, nothing copied. Releasing a region hands its
// ranges' whole pages back to the OS (ReleasableBuffer::zero), so a
// released range reads as zeros until gathered again.
//
// A communication thread, the only one starting collectives for this object
// (on a duplicate of the data communicator of its own), gathers the regions
// in the order prefetch()/acquire() requested them. Collectives must start
// in the same order on every rank: every rank must request,
// acquire and release the same regions in the same order.
//
// Threads: every public member from one thread (the compute thread).
// Between an acquire() return and the matching release() the region's
// floats in the workspace are the caller's to read; the communication thread
// writes only regions requested and not yet resident.
class ParameterGatherer final : public core::Zero3Gathering {
 public:
  using Range = std::pair<int64_t, int64_t>;

  // comm: the data-parallel group, duplicated (collective). partition: over comm's ranks. master:
  // the whole layout's address space (padded_total() floats), of which this rank's partition holds
  // its values; workspace: partition.total floats. Both owned by the caller, alive and not moved
  // for this object's lifetime, and master not written while a gather may run. Ranges longer than
  // kMaxQuantizableCount floats (just under INT_MAX) are split. A failure here or in a gather
  // sticks: error() says it, acquire() stops waiting and no more collectives are started.
  //
  // secondary_group > 1 (ZeRO++'s hpZ, zero_hpz_partition_size): the data
  // ranks form groups of that many consecutive ranks (a host's), and each
  // rank also keeps a secondary partition: 1/secondary_group of every
  // gathered range, split among its group. The first gather of a region
  // after invalidate_secondary() is over all ranks and fills it; every
  // later gather of the region until the next invalidate_secondary() (the
  // backward pass's, the next micro-batches', evaluation's) is an
  // all-gather of the secondary partitions within the group, never leaving
  // the host.
  ParameterGatherer(comm::Communicator& comm, const ZeroPartition& partition, const float* master,
                    ReleasableBuffer& workspace, std::vector<std::vector<Range>> regions,
                    int secondary_group = 1);
  // Gathers every region already requested (every rank requested the same
  // ones), then joins the thread and frees the duplicate.
  ~ParameterGatherer();

  ParameterGatherer(const ParameterGatherer&) = delete;
  ParameterGatherer& operator=(const ParameterGatherer&) = delete;

  int region_count() const { return static_cast<int>(regions_.size()); }

  // Called on the communication thread with this rank's floats [begin, end)
  // of a range just before the range is gathered, to put them in master
  // (ZeRO-Infinity's parameters on NVMe); returns "" or what failed. Set it
  // before the first prefetch() or acquire().
  using OwnLoader = std::function<std::string(int64_t begin, int64_t end)>;
  void set_own_loader(OwnLoader loader) { own_loader_ = std::move(loader); }
  // ZeRO++'s quantized weights (qwZ): each rank's floats of a range travel
  // int8 block-quantized (block_quantizer) and every rank, this one
  // included, reads them dequantized, so all compute with the same weights;
  // about a quarter of the bytes. Set it before the first prefetch().
  void set_quantized(bool quantized) { quantized_ = quantized; }
  // The parameters changed (an optimizer step): the secondary partitions
  // are stale, and each region's next gather is over all ranks again.
  void invalidate_secondary();
  // Floats of the secondary partitions this rank keeps.
  int64_t secondary_floats() const { return static_cast<int64_t>(secondary_.size()); }
  // Starts gathering `region` unless it is resident or already requested;
  // returns without waiting.
  void prefetch(int region) override;
  // prefetch(), then waits until the region is resident (or an error).
  void acquire(int region);
  // Gives a resident region's pages back; a region not resident is left as it is.
  void release(int region);
  // Floats gathered for `region` (its ranges' total length).
  int64_t region_size(int region) const { return sizes_[region]; }
  // Whether `region` was requested (prefetch() or acquire()) and not released
  // since: resident or being gathered.
  bool live(int region) const override;
  // The live regions' total size. As long as release() follows acquire(),
  // live() and live_floats() follow the calls made, not the gathers'
  // progress, so ranks making the same calls see the same values (safe to
  // base collective decisions on).
  int64_t live_floats() const override;
  // "" or the first failure.
  std::string error() const;

 private:
  enum class State { kReleased, kRequested, kResident };

  void communication_loop();
  std::string gather(int region, bool secondary);  // communication thread only
  // Piece `member` of the secondary split of [begin, end).
  Range secondary_piece(int64_t begin, int64_t end, int member) const;
  std::string gather_secondary(int region);
  void keep_secondary(int region);
  // One range's all-gather, its blocks_ set, this rank's floats at `send`.
  std::string gather_range(int64_t begin, int64_t end, const float* send);
  std::string gather_quantized(int64_t begin, const float* send);

  ZeroPartition partition_;
  const float* master_;
  OwnLoader own_loader_;
  ReleasableBuffer& workspace_;
  std::vector<std::vector<Range>> regions_;
  std::vector<int64_t> sizes_;                // per region
  std::unique_ptr<comm::Communicator> comm_;  // our duplicate
  int rank_ = 0;
  comm::Blocks blocks_;  // per rank, communication thread only
  bool quantized_ = false;
  // Quantized gathers (communication thread only): this rank's floats
  // quantized, and every rank's.
  std::vector<uint8_t> quantized_sent_, quantized_received_;

  mutable std::mutex mutex_;
  std::condition_variable requested_or_stopping_;
  std::condition_variable gathered_;
  std::vector<State> states_;
  int64_t live_floats_ = 0;
  struct Request {
    int region;
    bool secondary;  // from the secondary partitions
  };
  std::deque<Request> queue_;
  // hpZ: the group's communicator, this rank's place in it, where each
  // range's piece starts in secondary_, and which regions' pieces are fresh
  // (compute thread, under mutex_).
  std::unique_ptr<comm::Communicator> group_;
  int member_ = 0;
  std::vector<std::vector<int64_t>> secondary_offsets_;
  std::vector<float> secondary_;
  std::vector<bool> secondary_fresh_;
  comm::Blocks group_blocks_;  // communication thread only
  std::string error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dslaunch::worker
