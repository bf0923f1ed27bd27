#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/layout/device_optimizer_bytes.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/spec/job_spec.h"
#include "core/status.h"
#include "core/swap_file.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"

namespace dslaunch::worker::engine {

// Where Adam's moments go when they leave memory (ZeRO-Infinity's
// offload_optimizer device nvme): a swap file in `folder`, streamed through
// in groups of `group_elements` (DeepSpeed's sub_group_size) with
// `buffer_count` groups' buffers in memory, so that reading the next groups
// and writing the last back overlap the update of this one.
struct MomentSwap {
  std::string folder;
  int64_t group_elements = 1'000'000'000;
  int buffer_count = 4;
  core::SwapFile::Io io;  // the spec's aio
};

// 16-bit training: where an optimizer step also writes the updated
// parameters rounded to `dtype`, in the same pass (the model's weights
// beside the fp32 masters it updates); addressed like the whole layout.
struct RoundedCopy {
  float* weights = nullptr;
  core::DType dtype = core::DType::kBF16;
};

// AdamW (or Adam with an L2 penalty) over the parameters of a tensor table,
// with DeepSpeed's hyperparameters from the spec. Weight decay applies to
// matrices and embeddings only, never to biases and LayerNorm parameters, as
// Megatron-LM, nanoGPT and Hugging Face's Trainer set up their parameter
// groups. Owns the two moment buffers (same layout as the parameters, or a
// slice of it), in memory, after swap_moments() on a drive, or after
// place_on_device() on a GPU; not thread-safe.
// AdamW::place_on_device() found no room in host memory for the share of
// the states it keeps there (the GPU's own shortage is std::bad_alloc).
class HostShareNoRoom : public std::bad_alloc {
 public:
  const char* what() const noexcept override {
    return "no room in host memory for the optimizer's host share";
  }
};

class AdamW {
 public:
  // Updates the floats [begin, end) of the table's layout: a whole buffer,
  // or the slice one rank owns.
  AdamW(const spec::OptimizerSpec& spec, const core::ParameterTable& table, int64_t begin,
        int64_t end);
  ~AdamW();

  // Moves the moments into a swap file (they keep their values); from now
  // on every step streams them through the file. The same results, bit for
  // bit: only where the moments wait between steps changes.
  core::Status swap_moments(const MomentSwap& swap);

  // The optimizer on a GPU (training on one without offload_optimizer): the
  // fp32 masters of [begin, end) and both moments live in `device`'s memory,
  // and every step runs there with the device's kernels on the device's
  // gradients and weights, writing the updated weights (in 16-bit training
  // the RoundedCopy's: the masters' rounding). `weights`: in fp32 training,
  // the device's weights (addressed from the layout's start), which then are
  // the masters, updated in place; in 16-bit training null, and the masters
  // are the optimizer's own, set by set_masters(). The moments start as
  // set_moments() left them, else zero. `chunk`: the floats a step updates
  // at a time (and moment_group(), what a checkpoint or a resume moves
  // through host memory at a time). Before the first step, not with
  // swap_moments(); throws std::bad_alloc when the device lacks the memory.
  //
  // Partial offload (offload_optimizer.ratio below 1, DeepSpeed's): the
  // first `host_count` floats of [begin, end) keep their fp32 masters (in
  // fp32 training too) and moments in host memory, where `host`'s kernels
  // (CPU Adam) update them, a chunk at a time: its gradients copied from
  // the device, its updated weights copied back. Throws HostShareNoRoom
  // when host memory lacks the room for that share. `pin_host_share`
  // (offload_optimizer.pin_memory): the host buffers those copies read and
  // write are page-locked (Backend::pin_host_memory) while placed.
  void place_on_device(kernels::Backend& device, float* weights = nullptr,
                       int64_t chunk = core::kDeviceOptimizerChunk,
                       kernels::Backend* host = nullptr, int64_t host_count = 0,
                       bool pin_host_share = false);
  // Placed with pin_host_share: the bytes of those buffers the device did
  // not pin (its driver refused), whose copies stay pageable.
  int64_t unpinned_host_share_bytes() const;
  // Placed on a device: the fp32 masters of the floats [from, from + count)
  // of [begin, end) from host floats `masters`, or into host floats `out`
  // (where they are the device's fp32 weights, setting them writes those).
  void set_masters(int64_t from, int64_t count, const float* masters);
  void read_masters(int64_t from, int64_t count, float* out);

