#include "worker/engine/gathered_mirror.h"

#include <new>
#include <stdexcept>

namespace dslaunch::worker::engine {
namespace {

constexpr int64_t kFloat = sizeof(float);

}  // namespace

GatheredMirror::GatheredMirror(kernels::Backend& device, const core::ParameterTable& table,
                               int64_t persistence_threshold, model::ParameterSource& host_source,
                               model::OutputGradientSink& host_sink, const float* host_workspace,
                               DeviceMirror& gradients, float* host_gradients)
    : device_(device),
      regions_(table, persistence_threshold),
      host_source_(host_source),
      host_sink_(host_sink),
      host_workspace_(host_workspace),
      gradients_(gradients),
      host_gradients_(host_gradients),
      workspace_(device.reserve_sparse(table.total() * kFloat)),
      live_(regions_.regions.size(), false) {
  kernels::commit_floats(*workspace_, regions_.persistent);
}

void GatheredMirror::upload_ranges(const std::vector<core::Zero3Regions::Range>& ranges) {
  for (const auto& [begin, end] : ranges) {
    device_.copy_host_to_device(static_cast<float*>(workspace_->data()) + begin,
                                host_workspace_ + begin, (end - begin) * kFloat);
  }
}

void GatheredMirror::upload_persistent() { upload_ranges(regions_.persistent); }

void GatheredMirror::upload(int region) {
  if (live_[region]) return;
  try {
    kernels::commit_floats(*workspace_, regions_.regions[region]);
  } catch (const std::bad_alloc&) {
    // The model would read what is not there: this rank stops, and says why.
    throw std::runtime_error(
        "the GPU has no room for the gathered parameters' mirror (ZeRO stage 3); lower the "
        "model's size per rank");
  }
  live_[region] = true;
  upload_ranges(regions_.regions[region]);
}

void GatheredMirror::release(int region) {
  if (!live_[region]) return;
  kernels::release_floats(*workspace_, regions_.regions[region]);
  live_[region] = false;
}

void GatheredMirror::acquire_embeddings() {
  host_source_.acquire_embeddings();
  upload(0);
}

void GatheredMirror::release_embeddings() {
  release(0);
  host_source_.release_embeddings();
}

void GatheredMirror::acquire_vocab_chunk(int chunk, VocabUse use) {
  host_source_.acquire_vocab_chunk(chunk, use);
  if (regions_.chunks > 0) upload(1 + regions_.layers + chunk);
}

void GatheredMirror::release_vocab_chunk(int chunk, VocabUse use) {
  if (regions_.chunks > 0) release(1 + regions_.layers + chunk);
  host_source_.release_vocab_chunk(chunk, use);
}

void GatheredMirror::acquire_block(int layer, Pass pass) {
  host_source_.acquire_block(layer, pass);
  upload(1 + layer);
}

// The last block's forward is followed by its backward: it stays, as the
// host state keeps it.
void GatheredMirror::release_block(int layer, Pass pass) {
  if (!(pass == Pass::kForward && layer == regions_.layers - 1)) release(1 + layer);
  host_source_.release_block(layer, pass);
}

void GatheredMirror::end_forward_only() {
  release(regions_.layers);  // the last block's region
  release(0);                // the embeddings
}

void GatheredMirror::output_part_ready(int64_t begin, int64_t end) {
  gradients_.take_gradient_part(begin, end, host_gradients_);
  host_sink_.output_part_ready(begin, end);
}

}  // namespace dslaunch::worker::engine
