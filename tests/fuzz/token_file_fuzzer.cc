// libFuzzer target: training data files, opened by open_token_source as the
// worker opens them: an llm.c token file (header and uint16 tokens), or a
// Megatron indexed dataset (.idx and .bin), by their own format or detected.
// Besides crashes, hangs and sanitizer reports, it traps when a promise is
// broken: a source that opens has an error only when it does not, and every
// token it reads is in [0, max_token()], max_token() being the largest token
// of all (-1 for none).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/spec/job_spec.h"
#include "tests/fuzz/fuzz_support.h"
#include "worker/data/open_token_source.h"

namespace {

using dslaunch::fuzz::require;
namespace data = dslaunch::worker::data;

// Sources larger than this are read at their start and end only.
constexpr int64_t kReadAll = 1 << 16;

void check_source(const data::TokenSource& source) {
  const int64_t size = source.size();
  require(size >= 0);
  require(!source.describe().empty());
  std::vector<int32_t> tokens(static_cast<size_t>(std::min(size, kReadAll)));
  source.read(0, static_cast<int64_t>(tokens.size()), tokens.data());
  if (size > kReadAll) {
    std::vector<int32_t> tail(tokens.size());
    source.read(size - kReadAll, kReadAll, tail.data());
    tokens.insert(tokens.end(), tail.begin(), tail.end());
  }
  int32_t largest = -1;
  for (const int32_t token : tokens) {
    require(token >= 0 && token <= source.max_token());
    largest = std::max(largest, token);
  }
  if (size <= kReadAll) require(largest == source.max_token());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  FuzzedDataProvider input(bytes, size);
  const bool megatron = input.ConsumeBool();
  const auto format = static_cast<dslaunch::spec::DataFormat>(input.ConsumeIntegralInRange(0, 2));
  dslaunch::fuzz::clear_scratch_dir();
  std::string path;
  if (megatron) {
    dslaunch::fuzz::write_scratch_file("tokens.idx", input.ConsumeRandomLengthString(4096));
    dslaunch::fuzz::write_scratch_file("tokens.bin", input.ConsumeRemainingBytesAsString());
    path = dslaunch::fuzz::scratch_dir() + "/tokens";
  } else {
    path = dslaunch::fuzz::write_scratch_file("tokens", input.ConsumeRemainingBytesAsString());
  }
  const data::TokenSourceResult opened = data::open_token_source(path, format);
  require((opened.source == nullptr) != opened.error.empty());
  if (opened.source) check_source(*opened.source);
  return 0;
}
