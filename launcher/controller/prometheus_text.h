#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "proto/dslaunch.pb.h"

namespace dslaunch::controller {

// A job's state in Prometheus's text exposition format (version 0.0.4), as
// the controller's metrics endpoint serves it: per job (labels job, name)
// its state, steps, restarts, last checkpoint, and rank 0's last step
// metrics (loss, evaluation loss, learning rate, tokens/s, TFLOP/s); per
// rank (labels job, rank, host) its step, heartbeat age, last step time,
// resident memory now and at its peak, the model-state bytes it accounts
// for, and whether it is running. `last_step` is rank 0's last step line
// of metrics.jsonl (null before the first).
std::string prometheus_text(const v1::JobStatus& status, const nlohmann::json& last_step);

}  // namespace dslaunch::controller
