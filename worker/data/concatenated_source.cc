#include "worker/data/concatenated_source.h"

#include <algorithm>

#include <fmt/format.h>

namespace dslaunch::worker::data {

ConcatenatedSource::ConcatenatedSource(std::vector<TokenRange> parts) : parts_(std::move(parts)) {
  starts_.push_back(0);
  for (const TokenRange& part : parts_) {
    starts_.push_back(starts_.back() + part.size());
    // The largest token of the whole source stands in for the range's: a
    // range check against the vocabulary stays on the safe side.
    max_token_ = std::max(max_token_, part.source->max_token());
  }
}

void ConcatenatedSource::read(int64_t offset, int64_t count, int32_t* out) const {
  auto part = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), offset) -
                                  starts_.begin() - 1);
  while (count > 0) {
    const int64_t within = offset - starts_[part];
    const int64_t n = std::min(count, parts_[part].size() - within);
    parts_[part].read(within, n, out);
    out += n;
    offset += n;
    count -= n;
    ++part;
  }
}

std::string ConcatenatedSource::describe() const {
  const TokenRange& first = parts_.front();
  if (parts_.size() == 1) return first.source->describe();
  return fmt::format("{} parts ({} first, ...), {} tokens", parts_.size(), first.source->describe(),
                     size());
}

}  // namespace dslaunch::worker::data
