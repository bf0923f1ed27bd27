#include "worker/commbench/bandwidth.h"

#include <catch2/catch.hpp>

#include "worker/commbench/collective.h"

using dslaunch::worker::commbench::bandwidth;
using dslaunch::worker::commbench::bus_factor;
using dslaunch::worker::commbench::Collective;
using dslaunch::worker::commbench::collective_name;
using dslaunch::worker::commbench::Message;
using dslaunch::worker::commbench::message_for;
using dslaunch::worker::commbench::parse_collective;

TEST_CASE("Bus factors are nccl-tests' for each collective") {
  CHECK(bus_factor(Collective::all_reduce, 2) == 1.0);
  CHECK(bus_factor(Collective::all_reduce, 4) == 1.5);
  CHECK(bus_factor(Collective::all_reduce, 8) == 1.75);
  CHECK(bus_factor(Collective::all_gather, 2) == 0.5);
  CHECK(bus_factor(Collective::all_gather, 8) == 0.875);
  CHECK(bus_factor(Collective::reduce_scatter, 4) == 0.75);
  CHECK(bus_factor(Collective::all_to_all, 4) == 0.75);
  CHECK(bus_factor(Collective::all_to_all, 1) == 0.0);
}

TEST_CASE("Algorithm bandwidth is bytes over time in GB/s, bus bandwidth scales it") {
  // 3 GB in 1.5 s is 2 GB/s whatever the collective.
  const auto all_reduce = bandwidth(Collective::all_reduce, 3'000'000'000, 4, 1.5);
  CHECK(all_reduce.algbw_gbs == 2.0);
  CHECK(all_reduce.busbw_gbs == 3.0);  // 2 * 2(4-1)/4
  const auto all_gather = bandwidth(Collective::all_gather, 3'000'000'000, 8, 1.5);
  CHECK(all_gather.algbw_gbs == 2.0);
  CHECK(all_gather.busbw_gbs == 1.75);  // 2 * 7/8
  const auto reduce_scatter = bandwidth(Collective::reduce_scatter, 1'000'000'000, 2, 0.25);
  CHECK(reduce_scatter.algbw_gbs == 4.0);
  CHECK(reduce_scatter.busbw_gbs == 2.0);
  const auto all_to_all = bandwidth(Collective::all_to_all, 500'000'000, 4, 0.5);
  CHECK(all_to_all.algbw_gbs == 1.0);
  CHECK(all_to_all.busbw_gbs == 0.75);
}

TEST_CASE("A time that is not positive gives zero bandwidth") {
  const auto zero = bandwidth(Collective::all_reduce, 1024, 4, 0.0);
  CHECK(zero.algbw_gbs == 0.0);
  CHECK(zero.busbw_gbs == 0.0);
  CHECK(bandwidth(Collective::all_gather, 1024, 4, -1.0).algbw_gbs == 0.0);
}

TEST_CASE("Message sizes follow nccl-tests' per-rank byte counts") {
  // {bytes, send_count, recv_count, chunk}
  CHECK(message_for(Collective::all_reduce, 1024, 4) == Message{1024, 256, 256, 256});
  CHECK(message_for(Collective::all_gather, 1024, 4) == Message{1024, 64, 256, 64});
  CHECK(message_for(Collective::reduce_scatter, 1024, 4) == Message{1024, 256, 64, 64});
  CHECK(message_for(Collective::all_to_all, 1024, 4) == Message{1024, 256, 256, 64});
}

TEST_CASE("Message sizes round down to whole elements and to a multiple of the ranks") {
  // 1024 bytes are 256 floats; 3 ranks split 255 of them, 85 each.
  CHECK(message_for(Collective::all_reduce, 1024, 3) == Message{1024, 256, 256, 256});
  CHECK(message_for(Collective::all_gather, 1024, 3) == Message{1020, 85, 255, 85});
  CHECK(message_for(Collective::reduce_scatter, 1024, 3) == Message{1020, 255, 85, 85});
  CHECK(message_for(Collective::all_to_all, 1024, 3) == Message{1020, 255, 255, 85});
  CHECK(message_for(Collective::all_reduce, 1027, 3) == Message{1024, 256, 256, 256});
}

TEST_CASE("Messages with no element to send are skipped") {
  CHECK(message_for(Collective::all_reduce, 3, 4) == std::nullopt);
  CHECK(message_for(Collective::all_reduce, 4, 4) == Message{4, 1, 1, 1});
  CHECK(message_for(Collective::all_gather, 12, 4) == std::nullopt);
  CHECK(message_for(Collective::all_gather, 16, 4) == Message{16, 1, 4, 1});
  CHECK(message_for(Collective::reduce_scatter, 8, 3) == std::nullopt);
  CHECK(message_for(Collective::all_to_all, 8, 3) == std::nullopt);
}

TEST_CASE("Collective names read back") {
  CHECK(collective_name(Collective::all_reduce) == "all_reduce");
  CHECK(collective_name(Collective::all_gather) == "all_gather");
  CHECK(collective_name(Collective::reduce_scatter) == "reduce_scatter");
  CHECK(collective_name(Collective::all_to_all) == "all_to_all");
  for (Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter,
                       Collective::all_to_all}) {
    CHECK(parse_collective(collective_name(c)) == c);
  }
  CHECK(parse_collective("allreduce") == std::nullopt);
  CHECK(parse_collective("broadcast") == std::nullopt);
}
