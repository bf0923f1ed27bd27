#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::launcher {

// A checkpoint's whole parameters, however many ranks wrote it at whatever
// ZeRO stage: what `dslaunch export` writes as safetensors.
struct ConsolidatedCheckpoint {
  int64_t step = 0;
  core::Gpt2Config config;
  std::vector<float> params;  // the flat layout of ParameterTable(config)
  std::string error;          // set when nothing could be read
};

// Reads the checkpoint folder `dir` (a step_<N> folder with manifest.json):
// the manifest and every shard's checksum are checked first; the model's
// shape is the manifest's.
ConsolidatedCheckpoint consolidate_checkpoint(const std::string& dir);

// The checkpoint folder `source` names: a step_<N> folder itself, or the
// newest valid checkpoint of a checkpoint root (a folder of step_<N>
// folders). "" with `error` when it names neither or holds none valid.
std::string checkpoint_folder_of(const std::string& source, std::string& error);

}  // namespace dslaunch::launcher
