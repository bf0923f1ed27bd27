#pragma once

#include "launcher/spec/job_spec.h"
#include "worker/model/gpt2_config.h"

namespace dslaunch::worker::engine {

// The model shape a spec describes, its vocabulary padded as Megatron pads
// it for `tensor_parallel` ranks.
model::Gpt2Config model_config(const spec::ModelSpec& model, int tensor_parallel);

}  // namespace dslaunch::worker::engine
