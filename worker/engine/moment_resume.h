#pragma once

#include <cstdint>
#include <vector>

#include "core/checkpoint/shard_file.h"
#include "core/layout/parameter_table.h"
#include "core/status.h"
#include "worker/engine/optimizer.h"

namespace dslaunch::worker::engine {

// Resuming: the optimizer's moments of the layout's floats [begin, begin +
// count) (what `optimizer` updates) from a checkpoint's shards, a swap group
// at a time (never the whole moments at once in host memory), and the
// optimizer steps taken. kDataLoss when the shards cannot give them.
core::Status resume_moments(AdamW& optimizer, const std::vector<core::ShardLocation>& shards,
                            const std::vector<core::LayoutTensor>& layout, int64_t begin,
                            int64_t count, int64_t optimizer_steps);

}  // namespace dslaunch::worker::engine
