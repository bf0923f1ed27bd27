#include "worker/engine/device_mirror.h"

namespace dslaunch::worker::engine {

DeviceMirror::DeviceMirror(kernels::Backend& device, int64_t n, bool parameters,
                           bool sparse_gradients)
    : device_(device),
      parameters_(device, parameters ? n : 0),
      gradients_(device, sparse_gradients ? 0 : n) {
  if (sparse_gradients) {
    pages_.emplace(device, n);
  } else {
    device_.memset_zero(gradients_.data(), gradients_.bytes());
  }
}

void DeviceMirror::upload_parameters(const float* host) {
  device_.copy_host_to_device(parameters_.data(), host, parameters_.bytes());
}

void DeviceMirror::take_gradients(int64_t begin, int64_t end, float* host) {
  if (!pages_) {
    take_gradient_part(begin, end, host);
    return;
  }
  device_.copy_device_to_host(host + begin, gradients() + begin,
                              (end - begin) * static_cast<int64_t>(sizeof(float)));
  pages_->consumed(begin, end);
}

void DeviceMirror::take_gradient_part(int64_t begin, int64_t end, float* host) {
  const int64_t bytes = (end - begin) * static_cast<int64_t>(sizeof(float));
  device_.copy_device_to_host(host + begin, gradients() + begin, bytes);
  device_.memset_zero(gradients() + begin, bytes);
}

}  // namespace dslaunch::worker::engine
