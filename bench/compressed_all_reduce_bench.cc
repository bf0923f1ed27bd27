// The compressed all-reduce (1-bit, error-compensated) beside an fp32
// MPI_Allreduce of the same floats, measured in the same run on this
// machine's ranks (shared memory, where bytes are cheap: the figure says
// what the compression's arithmetic costs), in one segment and in 64.
//
//   bazel build //bench:compressed_all_reduce_bench
//   tools/mpirun_local.sh 2 bazel-bin/bench/compressed_all_reduce_bench
#include <mpi.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/median_time.h"
#include "bench/test_hosts.h"
#include "kernels/backend.h"
#include "worker/comm/mpi_process_groups.h"
#include "worker/parallel/compressed_all_reduce.h"

namespace {

using namespace dslaunch;
using dslaunch::bench::cpu_model;

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  {
    auto created = worker::comm::create_mpi_process_groups({1, ranks, 1}, {});
    if (!created.ok()) {
      std::fprintf(stderr, "%s\n", created.status().message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    worker::comm::Communicator& data = (*created)->data();
    auto backend = kernels::make_cpu_backend(1);
    if (rank == 0) {
      fmt::print("compressed all-reduce beside fp32 MPI_Allreduce, {} ranks on {}\n", ranks,
                 cpu_model());
      fmt::print("{:>12} {:>20} {:>22} {:>22}\n", "floats", "fp32 all-reduce ms",
                 "compressed, 1 segment", "compressed, 64 segments");
    }
    for (const int64_t n : {int64_t{1} << 20, int64_t{10} << 20}) {
      std::mt19937 random(rank);
      std::normal_distribution<float> normal;
      std::vector<float> values(n);
      for (float& v : values) v = normal(random);
      std::vector<float> buffer(n);
      const double fp32 = bench::median_ms(5, [&] {
        buffer = values;
        MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
      });
      worker::CompressedAllReduce whole(data, *backend, {n});
      const double one = bench::median_ms(5, [&] {
        buffer = values;
        if (!whole.average(buffer.data()).ok()) MPI_Abort(MPI_COMM_WORLD, 1);
      });
      worker::CompressedAllReduce pieces(data, *backend, std::vector<int64_t>(64, n / 64));
      const double many = bench::median_ms(5, [&] {
        buffer = values;
        if (!pieces.average(buffer.data()).ok()) MPI_Abort(MPI_COMM_WORLD, 1);
      });
      if (rank == 0) {
        fmt::print("{:>12} {:>20.2f} {:>22.2f} {:>22.2f}\n", n, fp32, one, many);
      }
    }
  }
  MPI_Finalize();
  return 0;
}
