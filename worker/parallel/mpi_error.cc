#include "worker/parallel/mpi_error.h"

#include <mpi.h>

namespace dslaunch::worker {

std::string mpi_error_message(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return std::string(call) + " failed with MPI error code " + std::to_string(code);
  }
  return std::string(call) + " failed: " + std::string(text, length);
}

}  // namespace dslaunch::worker
