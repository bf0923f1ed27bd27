#include "worker/engine/optimizer.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/pinned_host_memory.h"

namespace dslaunch::worker::engine {
namespace {

int64_t aligned_bytes(int64_t floats) {
  const int64_t a = core::SwapFile::kSwapAlignment;
  return (floats * static_cast<int64_t>(sizeof(float)) + a - 1) / a * a;
}

struct AlignedFree {
  void operator()(float* p) const { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float, AlignedFree>;

AlignedFloats aligned_floats(int64_t bytes) {
  void* memory = nullptr;
  if (posix_memalign(&memory, core::SwapFile::kSwapAlignment, static_cast<size_t>(bytes)) != 0) {
    return nullptr;
  }
  std::memset(memory, 0, static_cast<size_t>(bytes));
  return AlignedFloats(static_cast<float*>(memory));
}

}  // namespace

// The moments in a swap file, group by group: group g's first moment at
// g * 2 * group_bytes, its second right after. `buffers` hold a group's two
// moments each, reused round-robin.
struct AdamW::Swap {
  std::unique_ptr<core::SwapFile> file;
  int64_t group_elements = 0;
  int64_t group_bytes = 0;  // one moment of a whole group, aligned
  int64_t groups = 0;
  struct Buffer {
    AlignedFloats m, v;
    core::SwapFile::Ticket read_m = -1, read_v = -1, write_m = -1, write_v = -1;
  };
  std::vector<Buffer> buffers;

