#include "core/layout/zero3_prefetch.h"

#include <algorithm>
#include <utility>

namespace dslaunch::core {

Zero3Prefetch::Zero3Prefetch(const Zero3Regions& regions, int64_t bucket_floats,
                             int64_t max_live_floats)
    : layers_(regions.layers),
      chunks_(regions.chunks),
      bucket_(bucket_floats),
      max_live_(max_live_floats) {
  for (int region = 0; region < static_cast<int>(regions.regions.size()); ++region) {
    sizes_.push_back(regions.region_size(region));
  }
}

void Zero3Prefetch::prefetch_following(Zero3Gathering& gathering, int first, int step) const {
  int64_t ahead = 0;  // floats of the following blocks requested so far
  for (int layer = first; layer >= 0 && layer < layers_; layer += step) {
    const int region = 1 + layer;
    const int64_t size = sizes_[region];
    if (!gathering.live(region)) {
      if (layer != first && ahead + size > bucket_) return;
      if (gathering.live_floats() + size > max_live_) return;
      gathering.prefetch(region);
    }
    ahead += size;
  }
}

void Zero3Prefetch::prefetch_region(Zero3Gathering& gathering, int region) const {
  if (region < 0 || gathering.live(region)) return;
  if (gathering.live_floats() + sizes_[region] > max_live_) return;
  gathering.prefetch(region);
}

void Zero3Prefetch::after_embeddings(Zero3Gathering& gathering) const {
  if (chunks_ > 0) {
    prefetch_region(gathering, chunk_region(0));  // the encoder's first
  } else {
    prefetch_following(gathering, 0, 1);
  }
}

void Zero3Prefetch::after_vocab_chunk(Zero3Gathering& gathering, int chunk, VocabUse use) const {
  if (chunks_ == 0) return;
  if (chunk + 1 < chunks_) {
    prefetch_region(gathering, chunk_region(chunk + 1));
  } else if (use == VocabUse::kEncoder) {
    prefetch_following(gathering, 0, 1);
  } else if (use == VocabUse::kOutputBackward) {
    prefetch_following(gathering, layers_ - 1, -1);
  }
}

void Zero3Prefetch::after_block(Zero3Gathering& gathering, int layer, bool forward) const {
  if (forward) {
    prefetch_following(gathering, layer + 1, 1);
    if (layer == layers_ - 1) prefetch_region(gathering, chunk_region(0));  // the output layer's
  } else {
    prefetch_following(gathering, layer - 1, -1);
  }
}

namespace {

// The model's acquires and releases (worker/model/gpt2_model.cc) with a
// gatherer's live regions, measuring the pages they and the persistent
// tensors touch.
class GatheredReplay final : public Zero3Gathering {
 public:
  GatheredReplay(const Zero3Regions& regions, int64_t page_bytes, const Zero3Prefetch* prefetch)
      : regions_(regions),
        page_bytes_(page_bytes),
        prefetch_(prefetch),
        live_(regions.regions.size(), false) {}

  // One micro-batch's forward and backward.
  int64_t peak_of_micro_batch() {
    acquire(0);
    if (prefetch_ != nullptr) prefetch_->after_embeddings(*this);
    vocab_pass(VocabUse::kEncoder);
    for (int layer = 0; layer < regions_.layers; ++layer) {
      acquire(1 + layer);
      if (prefetch_ != nullptr) prefetch_->after_block(*this, layer, true);
      if (layer != regions_.layers - 1) release(1 + layer);  // the last stays for backward
    }
    vocab_pass(VocabUse::kOutputForward);
    vocab_pass(VocabUse::kOutputBackward);
    for (int layer = regions_.layers - 1; layer >= 0; --layer) {
      acquire(1 + layer);
      if (prefetch_ != nullptr) prefetch_->after_block(*this, layer, false);
      release(1 + layer);
    }
    release(0);
    return peak_;
  }

  bool live(int region) const override { return live_[region]; }
  int64_t live_floats() const override { return live_floats_; }
  void prefetch(int region) override { acquire(region); }

 private:
  void vocab_pass(VocabUse use) {
    for (int k = 0; k < regions_.chunks; ++k) {
      acquire(1 + regions_.layers + k);
      if (prefetch_ != nullptr) prefetch_->after_vocab_chunk(*this, k, use);
      release(1 + regions_.layers + k);
    }
  }
  void acquire(int region) {
    if (live_[region]) return;
    live_[region] = true;
    live_floats_ += regions_.region_size(region);
    peak_ = std::max(peak_, resident_bytes());
  }
  void release(int region) {
    if (!live_[region]) return;
    live_[region] = false;
    live_floats_ -= regions_.region_size(region);
  }
  // The distinct pages of the live regions and the persistent tensors
  // (neighbouring ranges share the page between them).
  int64_t resident_bytes() const {
    std::vector<std::pair<int64_t, int64_t>> pages;  // [first, last) of each range
    const auto add = [&](const std::vector<Zero3Regions::Range>& ranges) {
      for (const auto& [begin, end] : ranges) {
        pages.emplace_back(begin * 4 / page_bytes_, (end * 4 + page_bytes_ - 1) / page_bytes_);
      }
    };
    add(regions_.persistent);
    for (int region = 0; region < static_cast<int>(live_.size()); ++region) {
      if (live_[region]) add(regions_.regions[region]);
    }
    std::sort(pages.begin(), pages.end());
    int64_t count = 0;
    int64_t covered = 0;  // pages before this are counted
    for (const auto& [first, last] : pages) {
      count += std::max<int64_t>(0, last - std::max(first, covered));
      covered = std::max(covered, last);
    }
    return count * page_bytes_;
  }

  const Zero3Regions& regions_;
  const int64_t page_bytes_;
  const Zero3Prefetch* prefetch_;
  std::vector<bool> live_;
  int64_t live_floats_ = 0;
  int64_t peak_ = 0;
};

}  // namespace

int64_t gathered_peak_bytes(const Zero3Regions& regions, int64_t page_bytes,
                            const Zero3Prefetch* prefetch) {
  return GatheredReplay(regions, page_bytes, prefetch).peak_of_micro_batch();
}

}  // namespace dslaunch::core
