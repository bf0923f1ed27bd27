#include "worker/data/open_token_source.h"

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "worker/data/llmc_token_file.h"
#include "worker/data/megatron_indexed_dataset.h"

namespace dslaunch::worker::data {
namespace {

bool is_file(const std::string& path) {
  std::error_code ignored;  // a path the OS refuses is "no file there"
  return std::filesystem::is_regular_file(path, ignored);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() > suffix.size() && text.ends_with(suffix);
}

// `path` without a trailing .bin or .idx: users often name one of the pair.
std::string megatron_prefix(const std::string& path) {
  if (ends_with(path, ".bin") || ends_with(path, ".idx")) return path.substr(0, path.size() - 4);
  return path;
}

bool has_megatron_pair(const std::string& prefix) {
  return is_file(prefix + ".bin") && is_file(prefix + ".idx");
}

// For the error when nothing was found: which of the pair is missing.
std::string missing_from_pair(const std::string& prefix) {
  const bool bin = is_file(prefix + ".bin");
  const bool idx = is_file(prefix + ".idx");
  const std::string missing = !bin && !idx ? "neither exists"
                              : bin        ? fmt::format("'{}.idx' is missing", prefix)
                                           : fmt::format("'{}.bin' is missing", prefix);
  return fmt::format("'{}.bin' + '{}.idx' ({})", prefix, prefix, missing);
}

}  // namespace

TokenSourceResult open_token_source(const std::string& path, spec::DataFormat format) {
  switch (format) {
    case spec::DataFormat::kLlmc:
      return open_llmc_token_file(path);
    case spec::DataFormat::kMegatron:
      return open_megatron_indexed_dataset(has_megatron_pair(path) ? path : megatron_prefix(path));
    case spec::DataFormat::kAuto:
      break;
  }
  if (has_llmc_magic(path)) return open_llmc_token_file(path);
  if (has_megatron_pair(path)) return open_megatron_indexed_dataset(path);
  const std::string prefix = megatron_prefix(path);
  if (prefix != path && has_megatron_pair(prefix)) return open_megatron_indexed_dataset(prefix);

  const std::string as_file = is_file(path) ? "its first int32 is not the llm.c magic number "
                                              "20240520"
                                            : "no such file";
  std::string tried = fmt::format(
      "no token data at '{}': tried an llm.c token file at '{}' ({}), "
      "and a Megatron dataset {}",
      path, path, as_file, missing_from_pair(path));
  if (prefix != path) tried += fmt::format(", and {}", missing_from_pair(prefix));
  return {nullptr, tried + "; set data.format to llmc or megatron to see why a file is refused"};
}

}  // namespace dslaunch::worker::data
