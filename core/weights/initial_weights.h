#pragma once

#include <string>

#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/status.h"

namespace dslaunch::core {

// training.init_from: Hugging Face GPT-2 weights (a safetensors file, see
// load_hf_gpt2) a job starts from instead of a random initialisation.

// OK when the weights at `path` fit a model of shape `model` (layers,
// channels, heads, vocabulary, positions), without reading their values;
// otherwise an error naming the file and each size that differs.
Status initial_weights_problem(const std::string& path, const Gpt2Config& model);

// Reads the weights at `path` into this rank's part of the model: the slice
// `table` describes (any tensor-parallel rank and pipeline stage) of the
// whole model they hold; `params` holds table.total() floats. The padding
// rows of the token embedding are zero.
Status load_initial_weights(const std::string& path, const ParameterTable& table, float* params);

}  // namespace dslaunch::core
