#include "worker/selftest/nccl_check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <utility>

#include "kernels/device_buffer.h"
#include "worker/comm/nccl_communicator.h"

namespace dslaunch::worker::selftest {
namespace {

constexpr int64_t kBlock = 4099;  // per rank; odd, so no kernel's vector width divides it

std::vector<float> random_values(int64_t n, uint32_t seed) {
  std::mt19937 engine(seed);
  std::normal_distribution<float> normal;
  std::vector<float> values(n);
  for (float& v : values) v = normal(engine);
  return values;
}

double largest_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  double largest = 0, difference = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    largest = std::max(largest, std::abs(double{expected[i]}));
    const double d = std::abs(double{actual[i]} - expected[i]);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    difference = std::max(difference, d);
  }
  return largest > 0 ? difference / largest : difference;
}

// One collective: `run` starts it on a communicator given its input and
// output buffers, on MPI with host vectors and on NCCL with device copies.
// output_count 0: in place, the result read from the input's first kBlock
// floats.
using Run = std::function<std::unique_ptr<comm::Work>(comm::Communicator&, float* in, float* out)>;

NcclCheck compare(const char* name, double tolerance, kernels::Backend& device,
                  comm::Communicator& host, comm::Communicator& nccl,
                  const std::vector<float>& input, int64_t output_count, const Run& run) {
  NcclCheck check;
  check.collective = name;
  check.tolerance = tolerance;
  const bool in_place = output_count == 0;
  const int64_t result_count = in_place ? kBlock : output_count;
  std::vector<float> in = input;
  std::vector<float> out(std::max<int64_t>(output_count, 1), 0.0f);
  if (core::Status status = run(host, in.data(), out.data())->wait(); !status.ok()) {
    check.failure = "MPI: " + status.message();
    return check;
  }
  const std::vector<float> expected(in_place ? in.begin() : out.begin(),
                                    (in_place ? in.begin() : out.begin()) + result_count);
  const int64_t in_bytes = static_cast<int64_t>(input.size() * sizeof(float));
  kernels::DeviceBuffer<float> device_in(device, static_cast<int64_t>(input.size()));
  kernels::DeviceBuffer<float> device_out(device, std::max<int64_t>(output_count, 1));
  device.copy_host_to_device(device_in.data(), input.data(), in_bytes);
  device.memset_zero(device_out.data(), device_out.bytes());
  device.synchronize();
  if (core::Status status = run(nccl, device_in.data(), device_out.data())->wait(); !status.ok()) {
    check.failure = "NCCL: " + status.message();
    return check;
  }
  std::vector<float> actual(result_count);
  device.copy_device_to_host(actual.data(), in_place ? device_in.data() : device_out.data(),
                             result_count * static_cast<int64_t>(sizeof(float)));
  check.error = largest_error(actual, expected);
  return check;
}

}  // namespace

std::vector<NcclCheck> check_nccl(kernels::Backend& device, comm::Communicator& host,
                                  uint32_t seed) {
  core::StatusOr<std::unique_ptr<comm::Communicator>> made = comm::make_nccl_communicator(host);
  if (!made.ok()) {
    NcclCheck check;
    check.collective = "communicator";
    check.failure = made.status().message();
    return {check};
  }
  comm::Communicator& nccl = **made;
  const int ranks = host.size();
  const int me = host.rank();
  const std::vector<float> mine = random_values(ranks * kBlock, seed + static_cast<uint32_t>(me));
  // Uneven blocks: rank r's is kBlock - r floats.
  std::vector<int64_t> uneven(ranks);
  for (int r = 0; r < ranks; ++r) uneven[r] = kBlock - r;
  const comm::Blocks uneven_blocks = comm::Blocks::consecutive(uneven);
  const int64_t uneven_total = uneven_blocks.displacements.back() + uneven.back();
  const std::vector<int64_t> even(ranks, kBlock);
  // Sums in another order than MPI's differ by a few roundings.
  const double sum_tolerance = 1e-6 * ranks;

  std::vector<NcclCheck> checks;
  checks.push_back(compare("all_reduce", sum_tolerance, device, host, nccl, mine, ranks * kBlock,
                           [&](comm::Communicator& c, float* in, float* out) {
                             return c.all_reduce(comm::buffer_of(in, ranks * kBlock),
                                                 comm::buffer_of(out, ranks * kBlock),
                                                 comm::ReduceOp::kSum);
                           }));
  checks.push_back(compare("all_reduce max", 0, device, host, nccl, mine, ranks * kBlock,
                           [&](comm::Communicator& c, float* in, float* out) {
                             return c.all_reduce(comm::buffer_of(in, ranks * kBlock),
                                                 comm::buffer_of(out, ranks * kBlock),
                                                 comm::ReduceOp::kMax);
                           }));
  checks.push_back(compare("reduce_scatter", sum_tolerance, device, host, nccl, mine, kBlock,
                           [&](comm::Communicator& c, float* in, float* out) {
                             return c.reduce_scatter(comm::buffer_of(in, ranks * kBlock),
                                                     comm::buffer_of(out, kBlock), even,
                                                     comm::ReduceOp::kSum);
                           }));
  checks.push_back(compare("reduce_scatter (uneven)", sum_tolerance, device, host, nccl, mine,
                           uneven[me], [&](comm::Communicator& c, float* in, float* out) {
                             return c.reduce_scatter(comm::buffer_of(in, uneven_total),
                                                     comm::buffer_of(out, uneven[me]), uneven,
                                                     comm::ReduceOp::kSum);
                           }));
  checks.push_back(compare("all_gather", 0, device, host, nccl, mine, ranks * kBlock,
                           [&](comm::Communicator& c, float* in, float* out) {
                             return c.all_gather(comm::buffer_of(in, kBlock),
                                                 comm::buffer_of(out, ranks * kBlock),
                                                 comm::Blocks::consecutive(even));
                           }));
  checks.push_back(compare("all_gather (uneven)", 0, device, host, nccl, mine, uneven_total,
                           [&](comm::Communicator& c, float* in, float* out) {
                             return c.all_gather(comm::buffer_of(in, uneven[me]),
                                                 comm::buffer_of(out, uneven_total), uneven_blocks);
                           }));
  // In place: the result is read from the input's buffer.
  checks.push_back(compare("broadcast", 0, device, host, nccl, mine, 0,
                           [&](comm::Communicator& c, float* in, float*) {
                             return c.broadcast(comm::buffer_of(in, kBlock), 0);
                           }));
  return checks;
}

}  // namespace dslaunch::worker::selftest
