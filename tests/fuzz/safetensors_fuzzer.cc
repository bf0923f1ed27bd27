// libFuzzer target: safetensors files (header and tensors) opened by
// SafetensorsFile, and GPT-2 weights loaded from them by load_hf_gpt2 with
// and without a config.json beside them. Besides crashes, hangs and sanitizer
// reports, it traps when a promise is broken: an opened file's tensors tile
// its data exactly, each with the bytes its dtype and shape need; the float
// dtypes read (F32 bit for bit), the others are refused with an error; what
// write_safetensors writes from an opened file opens again with the same
// tensors; loaded weights have a usable shape and exactly the parameters
// their table lays out, and a failed load has an error and no parameters.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"
#include "core/layout/gpt2_config.h"
#include "core/layout/parameter_table.h"
#include "core/weights/hf_gpt2.h"
#include "core/weights/safetensors.h"

namespace {

using dslaunch::fuzz::require;
namespace core = dslaunch::core;

bool is_float(core::SafetensorsDtype dtype) {
  return dtype == core::SafetensorsDtype::kF32 || dtype == core::SafetensorsDtype::kF64 ||
         dtype == core::SafetensorsDtype::kF16 || dtype == core::SafetensorsDtype::kBF16;
}

void check_tensors(const core::SafetensorsFile& file, const std::string& bytes) {
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), sizeof header_bytes);
  const char* data = bytes.data() + 8 + header_bytes;
  int64_t covered = 0;
  for (const core::SafetensorsTensor& tensor : file.tensors()) {
    int64_t numel = 1;
    for (const int64_t dimension : tensor.shape) {
      require(dimension >= 0);
      numel *= dimension;
    }
    require(numel == tensor.numel);
    require(tensor.begin == covered);
    require(tensor.end - tensor.begin == numel * core::dtype_size(tensor.dtype));
    covered = tensor.end;
    require(file.find(tensor.name) == &tensor);

    // At least one float, so that an empty tensor is read into a real buffer.
    std::vector<float> values(static_cast<size_t>(std::max<int64_t>(numel, 1)));
    std::string error;
    const bool read = file.read_floats(tensor, values.data(), error);
    require(read == is_float(tensor.dtype) && read == error.empty());
    if (tensor.dtype == core::SafetensorsDtype::kF32) {
      require(std::memcmp(values.data(), data + tensor.begin, static_cast<size_t>(numel) * 4) == 0);
    }
  }
  require(8 + header_bytes + covered == bytes.size());
}

// Writes the opened file's tensors anew and checks they read back the same.
void check_rewrite(const core::SafetensorsFile& file, const std::string& bytes) {
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes.data(), sizeof header_bytes);
  std::vector<core::SafetensorsTensorData> tensors;
  for (const core::SafetensorsTensor& tensor : file.tensors()) {
    tensors.push_back(
        {tensor.name, tensor.dtype, tensor.shape, bytes.data() + 8 + header_bytes + tensor.begin});
  }
  const std::string path = dslaunch::fuzz::scratch_dir() + "/rewritten.safetensors";
  std::string error;
  if (!core::write_safetensors(path, tensors, file.metadata(), error)) {
    require(!error.empty());
    return;
  }
  core::SafetensorsFile reread;
  require(reread.open(path, error));
  require(reread.tensors().size() == file.tensors().size());
  require(reread.metadata() == file.metadata());
  for (const core::SafetensorsTensor& tensor : reread.tensors()) {
    const core::SafetensorsTensor* original = file.find(tensor.name);
    require(original != nullptr && original->dtype == tensor.dtype &&
            original->shape == tensor.shape);
  }
}

void check_weights(const core::HfGpt2Weights& weights, int64_t num_heads, int64_t multiple) {
  if (!weights.error.empty()) {
    require(weights.params.empty());
    return;
  }
  const core::Gpt2Config& config = weights.config;
  require(core::config_problem(config).empty());
  require(num_heads == 0 || config.num_heads == num_heads);
  require(config.padded_vocab_size % multiple == 0);
  require(static_cast<int64_t>(weights.params.size()) == core::ParameterTable(config).total());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  const int64_t num_heads = input.ConsumeIntegralInRange<int64_t>(0, 8);
  const int64_t multiple = input.ConsumeIntegralInRange<int64_t>(1, 64);
  const bool with_config = input.ConsumeBool();
  const std::string config_json = input.ConsumeRandomLengthString(1024);
  const std::string bytes = input.ConsumeRemainingBytesAsString();

  dslaunch::fuzz::clear_scratch_dir();
  const std::string path = dslaunch::fuzz::write_scratch_file("model.safetensors", bytes);
  if (with_config) dslaunch::fuzz::write_scratch_file("config.json", config_json);

  core::SafetensorsFile file;
  std::string error;
  if (file.open(path, error)) {
    check_tensors(file, bytes);
    check_rewrite(file, bytes);
  } else {
    require(!error.empty() && file.tensors().empty());
  }
  check_weights(core::load_hf_gpt2(path, num_heads, multiple), num_heads, multiple);
  return 0;
}
