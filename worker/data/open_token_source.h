#pragma once

#include <string>

#include "core/spec/job_spec.h"
#include "worker/data/token_source.h"

namespace dslaunch::worker::data {

// Opens the token data at `path` as the job spec's data.format says:
//   kLlmc      `path` is an llm.c token file;
//   kMegatron  `path` is a Megatron dataset prefix (a trailing .bin or .idx
//              is stripped unless `path.bin` and `path.idx` exist);
//   kAuto      an llm.c token file when `path` is a file starting with the
//              llm.c magic number, else a Megatron dataset when `path.bin`
//              and `path.idx` exist, or `path` ends in .bin/.idx and the
//              pair exists without it; otherwise an error that lists what
//              was tried.
// The error names the file and what is wrong with it.
TokenSourceResult open_token_source(const std::string& path, spec::DataFormat format);

}  // namespace dslaunch::worker::data
