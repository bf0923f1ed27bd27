#pragma once

#include <map>
#include <string>

#include "worker/comm/communicator.h"

namespace dslaunch::worker::comm {

// DeepSpeed's comms logger summary (comms_logger.enabled): one line per
// communicator axis and operation this rank ran, with its calls, the bytes
// handed to it (its send buffers) and their mean, the total and mean time
// of its collectives' MPI calls, the algorithm bandwidth (bytes over time)
// and the bus bandwidth (bytes sent to peers over time, as wire_bytes()
// counts them). Operations never called are left out.
std::string comms_summary(const std::map<std::string, CommStats>& by_axis);

}  // namespace dslaunch::worker::comm
