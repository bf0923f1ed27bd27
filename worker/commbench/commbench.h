#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "worker/commbench/collective.h"
#include "worker/comm/process_groups.h"

namespace dslaunch::worker::commbench {

// What `kind: commbench` measures. Defaults follow nccl-tests' (-w 5, -n 20,
// doubling sizes).
struct CommbenchOptions {
  std::vector<Collective> collectives = {Collective::all_reduce, Collective::all_gather,
                                         Collective::reduce_scatter, Collective::all_to_all};
  std::vector<comm::Axis> groups = {comm::Axis::world};
  int64_t min_bytes = 1024;              // >= 4 (one float32)
  int64_t max_bytes = 16 * 1024 * 1024;  // >= min_bytes; at most 2^31-1 floats
  int iterations = 20;                   // timed calls per measurement, >= 1
  int warmup = 5;                        // untimed calls before them, >= 0
  // Asked on every rank after each measurement; when any rank answers true
  // (agreed by an all-reduce over the world), the benchmark ends early.
  std::function<bool()> stop_requested;
};

// One measurement: one collective at one size on one kind of group.
struct CommbenchResult {
  std::string group;       // axis_name: "world", "pipeline", "data", "tensor"
  std::string collective;  // collective_name
  int64_t bytes = 0;       // Message::bytes, per rank as nccl-tests counts it
  int ranks = 0;           // ranks in each group
  double time_us = 0;      // mean time per call, the slowest rank of the world's
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  bool correct = false;  // every output element on every rank was right
};

// The problem with `options`, or "" when it can be run.
std::string check_options(const CommbenchOptions& options);

// Collective over every rank of `groups.world()`: every rank must call it
// with the same options. For each axis of `options.groups` whose groups hold
// more than one rank, each collective and each size from min_bytes doubling
// up to max_bytes, every group of that axis runs the collective at once:
// `warmup` calls, a barrier over the world, then `iterations` timed calls;
// then every rank checks every element of its output (see check.h). The
// time is the slowest rank's, and `correct` holds only if every rank's output
// was right, so every rank gets the same results. Sizes too small to give
// each rank an element are skipped.
//
// Calls `on_result` (if set) on every rank after each measurement, in order,
// and returns all of them. Allocates two buffers of max_bytes each, once.
// Runs the communicators training uses (worker/comm), so it measures what
// training gets. On invalid options (detected before any communication) or a
// communication failure, sets `error` and returns the results so far; after
// a failure the other ranks may be blocked in a collective, so the caller
// should end the job.
std::vector<CommbenchResult> run_commbench(
    const comm::ProcessGroups& groups, const CommbenchOptions& options,
    const std::function<void(const CommbenchResult&)>& on_result, std::string& error);

// A table in nccl-tests' manner, for rank 0 to print: a header line, then
// one line per result. Neither ends with a newline.
std::string format_header();
std::string format_result(const CommbenchResult& result);

}  // namespace dslaunch::worker::commbench
