#include "core/weights/safetensors.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/json_input.h"
#include "core/atomic_file.h"

namespace dslaunch::core {
namespace {

// The file stores little-endian numbers, which are copied as they are.
static_assert(std::endian::native == std::endian::little);

// The reference implementation refuses larger headers; so do we, so that a
// corrupt length cannot make us parse gigabytes as JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  SafetensorsDtype dtype;
  std::string_view name;
  int64_t size;
};

constexpr std::array<DtypeInfo, 15> kDtypes = {{
    {SafetensorsDtype::kBool, "BOOL", 1},
    {SafetensorsDtype::kU8, "U8", 1},
    {SafetensorsDtype::kI8, "I8", 1},
    {SafetensorsDtype::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDtype::kF8E4M3, "F8_E4M3", 1},
    {SafetensorsDtype::kI16, "I16", 2},
    {SafetensorsDtype::kU16, "U16", 2},
    {SafetensorsDtype::kF16, "F16", 2},
    {SafetensorsDtype::kBF16, "BF16", 2},
    {SafetensorsDtype::kI32, "I32", 4},
    {SafetensorsDtype::kU32, "U32", 4},
    {SafetensorsDtype::kF32, "F32", 4},
    {SafetensorsDtype::kF64, "F64", 8},
    {SafetensorsDtype::kI64, "I64", 8},
    {SafetensorsDtype::kU64, "U64", 8},
}};

const DtypeInfo& info_of(SafetensorsDtype dtype) { return kDtypes[static_cast<size_t>(dtype)]; }

// IEEE binary16 to binary32, exactly (every half is a float).
float half_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  const uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  // Rebias the exponent from 15 to 127.
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

float bfloat16_to_float(uint16_t bfloat) {
  return std::bit_cast<float>(static_cast<uint32_t>(bfloat) << 16);
}

template <typename T>
T load(const uint8_t* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));  // tensors need not be aligned
  return value;
}

// A non-negative integer that fits int64_t, or nullopt.
std::optional<int64_t> as_size(const nlohmann::json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  const auto number = value.get<uint64_t>();
  if (number > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
  return static_cast<int64_t>(number);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Fills `tensor` from its header entry; "" or what is wrong with the entry.
std::string parse_tensor_entry(const std::string& name, const nlohmann::json& entry,
                               SafetensorsTensor& tensor) {
  tensor.name = name;
  if (!entry.is_object())
    return fmt::format("the header entry of tensor '{}' is not an object", name);
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) {
    return fmt::format("tensor '{}' has no \"dtype\" string", name);
  }
  const auto known = dtype_from_name(dtype->get_ref<const std::string&>());
  if (!known) {
    return fmt::format("tensor '{}' has dtype '{}', which is not a safetensors dtype", name,
                       dtype->get_ref<const std::string&>());
  }
  tensor.dtype = *known;

  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) {
    return fmt::format("tensor '{}' has no \"shape\" list", name);
  }
  tensor.numel = 1;
  for (const nlohmann::json& dimension : *shape) {
    const auto size = as_size(dimension);
    if (!size) {
      return fmt::format("tensor '{}' has shape {}; dimensions must be non-negative integers", name,
                         core::json_excerpt(*shape));
    }
    tensor.shape.push_back(*size);
    if (__builtin_mul_overflow(tensor.numel, *size, &tensor.numel)) {
      return fmt::format("tensor '{}' has shape {}, too many elements", name, core::json_excerpt(*shape));
    }
  }

  const auto offsets = entry.find("data_offsets");
  std::optional<int64_t> begin;
  std::optional<int64_t> end;
  if (offsets != entry.end() && offsets->is_array() && offsets->size() == 2) {
    begin = as_size((*offsets)[0]);
    end = as_size((*offsets)[1]);
  }
  if (!begin || !end || *end < *begin) {
    return fmt::format(
        "tensor '{}' has data_offsets {}; they must be two byte offsets [begin, end] with begin <= "
        "end",
        name, offsets == entry.end() ? std::string("missing") : core::json_excerpt(*offsets));
  }
  tensor.begin = *begin;
  tensor.end = *end;
  int64_t bytes = 0;
  if (__builtin_mul_overflow(tensor.numel, info_of(tensor.dtype).size, &bytes) ||
      bytes != tensor.end - tensor.begin) {
    return fmt::format(
        "tensor '{}' has data_offsets [{}, {}] ({} bytes), but dtype {} and shape {} need {} bytes",
        name, tensor.begin, tensor.end, tensor.end - tensor.begin, info_of(tensor.dtype).name,
        shape_text(tensor.shape), tensor.numel * info_of(tensor.dtype).size);
  }
  return "";
}

