// The default, CPU-only build: no CUDA backend is compiled in.
#include "kernels/accelerator.h"

namespace dslaunch::kernels {

AcceleratorReport probe_accelerators() {
  AcceleratorReport report;
  report.cuda_backend_built = false;
  report.error = "the CUDA backend is not built in (build with --config=cuda)";
  return report;
}

}  // namespace dslaunch::kernels
