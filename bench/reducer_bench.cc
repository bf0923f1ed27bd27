// The gradient reducer's bus bandwidth beside raw MPI_Allreduce of the same
// floats, measured in the same run, and a training step's time with the
// reduction overlapped with the backward pass and without.
//
// The reducer runs on the communicator layer (worker/comm: its progress
// thread makes every MPI call, as nonblocking collectives, and sleeps
// between tests) and averages by reduce-scatter + all-gather; the
// reference is one blocking MPI_Allreduce from the calling thread; between
// them, the reducer's own reduce-scatter + all-gather called directly. Bus
// bandwidth is nccl-tests' for an all-reduce: 2(N-1)/N x bytes / time.
//
//   bazel build -c opt //bench:reducer_bench
//   tools/mpirun_local.sh 2 bazel-bin/bench/reducer_bench
#include <cblas.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/median_time.h"
#include "kernels/cpu/blas_info.h"
#include "kernels/cpu/blas_setup.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/parallel/gradient_reducer.h"

namespace {

using namespace dslaunch;

constexpr int kRuns = 9;

double bus_gbs(int64_t floats, int ranks, double ms) {
  const double bytes = static_cast<double>(floats) * sizeof(float);
  return 2.0 * (ranks - 1) / ranks * bytes / (ms * 1e-3) / 1e9;
}

std::string cpu_model() {
  FILE* info = std::fopen("/proc/cpuinfo", "r");
  if (info == nullptr) return "unknown CPU";
  char line[512];
  std::string model = "unknown CPU";
  while (std::fgets(line, sizeof line, info) != nullptr) {
    std::string text(line);
    if (text.rfind("model name", 0) == 0) {
      model = text.substr(text.find(':') + 2);
      model.erase(model.find_last_not_of("\n ") + 1);
      break;
    }
  }
  std::fclose(info);
  return model;
}

// One backward pass's worth of matrix products per bucket, on one thread.
void compute(std::vector<float>& a, std::vector<float>& c, int dim, int repeats) {
  for (int i = 0; i < repeats; ++i) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, dim, dim, dim, 1.0f, a.data(), dim,
                a.data(), dim, 0.0f, c.data(), dim);
  }
}

void barrier() { MPI_Barrier(MPI_COMM_WORLD); }

}  // namespace

int main(int argc, char** argv) {
  kernels::ensure_fast_blas(argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  kernels::set_compute_threads(1);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int exit_code = 0;
  {
    auto created = worker::comm::create_mpi_process_groups({1, ranks, 1}, {});
    if (!created.ok()) {
      std::cerr << created.status().message() << "\n";
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    worker::comm::Communicator& data = created.value()->data();
    if (rank == 0) {
      std::cout << fmt::format(
          "{} ranks on {}; OpenBLAS {} kernels, 1 thread per rank; median of {} runs\n\n", ranks,
          cpu_model(), kernels::query_blas_info().core_name, kRuns);
      std::cout << fmt::format("{:>10} {:>14} {:>9} {:>14} {:>9} {:>14} {:>9} {:>14} {:>9} {:>8}\n",
                               "floats", "MPI_Allreduce", "bus GB/s", "comm.all_reduce",
                               "bus GB/s", "MPI RS+AG", "bus GB/s", "reducer", "bus GB/s",
                               "ratio");
    }
    for (const int64_t n : {int64_t{1} << 18, int64_t{1} << 20, int64_t{1} << 22,
                            int64_t{1} << 24}) {
      std::vector<float> grads(n, 1.0f);
      const double raw_ms = bench::median_ms(kRuns, [&] {
        barrier();
        MPI_Allreduce(MPI_IN_PLACE, grads.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      });
      // The reducer's own two collectives, called directly: what its
      // algorithm costs, apart from the layer around it.
      std::vector<int> counts(ranks, static_cast<int>(n / ranks));
      counts.back() += static_cast<int>(n % ranks);
      std::vector<int> displacements(ranks, 0);
      for (int r = 1; r < ranks; ++r) displacements[r] = displacements[r - 1] + counts[r - 1];
      std::vector<float> share(counts.back());
      const double pair_ms = bench::median_ms(kRuns, [&] {
        barrier();
        MPI_Reduce_scatter(grads.data(), share.data(), counts.data(), MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD);
        MPI_Allgatherv(share.data(), counts[rank], MPI_FLOAT, grads.data(), counts.data(),
                       displacements.data(), MPI_FLOAT, MPI_COMM_WORLD);
      });
      // The same MPI_Allreduce through the communicator: what its stream costs.
      bool failed = false;
      const double comm_ms = bench::median_ms(kRuns, [&] {
        barrier();
        failed |= !data.all_reduce(worker::comm::buffer_of(grads.data(), n),
                                   worker::comm::ReduceOp::kSum)
                       ->wait()
                       .ok();
      });
      worker::GradientReducer reducer(data, grads.data(), n, n);
      const double reducer_ms = bench::median_ms(kRuns, [&] {
        barrier();
        reducer.ready(0, n);
        failed |= !reducer.finish().ok();
      });
      if (failed) exit_code = 1;
      if (rank == 0) {
        const double raw_bw = bus_gbs(n, ranks, raw_ms);
        const double reducer_bw = bus_gbs(n, ranks, reducer_ms);
        std::cout << fmt::format(
            "{:>10} {:>11.2f} ms {:>9.2f} {:>11.2f} ms {:>9.2f} {:>11.2f} ms {:>9.2f} {:>11.2f} ms "
            "{:>9.2f} {:>7.2f}x\n",
            n, raw_ms, raw_bw, comm_ms, bus_gbs(n, ranks, comm_ms), pair_ms,
            bus_gbs(n, ranks, pair_ms), reducer_ms, reducer_bw, reducer_bw / raw_bw);
      }
    }

    // A step: 8 buckets of 1M floats (the demo's bucket size), each
    // completed by a slice of backward compute; reduced as each completes
    // (overlap) or all after the backward pass (none).
    constexpr int kBuckets = 8;
    constexpr int64_t kBucket = 1 << 20;
    constexpr int kDim = 384;
    std::vector<float> grads(kBuckets * kBucket, 1.0f);
    std::vector<float> a(kDim * kDim, 0.5f);
    std::vector<float> c(kDim * kDim);
    worker::GradientReducer reducer(data, grads.data(), kBuckets * kBucket, kBucket);
    const auto step = [&](bool overlap) {
      return bench::median_ms(kRuns, [&] {
        barrier();
        for (int b = 0; b < kBuckets; ++b) {
          compute(a, c, kDim, 4);
          const int64_t end = (kBuckets - b) * kBucket;  // backward runs from the end
          if (overlap) reducer.ready(end - kBucket, end);
        }
        if (!overlap) reducer.ready(0, kBuckets * kBucket);
        if (!reducer.finish().ok()) exit_code = 1;
      });
    };
    const double compute_ms = bench::median_ms(kRuns, [&] {
      for (int b = 0; b < kBuckets; ++b) compute(a, c, kDim, 4);
    });
    const double overlapped_ms = step(true);
    const double serial_ms = step(false);
    if (rank == 0) {
      std::cout << fmt::format(
          "\nstep of {} buckets x {} floats: backward compute alone {:.1f} ms; with the "
          "reduction overlapped {:.1f} ms, after the backward pass {:.1f} ms ({:.2f}x)\n",
          kBuckets, kBucket, compute_ms, overlapped_ms, serial_ms, serial_ms / overlapped_ms);
      std::cout << "Target: the reducer's bus bandwidth at least 0.90x MPI_Allreduce's.\n";
    }
  }
  MPI_Finalize();
  return exit_code;
}