// "" or what is wrong with the "__metadata__" entry.
std::string parse_metadata(const nlohmann::json& entry, std::map<std::string, std::string>& out) {
  if (!entry.is_object()) return "\"__metadata__\" is not an object of strings";
  for (const auto& [key, value] : entry.items()) {
    if (!value.is_string()) {
      return fmt::format("\"__metadata__\" entry '{}' is {}, not a string", key, core::json_excerpt(value));
    }
    out[key] = value.get<std::string>();
  }
  return "";
}

// "" when the tensors, sorted by offset, tile [0, data_bytes) exactly, as
// the reference implementation requires; otherwise the first problem.
std::string check_layout(const std::vector<SafetensorsTensor>& tensors, int64_t data_bytes) {
  int64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& tensor : tensors) {
    if (tensor.end > data_bytes) {
      return fmt::format(
          "tensor '{}' has data_offsets [{}, {}], past the end of the data ({} bytes after the "
          "header); the file is truncated",
          tensor.name, tensor.begin, tensor.end, data_bytes);
    }
    if (tensor.begin < covered) {
      return fmt::format("tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))",
                         tensor.name, tensor.begin, tensor.end, previous->name, previous->begin,
                         previous->end);
    }
    if (tensor.begin > covered) {
      return fmt::format("bytes [{}, {}) of the data, before tensor '{}', belong to no tensor",
                         covered, tensor.begin, tensor.name);
    }
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered != data_bytes) {
    return fmt::format("the last {} bytes of the file belong to no tensor", data_bytes - covered);
  }
  return "";
}

}  // namespace

std::string_view dtype_name(SafetensorsDtype dtype) { return info_of(dtype).name; }

