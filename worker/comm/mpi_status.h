#pragma once

#include <string_view>

#include "core/status.h"

namespace dslaunch::worker::comm {

// The one place MPI error codes become a Status: "MPI_Iallreduce failed:
// <MPI's own text>". Argument errors (a count, a type, a buffer, a rank) are
// kInvalidArgument, anything else kUnavailable: with MPI_ERRORS_RETURN a
// failing transport means a peer or its link is gone, which a restart can
// mend. MPI_SUCCESS gives ok.
core::Status from_mpi(int code, std::string_view call);

}  // namespace dslaunch::worker::comm
