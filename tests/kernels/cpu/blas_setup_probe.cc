// Calls ensure_fast_blas() as a real main() would, then prints what OpenBLAS
// runs and the environment it was left, for blas_setup_test.
#include <cblas.h>

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/blas_setup.h"

int main(int argc, char** argv) {
  dslaunch::kernels::ensure_fast_blas(argv);
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const char* marker = std::getenv("DSL_BLAS_REEXEC");
  std::printf("core=%s\ncoretype=%s\nmarker=%s\n", openblas_get_corename(),
              coretype != nullptr ? coretype : "", marker != nullptr ? marker : "");
  for (int i = 1; i < argc; ++i) std::printf("arg=%s\n", argv[i]);
  return 0;
}
