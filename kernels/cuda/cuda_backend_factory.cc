#include "kernels/cuda_backend_factory.h"

#include <exception>
#include <string>

#include "kernels/cuda/cuda_backend.h"

namespace dslaunch::kernels {

core::StatusOr<std::unique_ptr<Backend>> make_cuda_backend_if_built(int device) {
  try {
    return cuda::make_cuda_backend(device);
  } catch (const std::exception& error) {
    return core::Status(core::StatusCode::kUnavailable,
                        std::string("the CUDA backend cannot start: ") + error.what());
  }
}

}  // namespace dslaunch::kernels
