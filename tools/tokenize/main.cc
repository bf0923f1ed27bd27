// tokenize_text: text or JSON Lines files to an llm.c token file, byte by
// byte or with a GPT-2 BPE vocabulary. Parsing, printing and exit codes only;
// the work is in byte_tokenizer, bpe_documents and
// worker/data/llmc_token_file.
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "tools/tokenize/bpe_documents.h"
#include "tools/tokenize/bpe_tokenizer.h"
#include "tools/tokenize/byte_tokenizer.h"
#include "worker/data/llmc_token_file.h"

namespace {

constexpr int kFailure = 1;

int fail(const std::string& message) {
  std::cerr << "tokenize_text: " << message << "\n";
  return kFailure;
}

struct Options {
  std::vector<std::string> inputs;
  std::string out;
  std::string valid_out;
  double valid_fraction = 0;
  std::string vocab;
  std::string merges;
  std::string tokenizer_json;
  std::string jsonl_key = "text";
};

dslaunch::core::StatusOr<std::vector<uint16_t>> tokenize(const Options& options) {
  using dslaunch::tools::BpeTokenizer;
  if (options.vocab.empty() && options.tokenizer_json.empty()) {
    return dslaunch::tools::tokenize_text_files(options.inputs, options.jsonl_key);
  }
  auto tokenizer = options.tokenizer_json.empty()
                       ? BpeTokenizer::from_vocab_and_merges(options.vocab, options.merges)
                       : BpeTokenizer::from_tokenizer_json(options.tokenizer_json);
  if (!tokenizer.ok()) return tokenizer.status();
  return dslaunch::tools::bpe_tokenize_files(*tokenizer, options.inputs, options.jsonl_key);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Turns text files into an llm.c token file (256-int32 header: magic 20240520, version 1, "
      "token count; then uint16 tokens). Each input file is one document; a file named *.jsonl "
      "holds one document per line (the string under --jsonl-key; blank lines and empty "
      "strings are skipped). By default the tokenizer is byte-level: one token per byte, "
      "vocabulary 256, documents separated by token 0 (the NUL byte, which text does not "
      "contain: a document with a NUL byte is refused). With --vocab and --merges, or "
      "--tokenizer, it is GPT-2's byte-level BPE (as OpenAI's encoder.py, Hugging Face's "
      "GPT2Tokenizer and tiktoken encode), documents separated by the vocabulary's "
      "<|endoftext|> token; input must be valid UTF-8, and ids must fit in uint16. "
      "Outputs are written atomically.",
      "tokenize_text"};
  Options options;
  app.add_option("inputs", options.inputs, "Text or .jsonl files, in order")
      ->required()
      ->type_name("FILE");
  app.add_option("--out", options.out, "The token file to write")->required()->type_name("FILE");
  auto* valid_out_option =
      app.add_option("--valid-out", options.valid_out,
                     "Also write the last --valid-fraction of the tokens to this file (and not "
                     "to --out)")
          ->type_name("FILE");
  auto* fraction_option =
      app.add_option("--valid-fraction", options.valid_fraction,
                     "Share of the tokens, from the end, for --valid-out (between 0 and 1)")
          ->type_name("F");
  valid_out_option->needs(fraction_option);
  fraction_option->needs(valid_out_option);
  auto* vocab_option =
      app.add_option("--vocab", options.vocab,
                     "GPT-2 BPE: the vocabulary, token to id (OpenAI's vocab.json or "
                     "encoder.json)")
          ->type_name("FILE");
  auto* merges_option =
      app.add_option("--merges", options.merges,
                     "GPT-2 BPE: the merges in rank order (merges.txt or vocab.bpe)")
          ->type_name("FILE");
  auto* tokenizer_option =
      app.add_option("--tokenizer", options.tokenizer_json,
                     "GPT-2 BPE: a Hugging Face tokenizer.json, instead of --vocab and --merges")
          ->type_name("FILE");
  vocab_option->needs(merges_option);
  merges_option->needs(vocab_option);
  tokenizer_option->excludes(vocab_option)->excludes(merges_option);
  app.add_option("--jsonl-key", options.jsonl_key,
                 "The member of each .jsonl line's object that holds its text")
      ->capture_default_str()
      ->type_name("KEY");
  CLI11_PARSE(app, argc, argv);

  const auto tokenized = tokenize(options);
  if (!tokenized.ok()) return fail(tokenized.status().message());
  std::span<const uint16_t> train = tokenized.value();
  std::span<const uint16_t> valid;
  if (!options.valid_out.empty()) {
    const auto split = dslaunch::tools::split_tail(train, options.valid_fraction);
    if (!split.error.empty()) return fail(split.error);
    train = split.train;
    valid = split.valid;
  }
  std::string error;
  if (!dslaunch::worker::data::write_llmc_token_file(options.out, train, error)) {
    return fail(error);
  }
  std::cout << fmt::format("wrote {} tokens to {}\n", train.size(), options.out);
  if (!options.valid_out.empty()) {
    if (!dslaunch::worker::data::write_llmc_token_file(options.valid_out, valid, error)) {
      return fail(error);
    }
    std::cout << fmt::format("wrote {} tokens to {}\n", valid.size(), options.valid_out);
  }
  return 0;
}