std::optional<SafetensorsDtype> dtype_from_name(std::string_view name) {
  for (const DtypeInfo& info : kDtypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

int64_t dtype_size(SafetensorsDtype dtype) { return info_of(dtype).size; }

bool SafetensorsFile::open(const std::string& path, std::string& error) {
  tensors_.clear();
  metadata_.clear();
  data_ = nullptr;
  if (!mapped_.open(path, error)) return false;
  auto fail = [&](const std::string& problem) {
    error = fmt::format("safetensors file '{}': {}", path, problem);
    tensors_.clear();
    metadata_.clear();
    mapped_ = core::MappedFile();
    return false;
  };

  const int64_t size = mapped_.size();
  if (size < 8) {
    return fail(
        fmt::format("it has {} bytes, fewer than the 8 of the header length; it is truncated or "
                    "not safetensors",
                    size));
  }
  const auto header_bytes = load<uint64_t>(mapped_.bytes());
  if (header_bytes > kMaxHeaderBytes) {
    return fail(fmt::format(
        "the header length is {} bytes, above the limit of {}; the file is corrupt or not "
        "safetensors",
        header_bytes, kMaxHeaderBytes));
  }
  if (static_cast<int64_t>(header_bytes) > size - 8) {
    return fail(fmt::format("the header length ({} bytes) runs past the end of the file ({} bytes)",
                            header_bytes, size));
  }
  const std::string_view header(reinterpret_cast<const char*>(mapped_.bytes()) + 8, header_bytes);
  if (header.empty() || header.front() != '{') {
    return fail("the header does not start with '{'; the file is not safetensors");
  }
  std::string parse_error;
  // nlohmann rejects ill-formed UTF-8 as a parse error too.
  const std::optional<nlohmann::json> parsed = core::parse_untrusted_json(header, parse_error);
  if (!parsed) return fail("the header is not valid UTF-8 JSON: " + parse_error);
  const nlohmann::json& json = *parsed;
  if (!json.is_object()) return fail("the header is not a JSON object");

  for (const auto& [name, entry] : json.items()) {
    std::string problem;
    if (name == "__metadata__") {
      problem = parse_metadata(entry, metadata_);
    } else {
      SafetensorsTensor tensor;
      problem = parse_tensor_entry(name, entry, tensor);
      tensors_.push_back(std::move(tensor));
    }
    if (!problem.empty()) return fail(problem);
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
              return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
            });
  const int64_t data_bytes = size - 8 - static_cast<int64_t>(header_bytes);
  if (const std::string problem = check_layout(tensors_, data_bytes); !problem.empty()) {
    return fail(problem);
  }
  data_ = mapped_.bytes() + 8 + header_bytes;
  return true;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsTensor& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

bool SafetensorsFile::read_floats(const SafetensorsTensor& tensor, float* out,
                                  std::string& error) const {
  const uint8_t* bytes = data_ + tensor.begin;
  const int64_t n = tensor.numel;
  switch (tensor.dtype) {
    case SafetensorsDtype::kF32:
      std::memcpy(out, bytes, static_cast<size_t>(n) * sizeof(float));
      return true;
    case SafetensorsDtype::kF64:
      for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(load<double>(bytes + 8 * i));
      return true;
    case SafetensorsDtype::kF16:
      for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(load<uint16_t>(bytes + 2 * i));
      return true;
    case SafetensorsDtype::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bfloat16_to_float(load<uint16_t>(bytes + 2 * i));
      return true;
    default:
      error = fmt::format(
          "safetensors file '{}': tensor '{}' has dtype {}; only F32, F64, F16 and BF16 tensors "
          "can be read as floats",
          path(), tensor.name, dtype_name(tensor.dtype));
      return false;
  }
}

namespace {

// The tensors in the file's order: by descending dtype alignment, then by name.
std::vector<const SafetensorsTensorData*> file_order(
    const std::vector<SafetensorsTensorData>& tensors) {
  std::vector<const SafetensorsTensorData*> order;
  for (const SafetensorsTensorData& tensor : tensors) order.push_back(&tensor);
  std::stable_sort(order.begin(), order.end(),
                   [](const SafetensorsTensorData* a, const SafetensorsTensorData* b) {
                     if (a->dtype != b->dtype) return a->dtype > b->dtype;
                     return a->name < b->name;
                   });
  return order;
}

// A tensor's bytes (0 for a shape with a negative dimension, refused anyway).
int64_t byte_size(const SafetensorsTensorData& tensor) {
  int64_t bytes = dtype_size(tensor.dtype);
  for (const int64_t dimension : tensor.shape) bytes *= std::max<int64_t>(dimension, 0);
  return bytes;
}

// Every tensor in file order to `write` (the header first): data tensors
// whole, source tensors read a piece at a time. Every source piece is read
// exactly once, in order, even after a write or a source failed (sources
// may be collective over ranks that read alongside); from the first
// failure on nothing more is written. Returns 0, a write's errno, or -1
// with `source_error` set.
int stream_tensors(const std::vector<const SafetensorsTensorData*>& order, std::string_view head,
                   const std::function<int(std::string_view)>& write, std::string& source_error) {
  int failure = write(head);
  std::vector<char> piece;
  for (const SafetensorsTensorData* tensor : order) {
    const int64_t size = byte_size(*tensor);
    if (tensor->data != nullptr) {
      if (failure == 0) {
        failure = write(std::string_view(static_cast<const char*>(tensor->data),
                                         static_cast<size_t>(size)));
      }
      continue;
    }
    if (!tensor->source) continue;
    for (int64_t at = 0; at < size; at += kSafetensorsSourcePiece) {
      const int64_t bytes = std::min(kSafetensorsSourcePiece, size - at);
      piece.resize(static_cast<size_t>(bytes));
      std::string problem = tensor->source(at, bytes, piece.data());
      if (failure != 0) continue;
      if (!problem.empty()) {
        source_error = fmt::format("tensor '{}': {}", tensor->name, problem);
        failure = -1;
        continue;
      }
      failure = write(std::string_view(piece.data(), piece.size()));
    }
  }
  return failure;
}

}  // namespace

std::string read_safetensors_sources(const std::vector<SafetensorsTensorData>& tensors) {
  std::string error;
  stream_tensors(file_order(tensors), "", [](std::string_view) { return 0; }, error);
  return error;
}

bool write_safetensors(const std::string& path, const std::vector<SafetensorsTensorData>& tensors,
                       const std::map<std::string, std::string>& metadata, std::string& error) {
  // Whatever fails, the sources are read (see stream_tensors).
  auto fail = [&](const std::string& problem) {
    read_safetensors_sources(tensors);
    error = fmt::format("cannot write safetensors file '{}': {}", path, problem);
    return false;
  };
  std::set<std::string_view> names;
  for (const SafetensorsTensorData& tensor : tensors) {
    if (tensor.name.empty() || tensor.name == "__metadata__") {
      return fail(fmt::format("'{}' cannot name a tensor", tensor.name));
    }
    if (!names.insert(tensor.name).second) {
      return fail(fmt::format("two tensors are named '{}'", tensor.name));
    }
    for (const int64_t dimension : tensor.shape) {
      if (dimension < 0) {
        return fail(fmt::format("tensor '{}' has shape {}", tensor.name, shape_text(tensor.shape)));
      }
    }
    if (tensor.data == nullptr && !tensor.source) {
      return fail(fmt::format("tensor '{}' has no data", tensor.name));
    }
  }
  const std::vector<const SafetensorsTensorData*> order = file_order(tensors);

  // Keys stay in insertion order, and the tensor entries' keys in the
  // reference's order (dtype, shape, data_offsets).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const SafetensorsTensorData* tensor : order) {
    const int64_t bytes = byte_size(*tensor);
    nlohmann::ordered_json entry = nlohmann::ordered_json::object();
    entry["dtype"] = dtype_name(tensor->dtype);
    entry["shape"] = tensor->shape;
    entry["data_offsets"] = {offset, offset + bytes};
    header[tensor->name] = std::move(entry);
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return fail(fmt::format("a tensor name or metadata entry is not valid UTF-8 ({})", e.what()));
  }
  // Padding to 8 bytes keeps every tensor 8-byte aligned in a mapped file.
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxHeaderBytes) {
    return fail(fmt::format("the header would be {} bytes, above the limit of {}", text.size(),
                            kMaxHeaderBytes));
  }
  // Streamed: the header, then each tensor straight from its buffer (or a
  // piece at a time from its source), so an export holds no copy of the
  // weights.
  const uint64_t header_bytes = text.size();
  std::string head(sizeof(header_bytes), '\0');
  std::memcpy(head.data(), &header_bytes, sizeof(header_bytes));
  head += text;
  bool streamed = false;
  const bool written = core::write_file_atomically(
      path,
      [&](core::WritableFile& file, std::string& source_error) {
        streamed = true;
        return stream_tensors(
            order, head, [&file](std::string_view bytes) { return file.write_all(bytes); },
            source_error);
      },
      error);
  // No temporary file: nothing was streamed, but the sources are read.
  if (!streamed) read_safetensors_sources(tensors);
  return written;
}

}  // namespace dslaunch::core
