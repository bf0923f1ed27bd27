#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace dslaunch::core {

// The optimizer on a GPU (worker/engine/optimizer.h, AdamW::place_on_device)
// updates this many floats (16 MiB) a kernel at a time, and a checkpoint or
// a resume moves its masters and moments through host memory a piece of
// this size at a time, whatever the partition's size.
inline constexpr int64_t kDeviceOptimizerChunk = int64_t{1} << 22;

// offload_optimizer.ratio below 1 on a GPU (DeepSpeed's partial offload):
// of a partition of `elements` floats, the first this many keep their fp32
// masters and Adam's moments in host memory, where CPU Adam updates them;
// the rest stay on the GPU.
inline int64_t host_optimizer_elements(int64_t elements, double ratio) {
  return std::clamp<int64_t>(std::llround(ratio * static_cast<double>(elements)), 0, elements);
}

// Host bytes of that share: masters and both moments in fp32, and the
// gradients and updated weights of one chunk on their way between the GPU
// and the host.
inline int64_t host_optimizer_bytes(int64_t host_elements) {
  return (3 * host_elements + 2 * std::min(host_elements, kDeviceOptimizerChunk)) * 4;
}

// GPU bytes that optimizer holds for `elements` parameters: Adam's two
// moments, and in 16-bit training their fp32 masters (in fp32 training the
// masters are the weights on the GPU, counted with them).
inline int64_t device_optimizer_bytes(int64_t elements, bool mixed) {
  return ((mixed ? elements : 0) + 2 * elements) * 4;
}

// Every model state on the GPU (worker/engine/device_model_state.cc: the
// optimizer there, ZeRO stages 0-3): what one rank of a data group of
// `ranks` holds for `parameters` floats. At stage 3 the weights are this
// rank's partition; what is gathered around each use is apart
// (core::gathered_peak_bytes, zero3_regions.h), as is backward's
// gradient buffer at stages 2-3 over several ranks, resident a range at a
// time (core::backward_gradient_peak_bytes).
struct DeviceStateShape {
  int64_t parameters = 0;
  int ranks = 1;
  int stage = 0;
  bool mixed = false;  // 16-bit training: the optimizer keeps fp32 masters
  // zero_optimization.reduce_bucket_size, and whether gradients travel in
  // 16 bits (communication_data_type).
  int64_t bucket_elements = 500'000'000;
  bool narrow_wire = false;
  // offload_optimizer.ratio with device cpu: the share of this rank's
  // optimizer states kept in host memory (host_optimizer_elements()).
  double host_optimizer_share = 0;
};

struct DeviceStateBytes {
  int64_t parameters = 0;  // fp32 weights, whole (padded to the partitions); stage 3: a partition
  // Backward's, whole; at stages 2-3 over several ranks this rank's
  // partition of the means only.
  int64_t gradients = 0;
  // device_optimizer_bytes() of this rank's partition, but for the share
  // in host memory, whose host_optimizer_bytes() are apart.
  int64_t optimizer_states = 0;
  int64_t host_optimizer_states = 0;  // in host memory, not in total()
  // The data group's reduction (worker/parallel/device_gradient_reducer.h):
  // one bucket's share summed in fp32, and in 16-bit communication a
  // bucket, every rank's share and a share widened.
  int64_t communication_buffers = 0;
  int64_t total() const {
    return parameters + gradients + optimizer_states + communication_buffers;
  }
};

inline DeviceStateBytes device_state_bytes(const DeviceStateShape& shape) {
  const int64_t n = shape.parameters;
  const int ranks = std::max(1, shape.ranks);
  // ZeRO's partition as worker/parallel/zero_partition.h cuts it: whole
  // multiples of 16 floats.
  const auto partition_size = [n](int over) { return ((n + over - 1) / over + 15) / 16 * 16; };
  const int64_t optimizer_part = partition_size(shape.stage >= 1 ? ranks : 1);
  const int64_t owned = std::min(optimizer_part, n);  // rank 0's, the largest
  DeviceStateBytes bytes;
  bytes.parameters =
      shape.stage >= 3 ? optimizer_part * 4 : optimizer_part * (shape.stage >= 1 ? ranks : 1) * 4;
  bytes.gradients = ranks > 1 && shape.stage >= 2 ? owned * 4 : n * 4;
  const int64_t on_host = host_optimizer_elements(owned, shape.host_optimizer_share);
  bytes.optimizer_states = device_optimizer_bytes(owned - on_host, shape.mixed);
  if (on_host > 0) bytes.host_optimizer_states = host_optimizer_bytes(on_host);
  if (ranks > 1) {
    // Buckets are capped at the buffer (and at about 2^31 floats, which no
    // bucket size in use reaches).
    const int64_t bucket = std::max<int64_t>(1, std::min(shape.bucket_elements, n));
    const int64_t share = std::max<int64_t>(1, std::min(bucket, partition_size(ranks)));
    bytes.communication_buffers = share * 4;
    if (shape.narrow_wire)
      bytes.communication_buffers += bucket * 2 + ranks * share * 2 + share * 4;
  }
  return bytes;
}

}  // namespace dslaunch::core
