// tokenize_text: text files to an llm.c token file with a byte-level
// tokenizer. Parsing, printing and exit codes only; the work is in
// byte_tokenizer and worker/data/llmc_token_file.
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "tools/tokenize/byte_tokenizer.h"
#include "worker/data/llmc_token_file.h"

namespace {

constexpr int kFailure = 1;

int fail(const std::string& message) {
  std::cerr << "tokenize_text: " << message << "\n";
  return kFailure;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Turns text files into an llm.c token file (256-int32 header: magic 20240520, version 1, "
      "token count; then uint16 tokens) with a byte-level tokenizer: one token per byte, "
      "vocabulary 256. Each input file is one document; documents are separated by token 0 "
      "(the NUL byte, which text does not contain: a file with a NUL byte is refused). "
      "Outputs are written atomically.",
      "tokenize_text"};
  std::vector<std::string> inputs;
  std::string out;
  std::string valid_out;
  double valid_fraction = 0;
  app.add_option("inputs", inputs, "Text files, in order")->required()->type_name("FILE");
  app.add_option("--out", out, "The token file to write")->required()->type_name("FILE");
  auto* valid_out_option =
      app.add_option("--valid-out", valid_out,
                     "Also write the last --valid-fraction of the tokens to this file (and not "
                     "to --out)")
          ->type_name("FILE");
  auto* fraction_option =
      app.add_option("--valid-fraction", valid_fraction,
                     "Share of the tokens, from the end, for --valid-out (between 0 and 1)")
          ->type_name("F");
  valid_out_option->needs(fraction_option);
  fraction_option->needs(valid_out_option);
  CLI11_PARSE(app, argc, argv);

  const auto tokenized = dslaunch::tools::tokenize_text_files(inputs);
  if (!tokenized.error.empty()) return fail(tokenized.error);
  std::span<const uint16_t> train = tokenized.tokens;
  std::span<const uint16_t> valid;
  if (!valid_out.empty()) {
    const auto split = dslaunch::tools::split_tail(tokenized.tokens, valid_fraction);
    if (!split.error.empty()) return fail(split.error);
    train = split.train;
    valid = split.valid;
  }
  std::string error;
  if (!dslaunch::worker::data::write_llmc_token_file(out, train, error)) return fail(error);
  std::cout << fmt::format("wrote {} tokens to {}\n", train.size(), out);
  if (!valid_out.empty()) {
    if (!dslaunch::worker::data::write_llmc_token_file(valid_out, valid, error)) return fail(error);
    std::cout << fmt::format("wrote {} tokens to {}\n", valid.size(), valid_out);
  }
  return 0;
}
