#include "worker/comm/mpi_runtime.h"

#include <mpi.h>

#include <string>

#include "worker/comm/mpi_status.h"

namespace dslaunch::worker::comm {

core::Status mpi_init() {
  int provided = MPI_THREAD_SINGLE;
  if (const int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      code != MPI_SUCCESS) {
    return from_mpi(code, "MPI_Init_thread").with_context(
        "start dsworker under mpirun or srun");
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    return core::failed_precondition(
        "this MPI library offers thread level " + std::to_string(provided) +
        ", below MPI_THREAD_MULTIPLE, which dsworker's communicator streams need");
  }
  return {};
}

void mpi_finalize() {
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

}  // namespace dslaunch::worker::comm
