#pragma once

#include "core/spec/job_spec.h"
#include "core/layout/gpt2_config.h"

namespace dslaunch::core {

// The model shape a spec describes, its vocabulary padded as Megatron pads
// it for `tensor_parallel` ranks.
core::Gpt2Config model_config(const spec::ModelSpec& model, int tensor_parallel);

}  // namespace dslaunch::core
