#include "worker/engine/stage_links.h"

#include <chrono>
#include <utility>

namespace dslaunch::worker::engine {

StageLinks::StageLinks(comm::Communicator* pipeline, std::vector<model::Gpt2Model*> chunks,
                       int64_t elements, kernels::Backend& backend)
    : activations_(pipeline != nullptr && pipeline->size() > 1 ? pipeline : nullptr),
      chunks_(std::move(chunks)),
      elements_(elements),
      backend_(backend),
      output_sends_(chunks_.size()),
      staged_(!backend.memory_is_host()),
      staged_outputs_(chunks_.size()) {
  if (activations_ == nullptr) return;
  stage_ = activations_->rank();
  stages_ = activations_->size();
  core::StatusOr<std::unique_ptr<comm::Communicator>> duplicate =
      activations_->duplicate("gradients");
  if (!duplicate.ok()) {
    status_ = duplicate.status().with_context("setting up the pipeline's gradient links");
    return;
  }
  gradients_ = std::move(*duplicate);
}

StageLinks::~StageLinks() { finish(); }

void StageLinks::wait(std::unique_ptr<comm::Work>& pending, const char* what) {
  if (!pending) return;
  core::Status status = pending->wait();
  pending.reset();
  if (!status.ok() && status_.ok()) status_ = status.with_context(what);
}

void StageLinks::receive(comm::Communicator& comm, float* into, int peer, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  if (staged_) staged_receive_.resize(elements_);
  float* buffer = staged_ ? staged_receive_.data() : into;
  core::Status status = comm.recv(comm::buffer_of(buffer, elements_), peer)->wait();
  receive_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    status_ = status.with_context(what);
    return;
  }
  if (staged_) {
    backend_.copy_host_to_device(into, buffer, elements_ * static_cast<int64_t>(sizeof(float)));
  }
}

void StageLinks::before_forward(int chunk, int slot) {
  if (!active()) return;
  std::vector<std::unique_ptr<comm::Work>>& sends = output_sends_[chunk];
  if (static_cast<int>(sends.size()) <= slot) sends.resize(slot + 1);
  // forward() rewrites the slot, whose last output may still be on its way.
  wait(sends[slot], "sending activations to the next stage");
  if (!first(chunk) && status_.ok()) {
    receive(*activations_, chunks_[chunk]->stage_input(slot), previous_rank(),
            "receiving activations from the previous stage");
  }
}

void StageLinks::after_forward(int chunk, int slot) {
  if (!active() || last(chunk)) return;
  const float* output = chunks_[chunk]->stage_output(slot);
  if (staged_) {
    // Rewritten only after before_forward() of the slot waited for its send.
    std::vector<std::vector<float>>& copies = staged_outputs_[chunk];
    if (static_cast<int>(copies.size()) <= slot) copies.resize(slot + 1);
    copies[slot].resize(elements_);
    backend_.copy_device_to_host(copies[slot].data(), output,
                                 elements_ * static_cast<int64_t>(sizeof(float)));
    output = copies[slot].data();
  }
  output_sends_[chunk][slot] = activations_->send(comm::buffer_of(output, elements_), next_rank());
}

void StageLinks::before_backward(int chunk) {
  if (!active()) return;
  if (!last(chunk)) {
    receive(*gradients_, chunks_[chunk]->residual_gradient(), next_rank(),
            "receiving gradients from the next stage");
  }
}

StageLinks::GradientSend& StageLinks::free_gradient_send() {
  for (GradientSend& send : gradient_sends_) {
    if (send.pending && !send.pending->done()) continue;
    wait(send.pending, "sending gradients to the previous stage");  // its status
    return send;
  }
  // Moving the pool moves no buffer's memory: sends in flight keep theirs.
  if (staged_) {
    gradient_sends_.push_back({{}, std::vector<float>(elements_), nullptr});
  } else {
    gradient_sends_.push_back({kernels::DeviceBuffer<float>(backend_, elements_), {}, nullptr});
  }
  return gradient_sends_.back();
}

void StageLinks::after_backward(int chunk) {
  if (!active() || first(chunk)) return;
  GradientSend& send = free_gradient_send();
  const int64_t bytes = elements_ * static_cast<int64_t>(sizeof(float));
  if (staged_) {
    backend_.copy_device_to_host(send.host.data(), chunks_[chunk]->residual_gradient(), bytes);
  } else {
    backend_.copy_device_to_device(send.buffer.data(), chunks_[chunk]->residual_gradient(), bytes);
    // The communicator reads the buffer from the host's side.
    backend_.synchronize();
  }
  const float* sent = staged_ ? send.host.data() : send.buffer.data();
  send.pending = gradients_->send(comm::buffer_of(sent, elements_), previous_rank());
}

void StageLinks::finish() {
  // Sends in flight read the models' memory: they are waited for even after
  // a failure.
  for (std::vector<std::unique_ptr<comm::Work>>& sends : output_sends_) {
    for (std::unique_ptr<comm::Work>& pending : sends) {
      wait(pending, "sending activations to the next stage");
    }
  }
  for (GradientSend& send : gradient_sends_) {
    wait(send.pending, "sending gradients to the previous stage");
  }
}

}  // namespace dslaunch::worker::engine
