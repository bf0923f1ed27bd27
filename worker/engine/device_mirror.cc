#include "worker/engine/device_mirror.h"

namespace dslaunch::worker::engine {

DeviceMirror::DeviceMirror(kernels::Backend& device, int64_t n, bool parameters)
    : device_(device), parameters_(device, parameters ? n : 0), gradients_(device, n) {
  device_.memset_zero(gradients_.data(), gradients_.bytes());
}

void DeviceMirror::upload_parameters(const float* host) {
  device_.copy_host_to_device(parameters_.data(), host, parameters_.bytes());
}

void DeviceMirror::take_gradients(int64_t begin, int64_t end, float* host) {
  const int64_t bytes = (end - begin) * static_cast<int64_t>(sizeof(float));
  device_.copy_device_to_host(host + begin, gradients_.data() + begin, bytes);
  device_.memset_zero(gradients_.data() + begin, bytes);
}

}  // namespace dslaunch::worker::engine
