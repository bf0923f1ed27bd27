#include "worker/commbench/commbench.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <span>

#include <fmt/format.h>

#include "worker/commbench/bandwidth.h"
#include "worker/commbench/check.h"
#include "worker/parallel/mpi_error.h"

namespace dslaunch::worker::commbench {
namespace {

// Outputs start as this, so a collective that writes nothing cannot pass on
// what an earlier one left.
constexpr float kUnwritten = -1.0f;

// One call of `collective` on the first elements of the buffers. Counts fit
// in int: message_for never exceeds max_bytes / 4, which check_options bounds.
int call_collective(Collective collective, const Message& m, const float* send, float* recv,
                    MPI_Comm comm) {
  const int chunk = static_cast<int>(m.chunk);
  switch (collective) {
    case Collective::all_reduce:
      return MPI_Allreduce(send, recv, chunk, MPI_FLOAT, MPI_SUM, comm);
    case Collective::all_gather:
      return MPI_Allgather(send, chunk, MPI_FLOAT, recv, chunk, MPI_FLOAT, comm);
    case Collective::reduce_scatter:
      return MPI_Reduce_scatter_block(send, recv, chunk, MPI_FLOAT, MPI_SUM, comm);
    case Collective::all_to_all:
      return MPI_Alltoall(send, chunk, MPI_FLOAT, recv, chunk, MPI_FLOAT, comm);
  }
  return MPI_ERR_OP;
}

const char* call_name(Collective collective) {
  switch (collective) {
    case Collective::all_reduce:
      return "MPI_Allreduce";
    case Collective::all_gather:
      return "MPI_Allgather";
    case Collective::reduce_scatter:
      return "MPI_Reduce_scatter_block";
    case Collective::all_to_all:
      return "MPI_Alltoall";
  }
  return "MPI collective";
}

struct Group {
  Axis axis;
  MPI_Comm comm;
  int rank;
  int ranks;
};

// One measurement of `collective` with `message` on `group`; the times and
// checks are agreed over `world`, which every group of the axis spans.
std::string measure(MPI_Comm world, const Group& group, Collective collective,
                    const Message& message, const CommbenchOptions& options, std::span<float> send,
                    std::span<float> recv, CommbenchResult& result) {
  const std::span<float> input = send.first(message.send_count);
  const std::span<float> output = recv.first(message.recv_count);
  fill_input(collective, group.rank, input);
  std::fill(output.begin(), output.end(), kUnwritten);

  for (int i = 0; i < options.warmup; ++i) {
    const int rc = call_collective(collective, message, input.data(), output.data(), group.comm);
    if (rc != MPI_SUCCESS) return mpi_error_message(call_name(collective), rc);
  }
  // All groups of the axis start together, as they would in training.
  int rc = MPI_Barrier(world);
  if (rc != MPI_SUCCESS) return mpi_error_message("MPI_Barrier", rc);
  const double start = MPI_Wtime();
  for (int i = 0; i < options.iterations; ++i) {
    rc = call_collective(collective, message, input.data(), output.data(), group.comm);
    if (rc != MPI_SUCCESS) return mpi_error_message(call_name(collective), rc);
  }
  const double local_seconds = (MPI_Wtime() - start) / options.iterations;

  double seconds = 0;
  rc = MPI_Allreduce(&local_seconds, &seconds, 1, MPI_DOUBLE, MPI_MAX, world);
  if (rc != MPI_SUCCESS) return mpi_error_message("MPI_Allreduce", rc);
  const int local_ok = count_wrong(collective, message, group.rank, group.ranks, output) == 0;
  int all_ok = 0;
  rc = MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_LAND, world);
  if (rc != MPI_SUCCESS) return mpi_error_message("MPI_Allreduce", rc);

  const Bandwidth bw = bandwidth(collective, message.bytes, group.ranks, seconds);
  result = CommbenchResult{std::string(axis_name(group.axis)),
                           std::string(collective_name(collective)),
                           message.bytes,
                           group.ranks,
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
    return fmt::format("commbench max_bytes ({}) exceeds what one MPI call can send ({} bytes)",
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
    const ProcessGroups& groups, const CommbenchOptions& options,
    const std::function<void(const CommbenchResult&)>& on_result, std::string& error) {
  std::vector<CommbenchResult> results;
  error = check_options(options);
  if (!error.empty()) return results;

  // Every message fits in max_bytes: allocate once, reuse for all of them.
  std::vector<float> send(options.max_bytes / 4);
  std::vector<float> recv(options.max_bytes / 4);
  for (Axis axis : options.groups) {
    Group group{axis, groups.communicator(axis), 0, groups.size(axis)};
    // Axis sizes are the same on every rank, so all ranks skip alike.
    if (group.ranks < 2) continue;
    const int rc = MPI_Comm_rank(group.comm, &group.rank);
    if (rc != MPI_SUCCESS) {
      error = mpi_error_message("MPI_Comm_rank", rc);
      return results;
    }
    for (Collective collective : options.collectives) {
      for (int64_t bytes = options.min_bytes; bytes <= options.max_bytes;) {
        if (const auto message = message_for(collective, bytes, group.ranks)) {
          CommbenchResult result;
          error = measure(groups.world(), group, collective, *message, options, send, recv, result);
          if (!error.empty()) return results;
          if (on_result) on_result(result);
          results.push_back(std::move(result));
          if (options.stop_requested) {
            const int local_stop = options.stop_requested() ? 1 : 0;
            int any_stop = 0;
            const int rc =
                MPI_Allreduce(&local_stop, &any_stop, 1, MPI_INT, MPI_LOR, groups.world());
            if (rc != MPI_SUCCESS) {
              error = mpi_error_message("MPI_Allreduce", rc);
              return results;
            }
            if (any_stop != 0) return results;
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
  return fmt::format("{:<6} {:<15} {:>6} {:>12} {:>12} {:>12} {:>12}  {}", "group", "collective",
                     "ranks", "size(B)", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check");
}

std::string format_result(const CommbenchResult& r) {
  return fmt::format("{:<6} {:<15} {:>6} {:>12} {:>12.2f} {:>12.3f} {:>12.3f}  {}", r.group,
                     r.collective, r.ranks, r.bytes, r.time_us, r.algbw_gbs, r.busbw_gbs,
                     r.correct ? "ok" : "WRONG");
}

}  // namespace dslaunch::worker::commbench
