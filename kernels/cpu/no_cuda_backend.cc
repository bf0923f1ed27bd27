// make_cuda_backend_if_built() for the CPU-only build.
#include "kernels/cuda_backend_factory.h"

namespace dslaunch::kernels {

core::StatusOr<std::unique_ptr<Backend>> make_cuda_backend_if_built(int) {
  return core::Status(core::StatusCode::kUnavailable,
                      "this dslaunch is built without the CUDA backend (build it with "
                      "bazel build --config=cuda)");
}

}  // namespace dslaunch::kernels
