// libFuzzer target: GPT-2 BPE vocabularies (vocab.json + merges.txt, or a
// Hugging Face tokenizer.json) read by tools/tokenize, and text encoded with
// what loads. Besides crashes, hangs and sanitizer reports, it traps when a
// promise is broken: a load either fails with a message or gives a
// tokenizer whose ids lie in its vocabulary; encoding either fails with a
// message (text that is not UTF-8) or gives ids that decode to the text
// exactly.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "tools/tokenize/bpe_tokenizer.h"

namespace {

using dslaunch::fuzz::require;
namespace tools = dslaunch::tools;
namespace core = dslaunch::core;

void check(core::StatusOr<tools::BpeTokenizer> loaded, const std::string& text) {
  if (!loaded.ok()) {
    require(!loaded.status().message().empty());
    return;
  }
  tools::BpeTokenizer& tokenizer = *loaded;
  std::vector<int32_t> ids;
  const core::Status encoded = tokenizer.encode(text, ids);
  if (!encoded.ok()) {
    require(!encoded.message().empty());
    return;
  }
  for (const int32_t id : ids) require(id >= 0 && id < tokenizer.vocab_size());
  const core::StatusOr<std::string> decoded = tokenizer.decode(ids);
  require(decoded.ok() && decoded.value() == text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const std::string vocab = input.ConsumeRandomLengthString(4096);
  const std::string merges = input.ConsumeRandomLengthString(4096);
  const std::string text = input.ConsumeRemainingBytesAsString();
  dslaunch::fuzz::clear_scratch_dir();
  const std::string vocab_path = dslaunch::fuzz::write_scratch_file("vocab.json", vocab);
  const std::string merges_path = dslaunch::fuzz::write_scratch_file("merges.txt", merges);
  check(tools::BpeTokenizer::from_vocab_and_merges(vocab_path, merges_path), text);
  // The first part read as a whole tokenizer.json too.
  check(tools::BpeTokenizer::from_tokenizer_json(vocab_path), text);
  return 0;
}
