#include "kernels/cpu/blas_info.h"

#include <cblas.h>

#include <cstdlib>

namespace dslaunch::kernels {

BlasInfo query_blas_info() {
  BlasInfo info;
  info.core_name = openblas_get_corename();
  info.config = openblas_get_config();
  info.threads = openblas_get_num_threads();
  if (const char* coretype = std::getenv("OPENBLAS_CORETYPE")) info.coretype_override = coretype;
  return info;
}

}  // namespace dslaunch::kernels
