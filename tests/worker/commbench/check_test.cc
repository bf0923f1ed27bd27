#include "worker/commbench/check.h"

#include <vector>

#include <catch2/catch.hpp>

#include "worker/commbench/collective.h"

using dslaunch::worker::commbench::Collective;
using dslaunch::worker::commbench::count_wrong;
using dslaunch::worker::commbench::fill_input;
using dslaunch::worker::commbench::input_value;
using dslaunch::worker::commbench::Message;
using dslaunch::worker::commbench::message_for;

namespace {

using Buffers = std::vector<std::vector<float>>;  // one per rank

Buffers inputs(Collective c, const Message& m, int ranks) {
  Buffers in(ranks, std::vector<float>(m.send_count));
  for (int r = 0; r < ranks; ++r) fill_input(c, r, in[r]);
  return in;
}

// The collectives as their definitions state them, one rank after another.
Buffers reference(Collective c, const Message& m, const Buffers& in) {
  const int n = static_cast<int>(in.size());
  Buffers out(n, std::vector<float>(m.recv_count, 0.0f));
  for (int r = 0; r < n; ++r) {
    for (int64_t i = 0; i < m.recv_count; ++i) {
      const int64_t block = i / m.chunk, j = i % m.chunk;
      switch (c) {
        case Collective::all_reduce:
          for (int q = 0; q < n; ++q) out[r][i] += in[q][i];
          break;
        case Collective::reduce_scatter:
          for (int q = 0; q < n; ++q) out[r][i] += in[q][r * m.chunk + i];
          break;
        case Collective::all_gather:
          out[r][i] = in[block][j];
          break;
        case Collective::all_to_all:
          out[r][i] = in[block][r * m.chunk + j];
          break;
      }
    }
  }
  return out;
}

constexpr Collective kAll[] = {Collective::all_reduce, Collective::all_gather,
                               Collective::reduce_scatter, Collective::all_to_all};

}  // namespace

TEST_CASE("Inputs are small integers set by rank and index") {
  CHECK(input_value(Collective::all_reduce, 0, 0) == 1.0f);
  CHECK(input_value(Collective::all_reduce, 2, 1000) == 6.0f);  // 1 + 2 + 1000 % 997
  CHECK(input_value(Collective::reduce_scatter, 61, 996) == 997.0f);
  CHECK(input_value(Collective::all_gather, 2, 1000) == 2003.0f);
  CHECK(input_value(Collective::all_to_all, 15999, 996) == 15999996.0f);
  std::vector<float> buffer(2000);
  fill_input(Collective::all_to_all, 3, buffer);
  for (int64_t i = 0; i < 2000; ++i)
    REQUIRE(buffer[i] == input_value(Collective::all_to_all, 3, i));
}

TEST_CASE("The outputs of the reference collectives check out on every rank") {
  for (int ranks : {1, 2, 3, 4, 8}) {
    for (Collective c : kAll) {
      for (int64_t bytes : {64, 4096, 12000}) {
        const auto m = message_for(c, bytes, ranks);
        REQUIRE(m);
        const Buffers out = reference(c, *m, inputs(c, *m, ranks));
        for (int r = 0; r < ranks; ++r) {
          INFO(ranks << " ranks, rank " << r << ", " << bytes << " bytes, collective "
                     << static_cast<int>(c));
          CHECK(count_wrong(c, *m, r, ranks, out[r]) == 0);
        }
      }
    }
  }
}

TEST_CASE("One wrong element is counted") {
  for (Collective c : kAll) {
    const auto m = message_for(c, 4096, 4);
    Buffers out = reference(c, *m, inputs(c, *m, 4));
    out[2][m->recv_count - 1] += 1.0f;
    CHECK(count_wrong(c, *m, 2, 4, out[2]) == 1);
    out[2][0] = -1.0f;
    CHECK(count_wrong(c, *m, 2, 4, out[2]) == 2);
  }
}

TEST_CASE("Another rank's output is wrong for this rank") {
  // Ranks that receive different data: all but all_reduce and all_gather.
  for (Collective c : {Collective::reduce_scatter, Collective::all_to_all}) {
    const auto m = message_for(c, 4096, 4);
    const Buffers out = reference(c, *m, inputs(c, *m, 4));
    CHECK(count_wrong(c, *m, 1, 4, out[0]) == m->recv_count);
  }
}

TEST_CASE("Blocks in the wrong order are wrong") {
  for (Collective c : {Collective::all_gather, Collective::all_to_all}) {
    const auto m = message_for(c, 4096, 4);
    Buffers out = reference(c, *m, inputs(c, *m, 4));
    std::swap_ranges(out[3].begin(), out[3].begin() + m->chunk, out[3].begin() + m->chunk);
    CHECK(count_wrong(c, *m, 3, 4, out[3]) == 2 * m->chunk);
  }
}

TEST_CASE("A missing or repeated contribution to a sum is wrong everywhere") {
  for (Collective c : {Collective::all_reduce, Collective::reduce_scatter}) {
    const auto m = message_for(c, 4096, 4);
    Buffers in = inputs(c, *m, 4);
    in[0] = in[1];  // rank 1 counted twice, rank 0 not at all
    const Buffers out = reference(c, *m, in);
    CHECK(count_wrong(c, *m, 0, 4, out[0]) == m->recv_count);
  }
}

TEST_CASE("An output of the wrong size counts as entirely wrong") {
  const auto m = message_for(Collective::all_reduce, 64, 2);
  const std::vector<float> short_output(m->recv_count - 1, 0.0f);
  CHECK(count_wrong(Collective::all_reduce, *m, 0, 2, short_output) == 16);
}

TEST_CASE("Sums over 15,000 ranks stay exact in float32") {
  constexpr int kRanks = 15000;
  const auto m = message_for(Collective::all_reduce, 4 * 997, kRanks);
  std::vector<float> sum(m->recv_count, 0.0f);
  std::vector<float> input(m->send_count);
  for (int r = 0; r < kRanks; ++r) {
    fill_input(Collective::all_reduce, r, input);
    for (int64_t i = 0; i < m->recv_count; ++i) sum[i] += input[i];
  }
  CHECK(count_wrong(Collective::all_reduce, *m, 0, kRanks, sum) == 0);
}
