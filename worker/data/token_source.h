#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dslaunch::worker::data {

// A read-only, flat stream of token ids: a token file, or the sequences of a
// Megatron dataset concatenated in order. Implementations map their files
// and check every token when they are opened, so reads cannot fail and every
// token read is in [0, max_token()]. All methods are const and safe to call
// from several threads at once.
class TokenSource {
 public:
  virtual ~TokenSource() = default;

  // Tokens in the stream.
  virtual int64_t size() const = 0;

  // Copies tokens [offset, offset + count) to out[0, count).
  // Precondition: 0 <= offset, 0 <= count, offset + count <= size().
  virtual void read(int64_t offset, int64_t count, int32_t* out) const = 0;

  // The largest token id in the stream (-1 when it is empty), found by the
  // one scan over all tokens made on open; the trainer checks it against the
  // vocabulary. O(1).
  virtual int32_t max_token() const = 0;

  // One line for logs and errors: format, path(s) and token count.
  virtual std::string describe() const = 0;
};

// What opening a source gives: a source, or an error naming the file, what is
// wrong with it and what was expected.
struct TokenSourceResult {
  std::unique_ptr<TokenSource> source;  // null when error is set
  std::string error;
};

// Tokens [begin, end) of a source that outlives the range. Copyable; reads
// are as thread-safe as the source's.
struct TokenRange {
  const TokenSource* source = nullptr;
  int64_t begin = 0;
  int64_t end = 0;

  int64_t size() const { return end - begin; }
  // Tokens [offset, offset + count) of the range. Same precondition as
  // TokenSource::read, relative to size().
  void read(int64_t offset, int64_t count, int32_t* out) const {
    source->read(begin + offset, count, out);
  }
};

inline TokenRange whole(const TokenSource& source) { return {&source, 0, source.size()}; }

}  // namespace dslaunch::worker::data
