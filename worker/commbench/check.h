#pragma once

#include <cstdint>
#include <span>

#include "worker/commbench/collective.h"

namespace dslaunch::worker::commbench {

// What commbench puts into each rank's input and expects in its output. The
// values are small integers, so float32 holds them and their sums exactly,
// in any summation order, for groups of up to 15,000 ranks; each depends on
// the sending rank and the element's index, so a misplaced, missing or
// repeated block shows. Every rank can recompute any rank's values. Pure.

// The value rank `rank` puts at element `index` of its input.
float input_value(Collective collective, int rank, int64_t index);

// Fills `input` (the rank's Message::send_count elements) with input_value.
void fill_input(Collective collective, int rank, std::span<float> input);

// How many elements of `output` differ from what `collective` must leave on
// rank `rank` of a group of `ranks` whose inputs came from fill_input, for
// `message` (from message_for). An `output` whose size is not
// message.recv_count counts as entirely wrong.
int64_t count_wrong(Collective collective, const Message& message, int rank, int ranks,
                    std::span<const float> output);

}  // namespace dslaunch::worker::commbench
