#include "core/layout/activation_layout.h"

namespace dslaunch::core {

int64_t activation_bytes(const LocalSizes& sizes, int64_t max_batch, int64_t seq_len, int slots,
                         AttentionScratch attention, bool with_scratch) {
  const int64_t scratch = with_scratch
                              ? RecomputeLayout(sizes, max_batch, seq_len).total +
                                    GradientLayout(sizes, max_batch, seq_len, attention).total
                              : 0;
  const int64_t floats = ActivationLayout(sizes, max_batch, seq_len).total * slots + scratch;
  const int64_t token_ids = 2 * max_batch * seq_len * slots;  // inputs and targets
  return floats * static_cast<int64_t>(sizeof(float)) +
         token_ids * static_cast<int64_t>(sizeof(int32_t));
}

}  // namespace dslaunch::core
