#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"
#include "core/spec/job_spec.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"

namespace dslaunch::worker::engine {

// AdamW (or Adam with an L2 penalty) over the parameters of a tensor table,
// with DeepSpeed's hyperparameters from the spec. Weight decay applies to
// matrices and embeddings only, never to biases and LayerNorm parameters, as
// Megatron-LM, nanoGPT and Hugging Face's Trainer set up their parameter
// groups. Owns the two moment buffers (same layout as the parameters, or a
// slice of it); not thread-safe.
class AdamW {
 public:
  // Updates the floats [begin, end) of the table's layout: a whole buffer,
  // or the slice one rank owns.
  AdamW(const spec::OptimizerSpec& spec, const core::ParameterTable& table, int64_t begin,
        int64_t end);

  // One step at learning rate `lr` on params[begin, end) with the matching
  // gradients; both pointers address the start of the whole layout.
  void step(kernels::Backend& backend, float* params, const float* grads, double lr);

  // The same step with only the gradients of [begin, end): partition_grads
  // holds end - begin floats, its first the gradient of params[begin] (ZeRO
  // stage 2, where a rank holds no other gradients).
  void step_partition(kernels::Backend& backend, float* params, const float* partition_grads,
                      double lr);

  int64_t steps_taken() const { return step_; }
  // The two moments of the floats [begin, end) given to the constructor:
  // element 0 belongs to params[begin]. For checkpoints, and for resuming
  // from one (with set_steps_taken, as Adam's bias correction counts steps).
  float* first_moment() { return m_.data(); }
  float* second_moment() { return v_.data(); }
  void set_steps_taken(int64_t steps) { step_ = steps; }
  int64_t state_bytes() const { return static_cast<int64_t>(2 * m_.size() * sizeof(float)); }

 private:
  struct Span {
    int64_t begin, end;  // in the whole layout
    bool decay;
  };
  // grads_from_begin[0] is the gradient of params[begin_].
  void update(kernels::Backend& backend, float* params, const float* grads_from_begin, double lr);

  spec::OptimizerSpec spec_;
  int64_t begin_;
  std::vector<Span> spans_;
  std::vector<float> m_;
  std::vector<float> v_;
  int64_t step_ = 0;
};

}  // namespace dslaunch::worker::engine
