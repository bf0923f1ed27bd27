#pragma once

#include <string>

namespace dslaunch::worker {

// "MPI_Allreduce failed: <MPI's own text for code>": the one place MPI error
// codes become messages. Communicators must use MPI_ERRORS_RETURN for the
// codes to reach the caller instead of aborting the job.
std::string mpi_error_message(const char* call, int code);

}  // namespace dslaunch::worker
