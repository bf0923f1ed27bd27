#include "worker/commbench/collective.h"

namespace dslaunch::worker::commbench {

std::string_view collective_name(Collective collective) {
  switch (collective) {
    case Collective::all_reduce:
      return "all_reduce";
    case Collective::all_gather:
      return "all_gather";
    case Collective::reduce_scatter:
      return "reduce_scatter";
    case Collective::all_to_all:
      return "all_to_all";
  }
  return "unknown";
}

std::optional<Collective> parse_collective(std::string_view name) {
  for (Collective collective : {Collective::all_reduce, Collective::all_gather,
                                Collective::reduce_scatter, Collective::all_to_all}) {
    if (collective_name(collective) == name) return collective;
  }
  return std::nullopt;
}

std::optional<Message> message_for(Collective collective, int64_t requested_bytes, int ranks) {
  constexpr int64_t kFloatBytes = 4;
  const int64_t elements = requested_bytes / kFloatBytes;
  if (collective == Collective::all_reduce) {
    if (elements <= 0) return std::nullopt;
    return Message{elements * kFloatBytes, elements, elements, elements};
  }
  const int64_t chunk = elements / ranks;
  if (chunk <= 0) return std::nullopt;
  const int64_t whole = chunk * ranks;
  switch (collective) {
    case Collective::all_gather:
      return Message{whole * kFloatBytes, chunk, whole, chunk};
    case Collective::reduce_scatter:
      return Message{whole * kFloatBytes, whole, chunk, chunk};
    default:  // all_to_all
      return Message{whole * kFloatBytes, whole, whole, chunk};
  }
}

}  // namespace dslaunch::worker::commbench
