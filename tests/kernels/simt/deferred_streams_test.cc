// The emulator's deferred streams (StreamOrder::kDeferred): each stream's
// work waits until the host or a waiting stream needs it, so that code
// which skips a wait() or a synchronize() reads what is not yet written.
#include <csignal>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

#include <catch2/catch.hpp>

#include "kernels/backend.h"
#include "kernels/device_buffer.h"
#include "kernels/simt/emulated_backend.h"
#include "kernels/sparse_memory.h"
#include "tests/support/signal_of.h"

namespace dslaunch::kernels::simt {
namespace {

using dslaunch::testing::signal_of;

std::unique_ptr<Backend> deferred() {
  return make_emulated_backend({}, DeviceMemory::kGuarded, StreamOrder::kDeferred);
}

std::vector<float> read(Backend& device, const DeviceBuffer<float>& buffer) {
  std::vector<float> host(buffer.size());
  device.copy_device_to_host(host.data(), buffer.data(), buffer.bytes());
  return host;
}

void write(Backend& device, DeviceBuffer<float>& buffer, const std::vector<float>& host) {
  device.copy_host_to_device(buffer.data(), host.data(), buffer.bytes());
}

TEST_CASE("a stream's work runs only when something waits for it") {
  const auto device = deferred();
  DeviceBuffer<float> x(*device, 4);
  write(*device, x, {1, 2, 3, 4});
  const auto side = device->create_stream();
  const auto written = device->create_event();
  device->set_stream(side.get());
  device->fill(x.data(), 4, 7.0f);
  device->record(*written);
  device->set_stream(nullptr);
  // The default stream did not wait: it reads the values before the fill.
  CHECK(read(*device, x) == std::vector<float>{1, 2, 3, 4});
  // After waiting for the event, the fill is there.
  device->wait(*written);
  CHECK(read(*device, x) == std::vector<float>{7, 7, 7, 7});
}

TEST_CASE("the host sees a stream's work after synchronizing with it") {
  const auto device = deferred();
  DeviceBuffer<float> x(*device, 3);
  const auto side = device->create_stream();
  device->set_stream(side.get());
  write(*device, x, {1, 2, 3});
  device->scale(x.data(), 3, 2.0f);
  const auto done = device->create_event();
  device->record(*done);
  device->set_stream(nullptr);
  const DeferredStreams* streams = deferred_streams(*device);
  REQUIRE(streams != nullptr);
  CHECK_FALSE(streams->done(*done));
  device->synchronize(*done);
  CHECK(streams->done(*done));
  CHECK(read(*device, x) == std::vector<float>{2, 4, 6});
}

TEST_CASE("copies read the host's bytes when called, and the default stream is deferred too") {
  const auto device = deferred();
  DeviceBuffer<float> x(*device, 2);
  std::vector<float> host{5, 6};
  write(*device, x, host);
  host = {0, 0};  // after the call: the copy already has the old bytes
  const auto side = device->create_stream();
  const auto before = device->create_event();
  device->record(*before);
  device->set_stream(side.get());
  // Without waiting for the default stream, the side stream reads x before
  // its copy lands (guarded memory starts zeroed).
  DeviceBuffer<float> y(*device, 2);
  device->copy_device_to_device(y.data(), x.data(), x.bytes());
  device->wait(*before);
  DeviceBuffer<float> z(*device, 2);
  device->copy_device_to_device(z.data(), x.data(), x.bytes());
  CHECK(read(*device, y) == std::vector<float>{0, 0});
  CHECK(read(*device, z) == std::vector<float>{5, 6});
}

TEST_CASE("host work queued after the default stream, on a borrowed stream") {
  const auto device = deferred();
  DeferredStreams* streams = deferred_streams(*device);
  REQUIRE(streams != nullptr);
  DeviceBuffer<float> x(*device, 1);
  write(*device, x, {3});
  const auto own = device->create_stream();
  const auto borrowed = device->borrow_stream(own.get());
  int runs = 0;
  const auto done = streams->enqueue_after_default(*own, [&] {
    ++runs;
    // The default stream's copy has landed (the device's memory is open here).
    CHECK(*x.data() == 3.0f);
  });
  CHECK(runs == 0);
  // Work on the borrowed handle runs after the host function, in its queue.
  device->set_stream(borrowed.get());
  device->scale(x.data(), 1, 10.0f);
  const auto scaled = device->create_event();
  device->record(*scaled);
  device->set_stream(nullptr);
  device->synchronize(*done);
  CHECK(runs == 1);
  CHECK_FALSE(streams->done(*scaled));
  device->synchronize();
  CHECK(streams->done(*scaled));
  CHECK(read(*device, x) == std::vector<float>{30});
}

TEST_CASE("freeing memory runs every stream's work first, as cudaFree does") {
  const auto device = deferred();
  const auto side = device->create_stream();
  DeviceBuffer<float> keep(*device, 1);
  {
    DeviceBuffer<float> scratch(*device, 1);
    device->set_stream(side.get());
    device->fill(scratch.data(), 1, 1.0f);
    device->copy_device_to_device(keep.data(), scratch.data(), sizeof(float));
    device->set_stream(nullptr);
  }
  CHECK(read(*device, keep) == std::vector<float>{1});
}

TEST_CASE("sparse memory's pages go back when the releasing stream gets there") {
  const auto device = deferred();
  const std::unique_ptr<SparseMemory> sparse = device->reserve_sparse(1 << 16);
  sparse->commit(0, 4096);
  auto* values = static_cast<float*>(sparse->data());
  DeviceBuffer<float> kept(*device, 2);
  device->fill(values, 2, 4.0f);
  device->copy_device_to_device(kept.data(), values, kept.bytes());
  const auto copied = device->create_event();
  device->record(*copied);
  // The work queued before the release still reads the page: it goes
  // after, and the host does not wait for it.
  sparse->release(0, 4096);
  CHECK(sparse->resident_bytes() == 0);
  CHECK_FALSE(deferred_streams(*device)->done(*copied));
  CHECK(read(*device, kept) == std::vector<float>{4, 4});
  CHECK(signal_of([&] {
          device->fill(values, 2, 1.0f);
          device->synchronize();
        }) == SIGSEGV);
}

TEST_CASE("a page committed again before its release has run keeps its memory") {
  const auto device = deferred();
  const std::unique_ptr<SparseMemory> sparse = device->reserve_sparse(1 << 16);
  auto* values = static_cast<float*>(sparse->data());
  DeviceBuffer<float> kept(*device, 2);
  sparse->commit(0, 8);
  device->fill(values, 2, 3.0f);
  sparse->release(0, 8);
  sparse->commit(0, 8);
  device->copy_device_to_device(kept.data(), values, kept.bytes());
  // Given back and mapped again, the page would read zeros (its memory went
  // back to the OS).
  CHECK(read(*device, kept) == std::vector<float>{3, 3});
  sparse->release(0, 8);
  device->synchronize();
  sparse->commit(0, 8);
  device->copy_device_to_device(kept.data(), values, kept.bytes());
  CHECK(read(*device, kept) == std::vector<float>{0, 0});
}

TEST_CASE("a stream that reads released pages unordered with the release faults") {
  const auto device = deferred();
  const auto side = device->create_stream();
  const std::unique_ptr<SparseMemory> sparse = device->reserve_sparse(1 << 16);
  sparse->commit(0, 4096);
  auto* values = static_cast<float*>(sparse->data());
  DeviceBuffer<float> kept(*device, 2);
  device->fill(values, 2, 4.0f);
  const auto filled = device->create_event();
  device->record(*filled);
  device->set_stream(side.get());
  device->wait(*filled);
  device->copy_device_to_device(kept.data(), values, kept.bytes());
  device->set_stream(nullptr);
  SECTION("the releasing stream waits for the reader: the pages go after it") {
    const auto read_done = device->create_event();
    device->set_stream(side.get());
    device->record(*read_done);
    device->set_stream(nullptr);
    device->wait(*read_done);
    sparse->release(0, 4096);
    CHECK(read(*device, kept) == std::vector<float>{4, 4});
  }
  SECTION("unordered, the side stream reads the pages after they are gone") {
    sparse->release(0, 4096);
    // synchronize() runs the default stream first, then the side stream.
    CHECK(signal_of([&] { device->synchronize(); }) == SIGSEGV);
    sparse->commit(0, 4096);  // here the page is kept, and the side stream reads it
    device->synchronize();
    CHECK(read(*device, kept) == std::vector<float>{4, 4});
  }
}

TEST_CASE("with an eager default stream, its reads of another stream's results wait or miss") {
  const auto device = make_emulated_backend({}, DeviceMemory::kGuarded, StreamOrder::kEagerDefault);
  DeviceBuffer<float> x(*device, 2);
  DeviceBuffer<float> y(*device, 2);
  write(*device, x, {1, 2});
  const auto side = device->create_stream();
  const auto filled = device->create_event();
  device->set_stream(side.get());
  device->fill(x.data(), 2, 7.0f);
  device->record(*filled);
  device->set_stream(nullptr);
  // The copy runs at once, before the side stream's fill.
  device->copy_device_to_device(y.data(), x.data(), y.bytes());
  const DeferredStreams* streams = deferred_streams(*device);
  REQUIRE(streams != nullptr);
  CHECK_FALSE(streams->done(*filled));
  // Waiting runs the side stream up to the event, then the copy.
  device->wait(*filled);
  CHECK(streams->done(*filled));
  CHECK(read(*device, y) == std::vector<float>{1, 2});
  device->copy_device_to_device(y.data(), x.data(), y.bytes());
  CHECK(read(*device, y) == std::vector<float>{7, 7});
}

TEST_CASE("deferring needs guarded memory; program order needs no DeferredStreams") {
  CHECK_THROWS_AS(make_emulated_backend({}, DeviceMemory::kHostAccessible, StreamOrder::kDeferred),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      make_emulated_backend({}, DeviceMemory::kHostAccessible, StreamOrder::kEagerDefault),
      std::invalid_argument);
  const auto program = make_emulated_backend({}, DeviceMemory::kGuarded);
  CHECK(deferred_streams(*program) == nullptr);
}

}  // namespace
}  // namespace dslaunch::kernels::simt
