#include "worker/data/held_out_split.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace dslaunch::worker::data {

HeldOutSplit split_held_out(const TokenSource& source, int64_t seq_len) {
  const int64_t total = source.size();
  const int64_t window = seq_len + 1;
  const auto fraction =
      static_cast<int64_t>(std::ceil(kHeldOutFraction * static_cast<double>(total)));
  const int64_t valid = std::max(fraction, window);
  if (total - valid < window) {
    return {{},
            {},
            fmt::format("{} is too small to hold out a validation split: it has {} "
                        "tokens, and the last {} (3%, at least one window of seq_length "
                        "+ 1 = {}) would leave fewer than {} to train on; give more "
                        "data, a shorter model.seq_length, or a data.valid file",
                        source.describe(), total, valid, window, window)};
  }
  return {{&source, 0, total - valid}, {&source, total - valid, total}, ""};
}

}  // namespace dslaunch::worker::data
