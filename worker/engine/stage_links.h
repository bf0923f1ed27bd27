#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "worker/comm/communicator.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// A pipeline stage's sends and receives around its model chunks' passes,
// over the pipeline group (group rank = stage): activations forward to the
// next virtual stage, their gradients back to the previous one. Chunk k of
// stage s is virtual stage k * stages + s, so under the interleaved
// schedule the last stage's chunk k feeds the first stage's chunk k + 1.
// Activations travel on the pipeline communicator and gradients on a
// duplicate of it, so that the two never meet between the same two ranks
// (with interleaving both go from stage 0 to stage 1, for example); on each,
// the messages between two ranks come in the order both schedules run them.
//
// Receives are waited for at once. An output is sent from its activation
// slot, waited for only when the slot is about to be written again (by then
// the next stage has received it: it sent that micro-batch's gradient
// back). An input's gradient is copied into a send buffer of a pool, so the
// next backward pass never waits for the previous stage to take it: under
// the interleaved schedule that stage may be busy with other chunks for a
// while. With one stage, every call does nothing. After a failure the links
// do nothing more and status() says what failed: check it after each pass.
// On a backend whose memory is not the host's (a GPU), every transfer goes
// through host memory, which the communicator (MPI) works on: sends from a
// host copy of their slot or buffer, receives into a host buffer copied to
// the device.
class StageLinks {
 public:
  // `chunks`: the stage's model chunks in order (one without interleaving).
  // `elements`: one micro-batch's activations, B x T x C floats; the
  // gradients' send buffers live in `backend`'s memory, as the models'
  // activations do, or in host memory where transfers are staged.
  // Duplicating the communicator is collective over the pipeline group.
  StageLinks(comm::Communicator* pipeline, std::vector<model::Gpt2Model*> chunks, int64_t elements,
             kernels::Backend& backend);
  ~StageLinks();
  StageLinks(const StageLinks&) = delete;
  StageLinks& operator=(const StageLinks&) = delete;

  // Around forward() of `chunk` into `slot`: the previous virtual stage's
  // output in, and this one's out.
  void before_forward(int chunk, int slot);
  void after_forward(int chunk, int slot);
  // Around backward() of `chunk`: the output's gradient in, the input's out.
  void before_backward(int chunk);
  void after_backward(int chunk);
  // Waits for every send started (before the group's collectives).
  void finish();

  // The first failure, or ok.
  const core::Status& status() const { return status_; }

  // Seconds spent waiting for receives since construction: the pipeline's
  // bubble, plus the transfers.
  double receive_seconds() const { return receive_seconds_; }

 private:
  bool active() const { return activations_ != nullptr && status_.ok(); }
  int virtual_stage(int chunk) const { return chunk * stages_ + stage_; }
  bool first(int chunk) const { return virtual_stage(chunk) == 0; }
  bool last(int chunk) const { return virtual_stage(chunk) == stages_ * chunk_count() - 1; }
  int chunk_count() const { return static_cast<int>(chunks_.size()); }
  int previous_rank() const { return (stage_ + stages_ - 1) % stages_; }
  int next_rank() const { return (stage_ + 1) % stages_; }
  void receive(comm::Communicator& comm, float* into, int peer, const char* what);
  void wait(std::unique_ptr<comm::Work>& pending, const char* what);
  struct GradientSend {
    kernels::DeviceBuffer<float> buffer;  // empty when staged
    std::vector<float> host;              // staged only
    std::unique_ptr<comm::Work> pending;
  };
  // A gradient send buffer whose last send is done (a new one if none is).
  GradientSend& free_gradient_send();

  comm::Communicator* activations_;
  std::unique_ptr<comm::Communicator> gradients_;
  std::vector<model::Gpt2Model*> chunks_;
  int64_t elements_;
  kernels::Backend& backend_;
  int stage_ = 0;
  int stages_ = 1;
  std::vector<std::vector<std::unique_ptr<comm::Work>>> output_sends_;  // per chunk and slot
  bool staged_;
  std::vector<std::vector<std::vector<float>>> staged_outputs_;  // per chunk and slot
  std::vector<float> staged_receive_;
  std::vector<GradientSend> gradient_sends_;  // the pool
  double receive_seconds_ = 0;
  core::Status status_;
};

}  // namespace dslaunch::worker::engine
