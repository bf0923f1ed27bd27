#pragma once

#include <utility>
#include <vector>

#include "core/layout/gpt2_config.h"
#include "core/spec/job_spec.h"

namespace dslaunch::core {

// The blocks [begin, end) of each of parallel.virtual_stage_count() virtual
// stages (the pipeline's stages without interleaving), as
// parallelism.pipeline_partition asks: `parameters` balances the stages'
// parameter counts (the first stage's embeddings and the last's ln_f and
// tied output layer included, as DeepSpeed counts its layers), minimising
// the largest; `uniform` gives each stage the same number of blocks (the
// remainder to the first ones); `explicit` takes the counts given. Every
// stage gets at least one block; the caller has checked that there are
// no more virtual stages than blocks (and, for explicit counts, that they fit).
std::vector<std::pair<int, int>> stage_layer_ranges(const Gpt2Config& config,
                                                    const spec::ParallelismSpec& parallel);

// The model chunks pipeline rank `stage` of `stages` runs: virtual stages
// stage, stage + stages, ... of `ranges`, in order (Megatron's interleaving).
std::vector<std::pair<int, int>> rank_chunks(const std::vector<std::pair<int, int>>& ranges,
                                             int stages, int stage);

}  // namespace dslaunch::core
