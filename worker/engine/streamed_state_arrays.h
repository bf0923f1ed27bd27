#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "core/status.h"
#include "worker/engine/optimizer.h"

namespace dslaunch::worker::engine {

// A checkpoint slice's arrays (the fp32 parameters, Adam's two moments)
// where they are not in host memory (in swap files, on a GPU): each is read
// into the shard a range at a time as it is written. `read_parameters(from,
// count, out)` gives the slice's parameters from its first; the moments are
// the optimizer's from its float `moment_first` on. Both must outlive the
// arrays.
std::vector<core::ShardArrayData> streamed_state_arrays(
    std::function<core::Status(int64_t from, int64_t count, float* out)> read_parameters,
    AdamW& optimizer, int64_t moment_first);

}  // namespace dslaunch::worker::engine
