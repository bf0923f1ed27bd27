#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "worker/comm/communicator.h"
#include "worker/model/gpt2_model.h"

namespace dslaunch::worker::engine {

// A pipeline stage's sends and receives around its model's passes, over the
// pipeline group (group rank = stage): activations forward to the next
// stage, their gradients back to the previous one. Receives are waited for
// at once; sends are started and waited for only when their buffer is about
// to be written again, so that no stage waits on a peer that waits on it
// (the 1F1B schedules of neighbouring stages meet this way). With one
// stage, every call does nothing. After a failure the links do nothing more
// and status() says what failed: check it after each pass.
class StageLinks {
 public:
  // `elements`: one micro-batch's activations, B x T x C floats.
  StageLinks(comm::Communicator* pipeline, model::Gpt2Model& model, int64_t elements);
  ~StageLinks();
  StageLinks(const StageLinks&) = delete;
  StageLinks& operator=(const StageLinks&) = delete;

  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }

  // Around forward() into `slot`: the previous stage's output in, and this
  // stage's out.
  void before_forward(int slot);
  void after_forward(int slot);
  // Around backward(): the output's gradient in, the input's out.
  void before_backward();
  void after_backward();
  // Waits for every send started (before the group's collectives).
  void finish();

  // The first failure, or ok.
  const core::Status& status() const { return status_; }

  // Seconds spent waiting for receives since construction: the pipeline's
  // bubble, plus the transfers.
  double receive_seconds() const { return receive_seconds_; }

 private:
  bool active() const { return pipeline_ != nullptr && status_.ok(); }
  void receive(float* into, int peer, const char* what);
  void wait(std::unique_ptr<comm::Work>& pending, const char* what);

  comm::Communicator* pipeline_;
  model::Gpt2Model& model_;
  int64_t elements_;
  int stage_ = 0;
  int stages_ = 1;
  std::vector<std::unique_ptr<comm::Work>> output_sends_;  // per slot
  std::unique_ptr<comm::Work> gradient_send_;
  double receive_seconds_ = 0;
  core::Status status_;
};

}  // namespace dslaunch::worker::engine
