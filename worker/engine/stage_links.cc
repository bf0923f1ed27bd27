#include "worker/engine/stage_links.h"

#include <chrono>

namespace dslaunch::worker::engine {

StageLinks::StageLinks(comm::Communicator* pipeline, model::Gpt2Model& model, int64_t elements)
    : pipeline_(pipeline != nullptr && pipeline->size() > 1 ? pipeline : nullptr),
      model_(model),
      elements_(elements) {
  if (pipeline_ != nullptr) {
    stage_ = pipeline_->rank();
    stages_ = pipeline_->size();
  }
}

StageLinks::~StageLinks() { finish(); }

void StageLinks::wait(std::unique_ptr<comm::Work>& pending, const char* what) {
  if (!pending) return;
  core::Status status = pending->wait();
  pending.reset();
  if (!status.ok() && status_.ok()) status_ = status.with_context(what);
}

void StageLinks::receive(float* into, int peer, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  core::Status status = pipeline_->recv(comm::buffer_of(into, elements_), peer)->wait();
  receive_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) status_ = status.with_context(what);
}

void StageLinks::before_forward(int slot) {
  if (!active()) return;
  if (static_cast<int>(output_sends_.size()) <= slot) output_sends_.resize(slot + 1);
  // forward() rewrites the slot, whose last output may still be on its way.
  wait(output_sends_[slot], "sending activations to the next stage");
  if (!first() && status_.ok()) {
    receive(model_.stage_input(slot), stage_ - 1, "receiving activations from the previous stage");
  }
}

void StageLinks::after_forward(int slot) {
  if (!active() || last()) return;
  output_sends_[slot] = pipeline_->send(comm::buffer_of(model_.stage_output(slot), elements_),
                                        stage_ + 1);
}

void StageLinks::before_backward() {
  if (!active()) return;
  // backward() rewrites the residual gradient, which may still be on its way.
  wait(gradient_send_, "sending gradients to the previous stage");
  if (!last() && status_.ok()) {
    receive(model_.residual_gradient(), stage_ + 1, "receiving gradients from the next stage");
  }
}

void StageLinks::after_backward() {
  if (!active() || first()) return;
  gradient_send_ = pipeline_->send(comm::buffer_of(model_.residual_gradient(), elements_),
                                   stage_ - 1);
}

void StageLinks::finish() {
  // Sends in flight read the model's memory: they are waited for even after
  // a failure.
  for (std::unique_ptr<comm::Work>& pending : output_sends_) {
    wait(pending, "sending activations to the next stage");
  }
  wait(gradient_send_, "sending gradients to the previous stage");
}

}  // namespace dslaunch::worker::engine
