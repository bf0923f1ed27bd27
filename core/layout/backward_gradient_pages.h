#pragma once

#include <cstdint>

#include "core/layout/parameter_table.h"

namespace dslaunch::core {

// ZeRO stages 2-3 on a GPU over several data ranks
// (worker/engine/device_gradient_pages.h): the most bytes of backward's
// gradient buffer resident at once, in pages of `page_bytes`, for the
// worker that measures it and the plan that sizes it alike.
//
// It replays a backward pass over `table` as worker/model/gpt2_model.cc
// runs it: each range is prepared (its pages take memory) before it is
// written: the tied output layer's rows of the token embedding first, then
// ln_f, each block from the last, then the embeddings; each is reported
// finished after. Buckets of `bucket_elements` floats cut from the
// buffer's end (capped at the buffer, as worker/parallel/gradient_buckets.h
// cuts them) are launched the moment they are complete, in index order, and
// reduced once `buckets_in_flight` more have been launched (the reducer's
// window; 0: at once); a page gives its memory back once every float on it
// is reduced.
int64_t backward_gradient_peak_bytes(const ParameterTable& table, int64_t bucket_elements,
                                     int64_t buckets_in_flight, int64_t page_bytes);

}  // namespace dslaunch::core
