#include "tools/tokenize/bpe_tokenizer.h"

#include <functional>
#include <queue>
#include <utility>

#include <fmt/format.h>

#include "tools/tokenize/byte_alphabet.h"

namespace dslaunch::tools {
namespace {

// The cache keeps the common pieces (words with their leading space) of a
// corpus, which follow Zipf's law and so come back within a few thousand
// pieces. It is emptied when full rather than grown; long pieces (runs of
// white space, unspaced CJK text) rarely repeat and are not kept.
constexpr size_t kMaxCachedPieces = size_t{1} << 18;
constexpr size_t kMaxCachedPieceBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) {
  return static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32 | static_cast<uint32_t>(right);
}

}  // namespace

core::StatusOr<BpeTokenizer> BpeTokenizer::from_vocab_and_merges(const std::string& vocab_path,
                                                                 const std::string& merges_path) {
  auto vocabulary = load_vocab_and_merges(vocab_path, merges_path);
  if (!vocabulary.ok()) return vocabulary.status();
  return create(std::move(*vocabulary));
}

core::StatusOr<BpeTokenizer> BpeTokenizer::from_tokenizer_json(const std::string& path) {
  auto vocabulary = load_tokenizer_json(path);
  if (!vocabulary.ok()) return vocabulary.status();
  return create(std::move(*vocabulary));
}

core::StatusOr<BpeTokenizer> BpeTokenizer::create(BpeVocabulary vocabulary) {
  auto pretokenizer = Gpt2Pretokenizer::create();
  if (!pretokenizer.ok()) return pretokenizer.status();
  return BpeTokenizer(std::move(*pretokenizer), std::move(vocabulary));
}

BpeTokenizer::BpeTokenizer(Gpt2Pretokenizer pretokenizer, BpeVocabulary vocabulary)
    : pretokenizer_(std::move(pretokenizer)),
      merges_(std::move(vocabulary.merges)),
      end_of_text_(vocabulary.end_of_text) {
  std::unordered_map<std::string_view, int32_t> ids;
  token_bytes_.reserve(vocabulary.tokens.size());
  for (size_t id = 0; id < vocabulary.tokens.size(); ++id) {
    const std::string& text = vocabulary.tokens[id];
    if (text.empty()) {
      token_bytes_.emplace_back();
      continue;
    }
    ids.emplace(text, static_cast<int32_t>(id));
    token_bytes_.push_back(token_text_bytes(text));
  }
  for (int byte = 0; byte < 256; ++byte) {
    byte_tokens_[byte] = ids.at(byte_character(static_cast<uint8_t>(byte)));
  }
  // A pair listed twice keeps its later rank, as bpe_vocabulary.h says.
  for (size_t rank = 0; rank < merges_.size(); ++rank) {
    ranks_[pair_key(merges_[rank].left, merges_[rank].right)] = static_cast<int32_t>(rank);
  }
}

int32_t BpeTokenizer::rank(int32_t left, int32_t right) const {
  const auto found = ranks_.find(pair_key(left, right));
  return found == ranks_.end() ? -1 : found->second;
}

core::Status BpeTokenizer::encode(std::string_view text, std::vector<int32_t>& out) {
  return pretokenizer_.split(text, [&](std::string_view piece) {
    if (piece.size() > kMaxCachedPieceBytes) {
      const std::vector<int32_t> tokens = merge_piece(piece);
      out.insert(out.end(), tokens.begin(), tokens.end());
      return;
    }
    auto cached = cache_.find(std::string(piece));
    if (cached == cache_.end()) {
      if (cache_.size() >= kMaxCachedPieces) cache_.clear();
      cached = cache_.emplace(std::string(piece), merge_piece(piece)).first;
    }
    out.insert(out.end(), cached->second.begin(), cached->second.end());
  });
}

std::vector<int32_t> BpeTokenizer::merge_piece(std::string_view piece) const {
  // The symbols are a linked list over the piece's byte positions: a merge
  // keeps the left symbol's position and marks the right one's token -1.
  // Candidates wait in a heap, so a piece of n bytes takes O(n log n) rather
  // than encoder.py's O(n^2), which long runs of white space would feel.
  const auto size = static_cast<int64_t>(piece.size());
  std::vector<int32_t> token(piece.size());
  std::vector<int64_t> next(piece.size());
  std::vector<int64_t> previous(piece.size());
  for (int64_t i = 0; i < size; ++i) {
    token[i] = byte_tokens_[static_cast<uint8_t>(piece[i])];
    next[i] = i + 1;
    previous[i] = i - 1;
  }
  // (rank, left position): the best rank first and, within a rank, left to
  // right. An entry goes stale when either symbol merges with another
  // neighbour; it is checked when taken. A symbol's token only ever grows, so
  // a stale entry can never look valid again.
  using Candidate = std::pair<int32_t, int64_t>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> candidates;
  const auto consider = [&](int64_t left) {
    if (left < 0 || next[left] >= size) return;
    const int32_t found = rank(token[left], token[next[left]]);
    if (found >= 0) candidates.emplace(found, left);
  };
  for (int64_t i = 0; i + 1 < size; ++i) consider(i);

  std::vector<int64_t> lefts;
  while (!candidates.empty()) {
    // encoder.py merges every occurrence of the best pair before it looks for
    // the next best, so a pair that these merges create waits for the next
    // round even when it ranks better. (It cannot be this pair again: a merged
    // token is longer than either part.)
    const int32_t best = candidates.top().first;
    lefts.clear();
    while (!candidates.empty() && candidates.top().first == best) {
      lefts.push_back(candidates.top().second);
      candidates.pop();
    }
    const BpeMerge& merge = merges_[best];
    for (const int64_t left : lefts) {
      const int64_t right = next[left];
      if (token[left] != merge.left || right >= size || token[right] != merge.right) continue;
      token[left] = merge.merged;
      token[right] = -1;
      next[left] = next[right];
      if (next[right] < size) previous[next[right]] = left;
      consider(previous[left]);
      consider(left);
    }
  }
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < size; i = next[i]) tokens.push_back(token[i]);
  return tokens;
}

core::StatusOr<std::string> BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || token_bytes_[id].empty()) {
      return core::invalid_argument(
          fmt::format("token {} (at position {}) is not in the vocabulary, whose ids are below {}",
                      id, i, vocab_size()));
    }
    bytes += token_bytes_[id];
  }
  return bytes;
}

}  // namespace dslaunch::tools
