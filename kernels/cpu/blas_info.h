#pragma once

#include <string>

namespace dslaunch::kernels {

// What the OpenBLAS library linked into this process reports about itself.
struct BlasInfo {
  std::string core_name;  // kernel family in use, e.g. "SkylakeX" or "Prescott"
  std::string config;     // build configuration string
  int threads = 0;        // threads OpenBLAS will use
  // OPENBLAS_CORETYPE as this process saw it (empty when unset): OpenBLAS
  // reads it once, when the library loads.
  std::string coretype_override;
};

BlasInfo query_blas_info();

}  // namespace dslaunch::kernels