  int64_t offset(int64_t group, bool second) const {
    return (2 * group + (second ? 1 : 0)) * group_bytes;
  }
  // Floats of group g (the last may be short).
  int64_t length(int64_t group, int64_t total) const {
    return std::min(group_elements, total - group * group_elements);
  }
  core::Status wait_writes(Buffer& buffer) {
    core::Status status;
    for (core::SwapFile::Ticket* ticket : {&buffer.write_m, &buffer.write_v}) {
      if (*ticket >= 0) status = file->wait(std::exchange(*ticket, -1));
    }
    return status;
  }
  void start_read(int64_t group, Buffer& buffer) {
    buffer.read_m = file->start_read(buffer.m.get(), group_bytes, offset(group, false));
    buffer.read_v = file->start_read(buffer.v.get(), group_bytes, offset(group, true));
  }
  core::Status wait_reads(Buffer& buffer) {
    core::Status status = file->wait(std::exchange(buffer.read_m, -1));
    if (status.ok()) status = file->wait(std::exchange(buffer.read_v, -1));
    return status;
  }
  void start_write(int64_t group, Buffer& buffer) {
    buffer.write_m = file->start_write(buffer.m.get(), group_bytes, offset(group, false));
    buffer.write_v = file->start_write(buffer.v.get(), group_bytes, offset(group, true));
  }
};

// The optimizer's states placed on a GPU (place_on_device()). Of the floats
// [begin, end), the first host_count (the host's share) have their fp32
// masters and moments in host memory; the rest (the device's share) have
// them in the GPU's memory, the masters its own or the device's fp32
// weights.
struct AdamW::OnDevice {
  kernels::Backend* backend = nullptr;
  int64_t chunk = 1;
  float* weights = nullptr;  // fp32 training: the device's, from the layout's start
  float* masters = nullptr;  // the device's share's
  kernels::DeviceBuffer<float> own_masters, m, v;
  kernels::Backend* host = nullptr;
  int64_t host_count = 0;
  std::vector<float> host_masters, host_m, host_v;
  // A chunk's gradients and updated weights on their way.
  std::vector<float> staged_grads, staged_weights;
  // The host's share's copies run on a stream of their own, after
  // backward's work (gradients_ready), beside the device's share's update;
  // the default stream waits for them (host_share_done).
  std::unique_ptr<kernels::Stream> copies;
  std::unique_ptr<kernels::Event> gradients_ready, host_share_done;
  // offload_optimizer.pin_memory: the host buffers the copies read and
  // write, page-locked (released before the buffers above, as members go
  // in reverse order), and the bytes of them the device did not pin.
  std::vector<kernels::PinnedHostMemory> pins;
  int64_t unpinned_bytes = 0;
};

template <typename Fn>
void AdamW::split_at_host_share(int64_t from, int64_t count, const Fn& fn) const {
  const int64_t host_count = device_->host_count;
  const int64_t split = std::clamp(host_count, from, from + count);
  if (split > from) fn(true, from, from, split - from);
  if (from + count > split) fn(false, split - host_count, split, from + count - split);
}

AdamW::AdamW(const spec::OptimizerSpec& spec, const core::ParameterTable& table, int64_t begin,
             int64_t end)
    : spec_(spec), begin_(begin), end_(end) {
  for (const core::TensorInfo& tensor : table.tensors()) {
    const int64_t from = std::max(begin, tensor.offset);
    const int64_t to = std::min(end, tensor.offset + tensor.numel);
    if (from < to) spans_.push_back({from, to, tensor.weight_decay});
  }
}

AdamW::~AdamW() = default;

void AdamW::ensure_in_memory() {
  if (swap_ || device_ || !m_.empty()) return;
  m_.assign(end_ - begin_, 0.0f);
  v_.assign(end_ - begin_, 0.0f);
}

int64_t AdamW::moment_group() const {
  if (swap_) return swap_->group_elements;
  // On the device, pieces the size of a step's chunk pass through host memory.
  if (device_) return device_->chunk;
  return std::max<int64_t>(end_ - begin_, 1);
}

void AdamW::place_on_device(kernels::Backend& device, float* weights, int64_t chunk,
                            kernels::Backend* host, int64_t host_count, bool pin_host_share) {
  const int64_t n = end_ - begin_;
  const int64_t on_host = std::clamp<int64_t>(host_count, 0, n);
  if (on_host > 0 && (host == nullptr || !host->memory_is_host())) {
    throw std::invalid_argument("AdamW: a share of the states in host memory needs a host backend");
  }
  auto on = std::make_unique<OnDevice>();
  on->backend = &device;
  on->chunk = std::max<int64_t>(1, std::min(n, chunk));
  on->weights = weights;
  if (weights != nullptr) {
    on->masters = weights + begin_ + on_host;
  } else {
    on->own_masters = kernels::DeviceBuffer<float>(device, n - on_host);
    on->masters = on->own_masters.data();
  }
  on->m = kernels::DeviceBuffer<float>(device, n - on_host);
  on->v = kernels::DeviceBuffer<float>(device, n - on_host);
  // The moments as set_moments() left them, else zeros.
  if (m_.empty()) {
    device.memset_zero(on->m.data(), on->m.bytes());
    device.memset_zero(on->v.data(), on->v.bytes());
  } else {
    device.copy_host_to_device(on->m.data(), m_.data() + on_host, on->m.bytes());
    device.copy_host_to_device(on->v.data(), v_.data() + on_host, on->v.bytes());
  }
  if (on_host > 0) {
    on->host = host;
    on->host_count = on_host;
    try {
      on->host_masters.assign(on_host, 0.0f);
      on->host_m.assign(on_host, 0.0f);
      on->host_v.assign(on_host, 0.0f);
      const int64_t staged = std::min(on_host, on->chunk);
      on->staged_grads.resize(staged);
      on->staged_weights.resize(staged);
    } catch (const std::bad_alloc&) {
      throw HostShareNoRoom();
    }
    if (!m_.empty()) {
      std::copy_n(m_.data(), on_host, on->host_m.data());
      std::copy_n(v_.data(), on_host, on->host_v.data());
    }
    if (pin_host_share) {
      // fp32 training copies the masters back; 16-bit, their rounding.
      std::vector<float>& back = weights != nullptr ? on->host_masters : on->staged_weights;
      for (std::vector<float>* buffer : {&on->staged_grads, &back}) {
        const int64_t bytes = static_cast<int64_t>(buffer->size() * sizeof(float));
        on->pins.emplace_back(device, buffer->data(), bytes);
        on->unpinned_bytes += bytes - on->pins.back().bytes();
      }
    }
    on->copies = device.create_stream();
    on->gradients_ready = device.create_event();
    on->host_share_done = device.create_event();
  }
  std::vector<float>().swap(m_);
  std::vector<float>().swap(v_);
  device_ = std::move(on);
}

int64_t AdamW::unpinned_host_share_bytes() const { return device_ ? device_->unpinned_bytes : 0; }

void AdamW::set_masters(int64_t from, int64_t count, const float* masters) {
  OnDevice& d = *device_;
  split_at_host_share(from, count, [&](bool on_host, int64_t at, int64_t piece, int64_t length) {
    const float* values = masters + (piece - from);
    if (on_host) {
      std::copy_n(values, length, d.host_masters.data() + at);
    } else {
      d.backend->copy_host_to_device(d.masters + at, values,
                                     length * static_cast<int64_t>(sizeof(float)));
    }
  });
}

void AdamW::read_masters(int64_t from, int64_t count, float* out) {
  OnDevice& d = *device_;
  split_at_host_share(from, count, [&](bool on_host, int64_t at, int64_t piece, int64_t length) {
    float* to = out + (piece - from);
    if (on_host) {
      std::copy_n(d.host_masters.data() + at, length, to);
    } else {
      d.backend->copy_device_to_host(to, d.masters + at,
                                     length * static_cast<int64_t>(sizeof(float)));
    }
  });
}

core::Status AdamW::swap_moments(const MomentSwap& options) {
  if (device_) return core::internal_error("the optimizer's moments are on the device");
  auto swap = std::make_unique<Swap>();
  const int64_t n = end_ - begin_;
  swap->group_elements = std::max<int64_t>(1, std::min(options.group_elements, n));
  swap->group_bytes = aligned_bytes(swap->group_elements);
  swap->groups = n > 0 ? (n + swap->group_elements - 1) / swap->group_elements : 0;
  const int count = static_cast<int>(
      std::clamp<int64_t>(options.buffer_count, 1, std::max<int64_t>(1, swap->groups)));
  core::StatusOr<std::unique_ptr<core::SwapFile>> file =
      core::SwapFile::create(options.folder, options.io);
  if (!file.ok()) return file.status();
  swap->file = std::move(*file);
  for (int i = 0; i < count; ++i) {
    Swap::Buffer buffer;
    buffer.m = aligned_floats(swap->group_bytes);
    buffer.v = aligned_floats(swap->group_bytes);
    if (buffer.m == nullptr || buffer.v == nullptr) {
      return core::Status(core::StatusCode::kResourceExhausted,
                          "cannot allocate the optimizer's swap buffers");
    }
    swap->buffers.push_back(std::move(buffer));
  }
  // Every group written once, from the moments in memory (zeros when they
  // were never allocated).
  const bool in_memory = !m_.empty();
  std::vector<float> first = std::move(m_);
  std::vector<float> second = std::move(v_);
  swap_ = std::move(swap);
  for (int64_t from = 0; from < n; from += swap_->group_elements) {
    const int64_t count = std::min(swap_->group_elements, n - from);
    if (core::Status status = set_moments(from, count, in_memory ? first.data() + from : nullptr,
                                          in_memory ? second.data() + from : nullptr);
        !status.ok()) {
      return status.with_context("moving the optimizer's moments to its swap file");
    }
  }
  return swap_->file->wait_all().with_context("moving the optimizer's moments to its swap file");
}

core::Status AdamW::set_moments(int64_t from, int64_t count, const float* first,
                                const float* second) {
  const auto fill = [count](float* to, const float* values) {
    if (values != nullptr) {
      std::copy_n(values, count, to);
    } else {
      std::fill_n(to, count, 0.0f);
    }
  };
  if (device_) {
    OnDevice& d = *device_;
    split_at_host_share(from, count, [&](bool on_host, int64_t at, int64_t piece, int64_t length) {
      const int64_t bytes = length * static_cast<int64_t>(sizeof(float));
      for (const auto& [to, values] :
           {std::pair{on_host ? d.host_m.data() + at : d.m.data() + at, first},
            std::pair{on_host ? d.host_v.data() + at : d.v.data() + at, second}}) {
        const float* piece_values = values != nullptr ? values + (piece - from) : nullptr;
        if (on_host) {
          if (piece_values != nullptr) {
            std::copy_n(piece_values, length, to);
          } else {
            std::fill_n(to, length, 0.0f);
          }
        } else if (piece_values != nullptr) {
          d.backend->copy_host_to_device(to, piece_values, bytes);
        } else {
          d.backend->memset_zero(to, bytes);
        }
      }
    });
    return {};
  }
  if (!swap_) {
    ensure_in_memory();
    fill(m_.data() + from, first);
    fill(v_.data() + from, second);
    return {};
  }
  Swap& s = *swap_;
  const int64_t g = from / s.group_elements;
  if (from % s.group_elements != 0 || count != s.length(g, end_ - begin_)) {
    return core::Status(core::StatusCode::kInvalidArgument,
                        "optimizer moments are set a whole swap group at a time");
  }
  Swap::Buffer& buffer = s.buffers[g % s.buffers.size()];
  if (core::Status status = s.wait_writes(buffer); !status.ok()) return status;
  fill(buffer.m.get(), first);
  fill(buffer.v.get(), second);
  s.start_write(g, buffer);
  return {};
}

core::StatusOr<AdamW::Moments> AdamW::moments() {
  if (swap_ || device_) {
    return core::internal_error("the optimizer's moments are not in memory: read_moment()");
  }
  ensure_in_memory();
  return Moments{m_.data(), v_.data()};
}

core::Status AdamW::read_moment(bool second, int64_t from, int64_t count, float* out) {
  if (device_) {
    OnDevice& d = *device_;
    split_at_host_share(from, count, [&](bool on_host, int64_t at, int64_t piece, int64_t length) {
      float* to = out + (piece - from);
      if (on_host) {
        std::copy_n((second ? d.host_v : d.host_m).data() + at, length, to);
      } else {
        d.backend->copy_device_to_host(to, (second ? d.v : d.m).data() + at,
                                       length * static_cast<int64_t>(sizeof(float)));
      }
    });
    return {};
  }
  if (!swap_) {
    ensure_in_memory();
    const std::vector<float>& moment = second ? v_ : m_;
    std::copy_n(moment.data() + from, count, out);
    return {};
  }
  Swap& s = *swap_;
  const int64_t n = end_ - begin_;
  for (int64_t at = from; at < from + count;) {
    const int64_t g = at / s.group_elements;
    const int64_t group_begin = g * s.group_elements;
    const int64_t take = std::min(group_begin + s.length(g, n), from + count) - at;
    Swap::Buffer& buffer = s.buffers[g % s.buffers.size()];
    if (core::Status status = s.wait_writes(buffer); !status.ok()) return status;
    // Only the pages that hold the floats asked for.
    constexpr int64_t kPage = core::SwapFile::kSwapAlignment;
    const int64_t first_byte = (at - group_begin) * static_cast<int64_t>(sizeof(float));
    const int64_t page_begin = first_byte / kPage * kPage;
    const int64_t page_end =
        (first_byte + take * static_cast<int64_t>(sizeof(float)) + kPage - 1) / kPage * kPage;
    float* group = second ? buffer.v.get() : buffer.m.get();
    char* pages = reinterpret_cast<char*>(group) + page_begin;
    if (core::Status status = s.file->wait(s.file->start_read(
            pages, page_end - page_begin, s.offset(g, second) + page_begin));
        !status.ok()) {
      return status.with_context("reading the optimizer's moments");
    }
    std::copy_n(group + (at - group_begin), take, out + (at - from));
    at += take;
  }
  return {};
}

int64_t AdamW::state_bytes() const {
  if (device_) {
    const OnDevice& d = *device_;
    return d.own_masters.bytes() + d.m.bytes() + d.v.bytes();
  }
  if (!swap_) return 2 * (end_ - begin_) * static_cast<int64_t>(sizeof(float));
  return static_cast<int64_t>(swap_->buffers.size()) * 2 * swap_->group_bytes;
}

int64_t AdamW::host_state_bytes() const {
  if (!device_) return 0;
  const OnDevice& d = *device_;
  return static_cast<int64_t>(d.host_masters.size() + d.host_m.size() + d.host_v.size() +
                              d.staged_grads.size() + d.staged_weights.size()) *
         static_cast<int64_t>(sizeof(float));
}

namespace {

// The gradients of a buffer in memory, grads_from_begin[0] the gradient of
// params[begin].
AdamW::GroupIo in_memory(const float* grads_from_begin, int64_t begin) {
  AdamW::GroupIo io;
  io.load = [grads_from_begin, begin](int64_t from, int64_t) -> core::StatusOr<const float*> {
    return grads_from_begin + (from - begin);
  };
  io.store = [](int64_t, int64_t) { return core::Status(); };
  return io;
}

}  // namespace

core::Status AdamW::step(kernels::Backend& backend, float* params, const float* grads, double lr,
                         RoundedCopy rounded) {
  return update(backend, params, in_memory(grads + begin_, begin_), lr, rounded);
}

core::Status AdamW::step_partition(kernels::Backend& backend, float* params,
                                   const float* partition_grads, double lr, RoundedCopy rounded) {
  return update(backend, params, in_memory(partition_grads, begin_), lr, rounded);
}

core::Status AdamW::step_streamed(kernels::Backend& backend, float* params, double lr,
                                  const GroupIo& io, RoundedCopy rounded) {
  return update(backend, params, io, lr, rounded);
}

void AdamW::update_range(kernels::Backend& backend, float* params, const float* grads, float* m,
                         float* v, float* rounded, const kernels::Backend::AdamWParams& hyper,
                         int64_t from, int64_t to) const {
  kernels::Backend::AdamWParams span_hyper = hyper;
  for (const Span& span : spans_) {
    const int64_t begin = std::max(span.begin, from);
    const int64_t end = std::min(span.end, to);
    if (begin >= end) continue;
    span_hyper.weight_decay = span.decay ? spec_.weight_decay : 0.0;
    const int64_t at = begin - from;
    backend.adamw_update(params + at, grads + at, m + at, v + at, end - begin, span_hyper,
                         rounded != nullptr ? rounded + at : nullptr);
  }
}

core::Status AdamW::update_on_device(const GroupIo& io, const kernels::Backend::AdamWParams& hyper,
                                     const RoundedCopy& rounded) {
  OnDevice& d = *device_;
  // Masters of its own in fp32 training would leave the model's weights
  // behind: there the weights are the masters (place_on_device()).
  if (rounded.weights == nullptr && (d.own_masters.data() != nullptr || d.weights == nullptr)) {
    return core::internal_error(
        "the optimizer on the device updates masters of its own in fp32 training");
  }
  // The GPU updates its share while the host's goes to the host, is
  // updated there and comes back: CPU Adam overlaps GPU Adam.
  if (d.host_count > 0) d.backend->record(*d.gradients_ready);
  const int64_t first = begin_ + d.host_count;  // the device's share's
  for (int64_t from = first; from < end_; from += d.chunk) {
    const int64_t to = std::min(from + d.chunk, end_);
    core::StatusOr<const float*> loaded = io.load(from, to);
    if (!loaded.ok()) return loaded.status();
    update_range(*d.backend, d.masters + (from - first), *loaded, d.m.data() + (from - first),
                 d.v.data() + (from - first),
                 rounded.weights == nullptr ? nullptr : rounded.weights + from, hyper, from, to);
    if (core::Status status = io.store(from, to); !status.ok()) return status;
  }
  if (d.host_count == 0) return {};
  d.backend->set_stream(d.copies.get());
  d.backend->wait(*d.gradients_ready);
  core::Status status = update_host_share(io, hyper, rounded);
  d.backend->record(*d.host_share_done);
  d.backend->set_stream(nullptr);
  d.backend->wait(*d.host_share_done);
  return status;
}

// CPU Adam on the host's share, a chunk at a time. The updated weights go
// back to the device: in 16-bit training the masters' rounding, in fp32
// the masters themselves.
core::Status AdamW::update_host_share(const GroupIo& io, const kernels::Backend::AdamWParams& hyper,
                                      const RoundedCopy& rounded) {
  OnDevice& d = *device_;
  const int64_t piece = static_cast<int64_t>(d.staged_grads.size());
  const int64_t last = begin_ + d.host_count;
  for (int64_t from = begin_; from < last; from += piece) {
    const int64_t to = std::min(from + piece, last);
    const int64_t at = from - begin_;
    const int64_t bytes = (to - from) * static_cast<int64_t>(sizeof(float));
    core::StatusOr<const float*> loaded = io.load(from, to);
    if (!loaded.ok()) return loaded.status();
    d.backend->copy_device_to_host(d.staged_grads.data(), *loaded, bytes);
    float* rounded_weights = rounded.weights != nullptr ? d.staged_weights.data() : nullptr;
    update_range(*d.host, d.host_masters.data() + at, d.staged_grads.data(), d.host_m.data() + at,
                 d.host_v.data() + at, rounded_weights, hyper, from, to);
    if (rounded_weights != nullptr) {
      d.backend->copy_host_to_device(rounded.weights + from, rounded_weights, bytes);
    } else {
      d.backend->copy_host_to_device(d.weights + from, d.host_masters.data() + at, bytes);
    }
    if (core::Status status = io.store(from, to); !status.ok()) return status;
  }
  return {};
}

core::Status AdamW::update(kernels::Backend& backend, float* params, const GroupIo& io, double lr,
                           const RoundedCopy& rounded) {
  ++step_;
  kernels::Backend::AdamWParams hyper;
  hyper.lr = lr;
  hyper.beta1 = spec_.betas[0];
  hyper.beta2 = spec_.betas[1];
  hyper.eps = spec_.eps;
  hyper.decoupled = spec_.decoupled_weight_decay;
  hyper.step = step_;
  hyper.rounded_dtype = rounded.dtype;
  if (device_) return update_on_device(io, hyper, rounded);
  // A group's update between bringing in its parameters and gradients and
  // writing them back.
  const auto update_group = [&](int64_t from, int64_t to, float* m, float* v) -> core::Status {
    core::StatusOr<const float*> grads = io.load(from, to);
    if (!grads.ok()) return grads.status();
    update_range(backend, params + from, *grads, m, v,
                 rounded.weights != nullptr ? rounded.weights + from : nullptr, hyper, from, to);
    return io.store(from, to);
  };
  if (!swap_) {
    ensure_in_memory();
    return update_group(begin_, end_, m_.data(), v_.data());
  }
  Swap& s = *swap_;
  const int64_t n = end_ - begin_;
  const int64_t count = static_cast<int64_t>(s.buffers.size());
  // Groups are read up to count - 1 ahead; a buffer is read into only once
  // the write of the group it held is done.
  const int64_t ahead = std::max<int64_t>(count - 1, 0);
  const auto load = [&](int64_t g) -> core::Status {
    Swap::Buffer& buffer = s.buffers[g % count];
    if (core::Status status = s.wait_writes(buffer); !status.ok()) return status;
    s.start_read(g, buffer);
    return {};
  };
  for (int64_t g = 0; g < std::min(ahead, s.groups); ++g) {
    if (core::Status status = load(g); !status.ok()) return status;
  }
  for (int64_t g = 0; g < s.groups; ++g) {
    if (ahead == 0) {
      if (core::Status status = load(g); !status.ok()) return status;
    }
    Swap::Buffer& buffer = s.buffers[g % count];
    if (core::Status status = s.wait_reads(buffer); !status.ok()) {
      return status.with_context("reading the optimizer's moments");
    }
    const int64_t from = begin_ + g * s.group_elements;
    if (core::Status status =
            update_group(from, from + s.length(g, n), buffer.m.get(), buffer.v.get());
        !status.ok()) {
      return status;
    }
    s.start_write(g, buffer);
    if (ahead > 0 && g + ahead < s.groups) {
      if (core::Status status = load(g + ahead); !status.ok()) return status;
    }
  }
  return s.file->wait_all().with_context("writing the optimizer's moments");
}

}  // namespace dslaunch::worker::engine
