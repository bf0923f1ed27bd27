#include "core/weights/safetensors.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace fs = std::filesystem;
namespace core = dslaunch::core;
using core::SafetensorsDtype;
using core::SafetensorsFile;
using core::SafetensorsTensor;
using core::SafetensorsTensorData;
using core::write_safetensors;

namespace {

// A fresh path under $TEST_TMPDIR for each call.
std::string temp_path(const std::string& name) {
  static std::atomic<int> counter{0};
  const char* tmp = std::getenv("TEST_TMPDIR");
  const fs::path dir =
      fs::path(tmp != nullptr ? tmp : fs::temp_directory_path().string()) /
      ("safetensors_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(dir);
  return (dir / name).string();
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string little_endian_u64(uint64_t value) {
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &value, 8);
  return bytes;
}

template <typename T>
std::string bytes_of(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// A file of an 8-byte length, `header` and `data`, built by hand.
std::string write_raw(const std::string& header, const std::string& data) {
  const std::string path = temp_path("raw.safetensors");
  std::ofstream(path, std::ios::binary) << little_endian_u64(header.size()) << header << data;
  return path;
}

// The error opening `path` gives; "" if it opens.
std::string open_error(const std::string& path) {
  SafetensorsFile file;
  std::string error;
  return file.open(path, error) ? "" : error;
}

const std::string kSixFloats = bytes_of(std::vector<float>{0, 1, 2, 3, 4, 5});

}  // namespace

TEST_CASE("write_safetensors writes the bytes the reference implementation writes") {
  // The layout Hugging Face's safetensors crate produces for these inputs:
  // compact JSON, keys dtype/shape/data_offsets, padding spaces to 8 bytes.
  const std::vector<float> values = {0, 1, 2, 3, 4, 5};
  std::string error;

  const std::string one = temp_path("one.safetensors");
  REQUIRE(write_safetensors(one, {{"attn.0", SafetensorsDtype::kF32, {1, 2, 3}, values.data()}}, {},
                            error));
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  REQUIRE(header.size() == 64);
  CHECK(read_all(one) == little_endian_u64(64) + header + kSixFloats);

  const std::string padded = temp_path("padded.safetensors");
  REQUIRE(write_safetensors(
      padded, {{"attn0", SafetensorsDtype::kF32, {1, 1, 2, 3}, values.data()}}, {}, error));
  CHECK(read_all(padded) ==
        little_endian_u64(72) +
            R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
            std::string(7, ' ') + kSixFloats);

  const std::string empty = temp_path("empty.safetensors");
  REQUIRE(write_safetensors(empty, {}, {}, error));
  CHECK(read_all(empty) == little_endian_u64(8) + "{}" + std::string(6, ' '));

  const std::string metadata = temp_path("metadata.safetensors");
  REQUIRE(write_safetensors(metadata, {}, {{"framework", "pt"}}, error));
  CHECK(read_all(metadata) ==
        little_endian_u64(40) + R"({"__metadata__":{"framework":"pt"}})" + std::string(5, ' '));
}

TEST_CASE("tensors of every float dtype round-trip, in the reference's order") {
  const std::vector<double> f64 = {0.5, -1.25, 1e-3};
  const std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f};
  // 1.0, -2.0, 65504 (the largest half), 2^-24 (the smallest subnormal),
  // -0, +inf.
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000, 0x7c00};
  // 1.0, -0.5, 3.0
  const std::vector<uint16_t> bf16 = {0x3f80, 0xbf00, 0x4040};
  const std::vector<int32_t> i32 = {7, -7};
  const std::string path = temp_path("all.safetensors");
  std::string error;
  REQUIRE(write_safetensors(path,
                            {
                                {"b_f32", SafetensorsDtype::kF32, {2, 2}, f32.data()},
                                {"a_f32", SafetensorsDtype::kF32, {}, f32.data()},
                                {"half", SafetensorsDtype::kF16, {6}, f16.data()},
                                {"brain", SafetensorsDtype::kBF16, {3, 1}, bf16.data()},
                                {"double", SafetensorsDtype::kF64, {3}, f64.data()},
                                {"ints", SafetensorsDtype::kI32, {2}, i32.data()},
                            },
                            {{"format", "pt"}, {"note", "ünïcode"}}, error));
  INFO(error);

  SafetensorsFile file;
  REQUIRE(file.open(path, error));
  CHECK(file.metadata() ==
        std::map<std::string, std::string>{{"format", "pt"}, {"note", "ünïcode"}});
  // Descending alignment (F64, F32, I32, BF16, F16), then by name.
  std::vector<std::string> names;
  std::vector<int64_t> begins;
  for (const SafetensorsTensor& tensor : file.tensors()) {
    names.push_back(tensor.name);
    begins.push_back(tensor.begin);
  }
  CHECK(names == std::vector<std::string>{"double", "a_f32", "b_f32", "ints", "brain", "half"});
  CHECK(begins == std::vector<int64_t>{0, 24, 28, 44, 52, 58});

