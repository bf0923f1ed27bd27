#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/checkpoint/shard_file.h"

namespace dslaunch::core::testing {

// A fresh folder under $TEST_TMPDIR (or /tmp), removed with its contents
// when the object goes.
class TempDir {
 public:
  TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();

  const std::string& path() const { return path_; }
  std::string file(std::string_view name) const { return path_ + "/" + std::string(name); }
  // The names of the files in the folder, sorted.
  std::vector<std::string> names() const;

 private:
  std::string path_;
};

// The whole file / replace the whole file; fail the test on error.
std::string read_bytes(const std::string& path);
void write_bytes(const std::string& path, std::string_view bytes);

// A value that says which state and which absolute index it is at, so a
// misplaced read shows.
float value_at(StateKind kind, int64_t index);

// value_at(kind, i) for i in [from, to).
std::vector<float> expected_values(StateKind kind, int64_t from, int64_t to);

// The three arrays a trainer saves (parameters and Adam's moments, fp32)
// over [begin, end), filled with value_at.
struct ShardData {
  std::vector<float> params;
  std::vector<float> adam_m;
  std::vector<float> adam_v;
  ShardData(int64_t begin, int64_t end);
  std::vector<ShardArrayData> arrays() const;
};

// A layout of one whole tensor of `total` elements: a flat buffer of that
// size, for tests that need no model.
std::vector<LayoutTensor> flat_layout(int64_t total);

}  // namespace dslaunch::core::testing