  // One step at learning rate `lr` on params[begin, end) with the matching
  // gradients; both pointers address the start of the whole layout.
  core::Status step(kernels::Backend& backend, float* params, const float* grads, double lr,
                    RoundedCopy rounded = {});

  // The same step with only the gradients of [begin, end): partition_grads
  // holds end - begin floats, its first the gradient of params[begin] (ZeRO
  // stage 2, where a rank holds no other gradients).
  core::Status step_partition(kernels::Backend& backend, float* params,
                              const float* partition_grads, double lr, RoundedCopy rounded = {});

  // ZeRO-Infinity with the parameters and the gradients swapped as well as
  // the moments: the same step a swap group at a time, each group's
  // parameters and gradients brought in only for its update. Before group
  // [from, to)'s update, load(from, to) makes params[from, to) hold the
  // parameters and returns where the group's gradients are (element 0 the
  // gradient of params[from]); after it, store(from, to) writes the
  // parameters back.
  struct GroupIo {
    std::function<core::StatusOr<const float*>(int64_t from, int64_t to)> load;
    std::function<core::Status(int64_t from, int64_t to)> store;
  };
  core::Status step_streamed(kernels::Backend& backend, float* params, double lr,
                             const GroupIo& io, RoundedCopy rounded = {});

  int64_t steps_taken() const { return step_; }
  void set_steps_taken(int64_t steps) { step_ = steps; }

  // The two moments of the floats [begin, end) given to the constructor
  // (element 0 belongs to params[begin]), for checkpoints, while they are in
  // memory (neither swapped nor on the device: then read_moment()).
  struct Moments {
    const float* first = nullptr;
    const float* second = nullptr;
  };
  core::StatusOr<Moments> moments();
  // One moment (the second when `second`) of the floats [from, from + count)
  // of [begin, end) into out, read from the swap file a group at a time
  // when swapped, so a checkpoint streams them without holding them whole.
  core::Status read_moment(bool second, int64_t from, int64_t count, float* out);
  // Sets both moments of the floats [from, from + count) of [begin, end)
  // (resuming), in pieces of moment_group() floats at most, each starting
  // at a multiple of it; null: zeros.
  core::Status set_moments(int64_t from, int64_t count, const float* first, const float* second);
  int64_t moment_group() const;

  // Bytes the moments hold in memory (the swap buffers, once swapped), or
  // on the device what the optimizer holds there: the moments and its own
  // masters.
  int64_t state_bytes() const;
  // Placed on a device with part of its states in host memory: their bytes
  // (core::host_optimizer_bytes()); else 0.
  int64_t host_state_bytes() const;
  bool swapped() const { return swap_ != nullptr; }

 private:
  struct Span {
    int64_t begin, end;  // in the whole layout
    bool decay;
  };
  struct Swap;
  struct OnDevice;
  core::Status update(kernels::Backend& backend, float* params, const GroupIo& io, double lr,
                      const RoundedCopy& rounded);
  // The update of the layout's floats [from, to), whose parameters,
  // gradients, moments and (when not null) rounded weights start at the
  // pointers given, in `backend`'s memory.
  void update_range(kernels::Backend& backend, float* params, const float* grads, float* m,
                    float* v, float* rounded, const kernels::Backend::AdamWParams& hyper,
                    int64_t from, int64_t to) const;
  // update() on the device, with the device's gradients from io: the
  // device's share queued on the default stream, then the host's share
  // through a stream of its own, in parallel.
  core::Status update_on_device(const GroupIo& io, const kernels::Backend::AdamWParams& hyper,
                                const RoundedCopy& rounded);
  core::Status update_host_share(const GroupIo& io, const kernels::Backend::AdamWParams& hyper,
                                 const RoundedCopy& rounded);
  // Calls fn(on_host, at, from, count) for the pieces of floats [from,
  // from + count) of [begin, end) on each side of the host's share: `at`
  // indexes that side's arrays, `from` and `count` the caller's floats.
  template <typename Fn>
  void split_at_host_share(int64_t from, int64_t count, const Fn& fn) const;

  spec::OptimizerSpec spec_;
  int64_t begin_;
  int64_t end_;
  std::vector<Span> spans_;
  // In memory, allocated at the first use unless swapped first.
  void ensure_in_memory();
  std::vector<float> m_;
  std::vector<float> v_;
  std::unique_ptr<Swap> swap_;
  std::unique_ptr<OnDevice> device_;
  int64_t step_ = 0;
};

}  // namespace dslaunch::worker::engine
