// main() for Catch2 tests run under mpirun: MPI is initialised around the
// whole session, and the ranks agree on the exit code so that every rank
// fails when any rank does.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  const int local_failures = Catch::Session().run(argc, argv);
  int any_failures = 0;
  MPI_Allreduce(&local_failures, &any_failures, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failures == 0 ? 0 : 1;
}