  auto floats = [&](const std::string& name) {
    const SafetensorsTensor* tensor = file.find(name);
    REQUIRE(tensor != nullptr);
    std::vector<float> out(static_cast<size_t>(tensor->numel));
    std::string read_error;
    REQUIRE(file.read_floats(*tensor, out.data(), read_error));
    return out;
  };
  CHECK(floats("a_f32") == std::vector<float>{1.5f});
  CHECK(file.find("a_f32")->shape.empty());
  CHECK(floats("b_f32") == f32);
  CHECK(file.find("b_f32")->shape == std::vector<int64_t>{2, 2});
  CHECK(floats("double") == std::vector<float>{0.5f, -1.25f, static_cast<float>(1e-3)});
  CHECK(floats("brain") == std::vector<float>{1.0f, -0.5f, 3.0f});
  const std::vector<float> half = floats("half");
  CHECK(half[0] == 1.0f);
  CHECK(half[1] == -2.0f);
  CHECK(half[2] == 65504.0f);
  CHECK(half[3] == std::ldexp(1.0f, -24));
  CHECK(half[4] == 0.0f);
  CHECK(std::signbit(half[4]));
  CHECK(half[5] == std::numeric_limits<float>::infinity());

  std::vector<float> out(2);
  CHECK_FALSE(file.read_floats(*file.find("ints"), out.data(), error));
  CHECK_THAT(error, Catch::Contains("tensor 'ints' has dtype I32") && Catch::Contains(path));
}

TEST_CASE("a tensor from a source is read in pieces and written as from memory") {
  // Three floats past one piece: two reads, in order.
  const int64_t n = dslaunch::core::kSafetensorsSourcePiece / 4 + 3;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000) * 0.5f;
  std::vector<std::pair<int64_t, int64_t>> reads;
  SafetensorsTensorData sourced{"big", SafetensorsDtype::kF32, {n}};
  sourced.source = [&](int64_t offset, int64_t bytes, void* out) {
    reads.emplace_back(offset, bytes);
    std::memcpy(out, reinterpret_cast<const char*>(values.data()) + offset, bytes);
    return std::string();
  };
  const float small[2] = {1.0f, 2.0f};
  const std::string from_source = temp_path("source.safetensors");
  const std::string from_memory = temp_path("memory.safetensors");
  std::string error;
  REQUIRE(write_safetensors(
      from_source, {sourced, {"small", SafetensorsDtype::kF32, {2}, small}}, {}, error));
  REQUIRE(write_safetensors(from_memory,
                            {{"big", SafetensorsDtype::kF32, {n}, values.data()},
                             {"small", SafetensorsDtype::kF32, {2}, small}},
                            {}, error));
  CHECK(read_all(from_source) == read_all(from_memory));
  CHECK(reads == std::vector<std::pair<int64_t, int64_t>>{
                     {0, dslaunch::core::kSafetensorsSourcePiece},
                     {dslaunch::core::kSafetensorsSourcePiece, 12}});
  // A source that fails: the file stays as it was, and the error names the
  // tensor and what failed.
  sourced.source = [](int64_t, int64_t, void*) { return std::string("the swap file is gone"); };
  CHECK_FALSE(write_safetensors(from_memory, {sourced}, {}, error));
  CHECK_THAT(error, Catch::Contains("tensor 'big': the swap file is gone"));
  CHECK(read_all(from_memory) == read_all(from_source));
}

TEST_CASE("every source is read once, in order, whatever fails, as read_safetensors_sources reads") {
  // Collective sources need every rank to make the same reads: the writer
  // whatever happens to its file, the others through read_safetensors_sources.
  std::vector<std::string> reads;
  const auto counted = [&reads](const std::string& name, bool fails) {
    SafetensorsTensorData tensor{name, SafetensorsDtype::kF32, {3}};
    tensor.source = [&reads, name, fails](int64_t, int64_t bytes, void* out) {
      reads.push_back(name);
      std::memset(out, 0, bytes);
      return fails ? std::string("unreadable") : std::string();
    };
    return tensor;
  };
  const std::vector<std::string> order{"a", "b", "c"};
  std::string error;
  SECTION("the file cannot be created") {
    CHECK_FALSE(write_safetensors("/nonexistent-folder/x.safetensors",
                                  {counted("c", false), counted("a", false), counted("b", false)},
                                  {}, error));
  }
  SECTION("a source fails before the others") {
    CHECK_FALSE(write_safetensors(temp_path("x.safetensors"),
                                  {counted("c", false), counted("a", true), counted("b", false)},
                                  {}, error));
    CHECK_THAT(error, Catch::Contains("tensor 'a': unreadable"));
  }
  SECTION("a tensor is refused") {
    CHECK_FALSE(write_safetensors(temp_path("x.safetensors"),
                                  {counted("c", false), counted("a", false), counted("b", false),
                                   {"", SafetensorsDtype::kF32, {1}, &error}},
                                  {}, error));
  }
  SECTION("read without a file") {
    CHECK(dslaunch::core::read_safetensors_sources(
              {counted("c", false), counted("a", false), counted("b", false)}) == "");
  }
  CHECK(reads == order);
}

