#include "worker/commbench/commbench.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <span>

#include <fmt/format.h>

#include "worker/commbench/bandwidth.h"
#include "worker/commbench/check.h"

namespace dslaunch::worker::commbench {
namespace {

// Outputs start as this, so a collective that writes nothing cannot pass on
// what an earlier one left.
constexpr float kUnwritten = -1.0f;

// One call of `collective` on the first elements of the buffers, waited for.
// Counts fit in int: message_for never exceeds max_bytes / 4, which
// check_options bounds.
core::Status call_collective(Collective collective, const Message& m, float* send, float* recv,
                             comm::Communicator& group) {
  const int ranks = group.size();
  std::unique_ptr<comm::Work> work;
  switch (collective) {
    case Collective::all_reduce:
      work = group.all_reduce(comm::buffer_of(send, m.chunk), comm::buffer_of(recv, m.chunk),
                              comm::ReduceOp::kSum);
      break;
    case Collective::all_gather:
      work = group.all_gather(comm::buffer_of(send, m.chunk), comm::buffer_of(recv, m.recv_count),
                              comm::Blocks::consecutive(std::vector<int64_t>(ranks, m.chunk)));
      break;
    case Collective::reduce_scatter:
      work = group.reduce_scatter(comm::buffer_of(send, m.send_count),
                                  comm::buffer_of(recv, m.chunk),
                                  std::vector<int64_t>(ranks, m.chunk), comm::ReduceOp::kSum);
      break;
    case Collective::all_to_all:
      work = group.all_to_all(comm::buffer_of(send, m.send_count),
                              comm::buffer_of(recv, m.recv_count));
      break;
  }
  return work->wait();
}

// One measurement of `collective` with `message` on `group`; the times and
// checks are agreed over `world`, which every group of the axis spans.
core::Status measure(comm::Communicator& world, comm::Axis axis, comm::Communicator& group,
                     Collective collective, const Message& message,
                     const CommbenchOptions& options, std::span<float> send,
                     std::span<float> recv, CommbenchResult& result) {
  const std::span<float> input = send.first(message.send_count);
  const std::span<float> output = recv.first(message.recv_count);
  fill_input(collective, group.rank(), input);
  std::fill(output.begin(), output.end(), kUnwritten);

  for (int i = 0; i < options.warmup; ++i) {
    if (core::Status status =
            call_collective(collective, message, input.data(), output.data(), group);
        !status.ok()) {
      return status;
    }
  }
  // All groups of the axis start together, as they would in training.
  if (core::Status status = world.barrier()->wait(); !status.ok()) return status;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.iterations; ++i) {
    if (core::Status status =
            call_collective(collective, message, input.data(), output.data(), group);
        !status.ok()) {
      return status;
    }
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
      options.iterations;
  if (core::Status status =
          world.all_reduce(comm::buffer_of(&seconds, 1), comm::ReduceOp::kMax)->wait();
      !status.ok()) {
    return status;
  }
  int32_t all_ok =
      count_wrong(collective, message, group.rank(), group.size(), output) == 0 ? 1 : 0;
  if (core::Status status =
          world.all_reduce(comm::buffer_of(&all_ok, 1), comm::ReduceOp::kMin)->wait();
      !status.ok()) {
    return status;
  }

  const Bandwidth bw = bandwidth(collective, message.bytes, group.size(), seconds);
  result = CommbenchResult{std::string(comm::axis_name(axis)),
                           std::string(collective_name(collective)),
                           message.bytes,
                           group.size(),
                           seconds * 1e6,
                           bw.algbw_gbs,
                           bw.busbw_gbs,
                           all_ok != 0};
  return {};
}

}  // namespace

std::string check_options(const CommbenchOptions& options) {
  if (options.collectives.empty()) return "commbench needs at least one collective";
  if (options.groups.empty()) return "commbench needs at least one group";
  if (options.min_bytes < 4) {
    return fmt::format("commbench min_bytes is {}; it must be at least 4 (one float32)",
                       options.min_bytes);
  }
  if (options.max_bytes < options.min_bytes) {
    return fmt::format("commbench max_bytes ({}) is below min_bytes ({})", options.max_bytes,
                       options.min_bytes);
  }
  if (options.max_bytes / 4 > INT_MAX) {
    return fmt::format("commbench max_bytes ({}) exceeds what one collective can send ({} bytes)",
                       options.max_bytes, int64_t{INT_MAX} * 4);
  }
  if (options.iterations < 1) {
    return fmt::format("commbench iterations is {}; it must be at least 1", options.iterations);
  }
  if (options.warmup < 0) {
    return fmt::format("commbench warmup is {}; it must be at least 0", options.warmup);
  }
  return {};
}

std::vector<CommbenchResult> run_commbench(
    const comm::ProcessGroups& groups, const CommbenchOptions& options,
    const std::function<void(const CommbenchResult&)>& on_result, std::string& error) {
  std::vector<CommbenchResult> results;
  error = check_options(options);
  if (!error.empty()) return results;

  // Every message fits in max_bytes: allocate once, reuse for all of them.
  std::vector<float> send(options.max_bytes / 4);
  std::vector<float> recv(options.max_bytes / 4);
  for (comm::Axis axis : options.groups) {
    comm::Communicator& group = groups.communicator(axis);
    // Axis sizes are the same on every rank, so all ranks skip alike.
    if (group.size() < 2) continue;
    for (Collective collective : options.collectives) {
      for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;) {
        if (const auto message = message_for(collective, bytes, group.size())) {
          CommbenchResult result;
          if (core::Status status = measure(groups.world(), axis, group, collective, *message,
                                            options, send, recv, result);
              !status.ok()) {
            error = status.message();
            return results;
          }
          if (on_result) on_result(result);
          results.push_back(std::move(result));
          if (options.stop_requested) {
            int32_t stop = options.stop_requested() ? 1 : 0;
            if (core::Status status =
                    groups.world().all_reduce(comm::buffer_of(&stop, 1), comm::ReduceOp::kMax)->wait();
                !status.ok()) {
              error = status.message();
              return results;
            }
            if (stop != 0) return results;
          }
        }
        if (bytes > options.max_bytes / 2) break;  // doubling would pass max_bytes (or overflow)
        bytes *= 2;
      }
    }
  }
  return results;
}

std::string format_header() {
  return fmt::format("{:<8} {:<15} {:>6} {:>12} {:>12} {:>12} {:>12}  {}", "group", "collective",
                     "ranks", "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check");
}

std::string format_result(const CommbenchResult& r) {
  return fmt::format("{:<8} {:<15} {:>6} {:>12} {:>12.2f} {:>12.3f} {:>12.3f}  {}", r.group,
                     r.collective, r.ranks, r.bytes, r.time_us, r.algbw_gbs, r.busbw_gbs,
                     r.correct ? "ok" : "WRONG");
}

}  // namespace dslaunch::worker::commbench
