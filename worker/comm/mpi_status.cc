#include "worker/comm/mpi_status.h"

#include <mpi.h>

#include <string>

namespace dslaunch::worker::comm {

core::Status from_mpi(int code, std::string_view call) {
  if (code == MPI_SUCCESS) return {};
  int error_class = code;
  MPI_Error_class(code, &error_class);
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  std::string message = std::string(call) + " failed";
  if (MPI_Error_string(code, text, &length) == MPI_SUCCESS) {
    message += ": " + std::string(text, length);
  } else {
    message += " with MPI error code " + std::to_string(code);
  }
  switch (error_class) {
    case MPI_ERR_BUFFER:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_RANK:
    case MPI_ERR_ROOT:
    case MPI_ERR_OP:
    case MPI_ERR_ARG:
    case MPI_ERR_COMM:
      return core::invalid_argument(std::move(message));
    default:
      return core::Status(core::StatusCode::kUnavailable, std::move(message));
  }
}

}  // namespace dslaunch::worker::comm
