#pragma once

#include "core/status.h"

namespace dslaunch::worker::comm {

// MPI's start and end for a process. After init every MPI call comes from
// the communicators' streams (one thread per communicator, see MpiStream),
// several at once: init asks for MPI_THREAD_MULTIPLE.
core::Status mpi_init();
// After every ProcessGroups is destroyed; does nothing if MPI is not running.
void mpi_finalize();

}  // namespace dslaunch::worker::comm