TEST_CASE("write_safetensors refuses names it cannot store") {
  const float value = 1;
  const std::string path = temp_path("bad.safetensors");
  std::string error;
  CHECK_FALSE(write_safetensors(
      path,
      {{"x", SafetensorsDtype::kF32, {1}, &value}, {"x", SafetensorsDtype::kF32, {1}, &value}}, {},
      error));
  CHECK_THAT(error, Catch::Contains("two tensors are named 'x'") && Catch::Contains(path));
  CHECK_FALSE(
      write_safetensors(path, {{"__metadata__", SafetensorsDtype::kF32, {1}, &value}}, {}, error));
  CHECK_THAT(error, Catch::Contains("'__metadata__' cannot name a tensor"));
  CHECK_FALSE(
      write_safetensors(path, {{"\xff\xfe", SafetensorsDtype::kF32, {1}, &value}}, {}, error));
  CHECK_THAT(error, Catch::Contains("not valid UTF-8"));
  CHECK_FALSE(fs::exists(path));
}

TEST_CASE("a well-formed file written by hand opens") {
  const std::string path = write_raw(
      R"({"__metadata__":{"a":"b"},"w":{"dtype":"F32","shape":[6],"data_offsets":[0,24]}}  )",
      kSixFloats);
  CHECK(open_error(path).empty());
}

TEST_CASE("malformed files give errors naming the file and the problem") {
  const std::string one_tensor = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";
  struct Case {
    std::string what;
    std::string path;
    std::string expected;
  };
  auto truncated = [&](size_t size) {
    const std::string path = write_raw(one_tensor, kSixFloats);
    fs::resize_file(path, size);
    return path;
  };
  std::string huge_length_path = temp_path("huge.safetensors");
  std::ofstream(huge_length_path, std::ios::binary) << little_endian_u64(uint64_t{1} << 40) << "{}";
  std::string past_end_path = temp_path("past_end.safetensors");
  std::ofstream(past_end_path, std::ios::binary) << little_endian_u64(100) << one_tensor;

  const std::vector<Case> cases = {
      {"shorter than the length", truncated(5), "it has 5 bytes, fewer than the 8"},
      {"truncated data", truncated(8 + one_tensor.size() + 20),
       "tensor 'w' has data_offsets [0, 24], past the end of the data (20 bytes"},
      {"header length above the limit", huge_length_path, "above the limit of 100000000"},
      {"header length past the end", past_end_path, "the header length (100 bytes) runs past"},
      {"not JSON", write_raw("{nope", ""), "the header is not valid UTF-8 JSON"},
      {"not an object", write_raw("[1]", ""), "does not start with '{'"},
      {"bad UTF-8", write_raw("{\"\xff\":{}}", ""), "the header is not valid UTF-8 JSON"},
      {"unknown dtype",
       write_raw(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x')),
       "tensor 'w' has dtype 'Q7', which is not a safetensors dtype"},
      {"no dtype", write_raw(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", std::string(8, 'x')),
       "tensor 'w' has no \"dtype\""},
      {"negative dimension",
       write_raw(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", ""),
       "tensor 'w' has shape [-2]; dimensions must be non-negative"},
      {"offsets disagree with the shape",
       write_raw(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})",
                 std::string(20, 'x')),
       "tensor 'w' has data_offsets [0, 20] (20 bytes), but dtype F32 and shape [2, 3] need 24"},
      {"offsets backwards",
       write_raw(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", ""),
       "tensor 'w' has data_offsets [8,0]; they must be"},
      {"offsets outside the file",
       write_raw(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[100,108]}})",
                 std::string(8, 'x')),
       "tensor 'w' has data_offsets [100, 108], past the end of the data (8 bytes"},
      {"overlap",
       write_raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                 std::string(12, 'x')),
       "tensor 'b' (bytes [4, 12)) overlaps tensor 'a' (bytes [0, 8))"},
      {"gap",
       write_raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, 'x')),
       "bytes [0, 4) of the data, before tensor 'a', belong to no tensor"},
      {"trailing bytes", write_raw(one_tensor, kSixFloats + "junk"),
       "the last 4 bytes of the file belong to no tensor"},
      {"metadata not strings", write_raw(R"({"__metadata__":{"step":3}})", ""),
       "\"__metadata__\" entry 'step' is 3, not a string"},
      // Deep nesting overflowed the stack when the error message dumped it.
      {"deep metadata",
       write_raw("{\"__metadata__\":" + std::string(100000, '[') + std::string(100000, ']') + "}",
                 ""),
       "nest deeper than 64 levels"},
      {"deep shape",
       write_raw(R"({"w":{"dtype":"F32","shape":)" + std::string(100000, '[') +
                     std::string(100000, ']') + R"(,"data_offsets":[0,8]}})",
                 std::string(8, 'x')),
       "nest deeper than 64 levels"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const std::string error = open_error(c.path);
    CHECK_THAT(error, Catch::Contains(c.expected) && Catch::Contains("'" + c.path + "'"));
  }
  CHECK_THAT(open_error(temp_path("absent.safetensors")), Catch::Contains("cannot open"));
}
