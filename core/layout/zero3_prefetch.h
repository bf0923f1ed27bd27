#pragma once

#include <cstdint>
#include <vector>

#include "core/layout/vocab_chunks.h"
#include "core/layout/zero3_regions.h"

namespace dslaunch::core {

// What ZeRO stage 3's prefetching asks of a gatherer of Zero3Regions.
class Zero3Gathering {
 public:
  virtual ~Zero3Gathering() = default;
  // Whether `region` was requested (acquired or prefetched) and not
  // released since, and those regions' floats: what the calls made, not
  // the gathers' progress, so every rank making the same calls sees the
  // same (safe to base collectives on).
  virtual bool live(int region) const = 0;
  virtual int64_t live_floats() const = 0;
  // Starts gathering `region`, not live, without waiting for it.
  virtual void prefetch(int region) = 0;
};

// DeepSpeed's stage3_prefetch_bucket_size and stage3_max_live_parameters:
// which regions a gatherer requests ahead of their use, decided after each
// acquire from the calls alone, so every rank requests the same.
//
// When a block (or the embeddings) is acquired, the blocks that follow it
// in the pass's order (forward: l+1, l+2, ...; backward: l-1, l-2, ...) are
// requested while they fit in `bucket_floats` ahead of the current one
// (the next block always does). A block counts as ahead from its request
// until its turn, whether its gather has finished or not. A vocabulary
// chunk requests the next chunk of its use, and the last one the blocks
// that follow (the last block forward requests the output layer's first
// chunk). After the output layer's forward comes backward, or nothing (an
// evaluation): nothing is requested across that boundary.
//
// Live parameters: a prefetch that would take the live floats past
// `max_live_floats` is postponed, with every block after it, until a later
// acquire finds room. What is needed now is gathered regardless, so the
// live floats stay within max(max_live_floats, the embeddings' floats + the
// largest block's + a chunk's): the one exception is a limit smaller than
// what one step of a pass needs.
class Zero3Prefetch {
 public:
  Zero3Prefetch(const Zero3Regions& regions, int64_t bucket_floats, int64_t max_live_floats);

  // After the model acquired the embeddings' region, a vocabulary chunk of
  // the token embedding in `use`, or a block in a forward or backward pass.
  void after_embeddings(Zero3Gathering& gathering) const;
  void after_vocab_chunk(Zero3Gathering& gathering, int chunk, VocabUse use) const;
  void after_block(Zero3Gathering& gathering, int layer, bool forward) const;

 private:
  // The region of vocabulary chunk `chunk`; none (-1) when wte is persistent.
  int chunk_region(int chunk) const { return chunks_ == 0 ? -1 : 1 + layers_ + chunk; }
  // Requests `region` unless it is live or would pass the live limit.
  void prefetch_region(Zero3Gathering& gathering, int region) const;
  // Requests the blocks first, first + step, ... as the bucket and the
  // live limit allow.
  void prefetch_following(Zero3Gathering& gathering, int first, int step) const;

  std::vector<int64_t> sizes_;  // each region's floats
  int layers_ = 0;
  int chunks_ = 0;
  int64_t bucket_ = 0;
  int64_t max_live_ = 0;
};

// ZeRO stage 3: the gathered workspace's most resident bytes (the host's,
// Zero3Parameters', and a GPU's, DeviceZero3Parameters') in pages of
// `page_bytes`, the persistent tensors' included (a page shared
// by neighbouring ranges counted once), replayed from the model's order of
// acquires and releases over a training micro-batch (an evaluation's
// forward is its prefix), with the regions `prefetch` requests ahead, or
// none (each region gathered just before its use) when it is null.
int64_t gathered_peak_bytes(const Zero3Regions& regions, int64_t page_bytes,
                            const Zero3Prefetch* prefetch);

}  // namespace dslaunch::core
