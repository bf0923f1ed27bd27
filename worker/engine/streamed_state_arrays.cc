#include "worker/engine/streamed_state_arrays.h"

#include <string>
#include <utility>

namespace dslaunch::worker::engine {
namespace {

std::string text(const core::Status& status) {
  return status.ok() ? std::string() : status.message();
}

}  // namespace

std::vector<core::ShardArrayData> streamed_state_arrays(
    std::function<core::Status(int64_t from, int64_t count, float* out)> read_parameters,
    AdamW& optimizer, int64_t moment_first) {
  using core::ShardArrayData;
  const auto moment = [&optimizer, moment_first](bool second) {
    return [&optimizer, moment_first, second](int64_t from, int64_t count, void* out) {
      return text(
          optimizer.read_moment(second, moment_first + from, count, static_cast<float*>(out)));
    };
  };
  return {ShardArrayData::streamed(
              {core::StateKind::kParameter, core::DType::kF32},
              [read = std::move(read_parameters)](int64_t from, int64_t count, void* out) {
                return text(read(from, count, static_cast<float*>(out)));
              }),
          ShardArrayData::streamed({core::StateKind::kAdamM, core::DType::kF32}, moment(false)),
          ShardArrayData::streamed({core::StateKind::kAdamV, core::DType::kF32}, moment(true))};
}

}  // namespace dslaunch::worker::engine
