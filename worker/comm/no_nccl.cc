// The CPU-only build: no NCCL.
#include "worker/comm/nccl_communicator.h"

namespace dslaunch::worker::comm {

bool nccl_built() { return false; }

core::StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(Communicator&) {
  return core::Status(core::StatusCode::kFailedPrecondition,
                      "this build has no NCCL communicator: build with --config=cuda");
}

}  // namespace dslaunch::worker::comm
