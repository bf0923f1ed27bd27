// The CPU backend's memory, copies, streams and events, and the reductions
// that leave their result in the backend's memory.
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "kernels/make_backend.h"

namespace dslaunch::kernels {
namespace {

TEST_CASE("memory is aligned, copies round-trip, memset and fill write what they say") {
  auto backend = make_cpu_backend(2);
  for (const int64_t count : {1, 7, 1000, 100'003}) {
    DeviceBuffer<float> buffer(*backend, count);
    REQUIRE(buffer.size() == count);
    CHECK(reinterpret_cast<uintptr_t>(buffer.data()) % 64 == 0);
    std::vector<float> host(count);
    std::iota(host.begin(), host.end(), 0.5f);
    backend->copy_host_to_device(buffer.data(), host.data(), buffer.bytes());
    DeviceBuffer<float> other(*backend, count);
    backend->copy_device_to_device(other.data(), buffer.data(), buffer.bytes());
    std::vector<float> back(count, -1.0f);
    backend->copy_device_to_host(back.data(), other.data(), other.bytes());
    CHECK(back == host);

    backend->fill(other.data(), count, 2.5f);
    backend->memset_zero(other.data(), (count / 2) * static_cast<int64_t>(sizeof(float)));
    backend->copy_device_to_host(back.data(), other.data(), other.bytes());
    for (int64_t i = 0; i < count; ++i) {
      INFO("element " << i << " of " << count);
      CHECK(back[i] == (i < count / 2 ? 0.0f : 2.5f));
    }
  }
}

TEST_CASE("mean sums in double in index order and leaves the result in backend memory") {
  auto backend = make_cpu_backend(2);
  // Values whose float sum would lose the small ones.
  std::vector<float> host = {1e8f, 1.0f, -1e8f, 3.0f, 0.25f};
  DeviceBuffer<float> x(*backend, static_cast<int64_t>(host.size()));
  DeviceBuffer<float> result(*backend, 1);
  backend->copy_host_to_device(x.data(), host.data(), x.bytes());
  backend->mean(result.data(), x.data(), x.size());
  float mean = 0;
  backend->copy_device_to_host(&mean, result.data(), sizeof(float));
  double sum = 0;
  for (const float v : host) sum += v;
  CHECK(mean == static_cast<float>(sum / 5.0));
  CHECK(mean == Approx(4.25 / 5));
}

TEST_CASE("streams and events order work as CUDA's do; on the CPU all work is done at once") {
  auto backend = make_cpu_backend(1);
  auto side = backend->create_stream();
  auto done = backend->create_event();
  DeviceBuffer<float> x(*backend, 16);
  backend->set_stream(side.get());
  backend->fill(x.data(), 16, 1.0f);
  backend->record(*done);
  backend->set_stream(nullptr);
  backend->wait(*done);  // the default stream's next work sees the fill
  backend->synchronize(*done);
  backend->synchronize();
  std::vector<float> back(16);
  backend->copy_device_to_host(back.data(), x.data(), x.bytes());
  CHECK(back == std::vector<float>(16, 1.0f));
}

TEST_CASE("a device buffer frees its memory once, and moves") {
  auto backend = make_cpu_backend(1);
  DeviceBuffer<int32_t> a(*backend, 10);
  int32_t* data = a.data();
  DeviceBuffer<int32_t> b = std::move(a);
  CHECK(b.data() == data);
  CHECK(a.data() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  CHECK(a.size() == 0);
  DeviceBuffer<int32_t> empty(*backend, 0);
  CHECK(empty.data() == nullptr);
}

TEST_CASE("the backend comes from the job's device") {
  auto cpu = make_backend(DeviceKind::kCpu, 1);
  REQUIRE(cpu.ok());
  CHECK((*cpu)->name() == "cpu");
  auto cuda = make_backend(DeviceKind::kCuda, 1);
  REQUIRE_FALSE(cuda.ok());
  CHECK(cuda.status().code() == core::StatusCode::kUnavailable);
  CHECK_THAT(cuda.status().message(), Catch::Contains("--config=cuda"));
}

}  // namespace
}  // namespace dslaunch::kernels
