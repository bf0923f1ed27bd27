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
class ParameterGatherer {
 public:
  using Range = std::pair<int64_t, int64_t>;

  // comm: the data-parallel group, duplicated (collective). partition: over comm's ranks. master:
  // the whole layout's address space (padded_total() floats), of which this rank's partition holds
  // its values; workspace: partition.total floats. Both owned by the caller, alive and not moved
  // for this object's lifetime, and master not written while a gather may run. Ranges longer than
  // INT_MAX floats are split. A failure here or in a gather sticks: error() says it, acquire()
  // stops waiting and no more collectives are started.
  ParameterGatherer(comm::Communicator& comm, const ZeroPartition& partition, const float* master,
                    ReleasableBuffer& workspace, std::vector<std::vector<Range>> regions);
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
  // Starts gathering `region` unless it is resident or already requested;
  // returns without waiting.
  void prefetch(int region);
  // prefetch(), then waits until the region is resident (or an error).
  void acquire(int region);
  // Gives a resident region's pages back; a region not resident is left as it is.
  void release(int region);
  // Floats gathered for `region` (its ranges' total length).
  int64_t region_size(int region) const { return sizes_[region]; }
  // Whether `region` was requested (prefetch() or acquire()) and not released
  // since: resident or being gathered.
  bool live(int region) const;
  // The live regions' total size. As long as release() follows acquire(),
  // live() and live_floats() follow the calls made, not the gathers'
  // progress, so ranks making the same calls see the same values (safe to
  // base collective decisions on).
  int64_t live_floats() const;
  // "" or the first failure.
  std::string error() const;

 private:
  enum class State { kReleased, kRequested, kResident };

  void communication_loop();
  std::string gather(int region);  // communication thread only

  ZeroPartition partition_;
  const float* master_;
  OwnLoader own_loader_;
  ReleasableBuffer& workspace_;
  std::vector<std::vector<Range>> regions_;
  std::vector<int64_t> sizes_;                // per region
  std::unique_ptr<comm::Communicator> comm_;  // our duplicate
  int rank_ = 0;
  comm::Blocks blocks_;  // per rank, communication thread only

  mutable std::mutex mutex_;
  std::condition_variable requested_or_stopping_;
  std::condition_variable gathered_;
  std::vector<State> states_;
  int64_t live_floats_ = 0;
  std::deque<int> queue_;
  std::string error_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dslaunch::worker
