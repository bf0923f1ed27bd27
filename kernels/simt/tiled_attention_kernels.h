#pragma once

// Causal attention a tile at a time (FlashAttention's scheme): no (T,T)
// matrix is ever stored. A block of eight warps takes eight consecutive
// rows (query positions, or key positions in the backward pass's second
// kernel) of one sequence and head, and runs over the other side in tiles
// of 32 positions, which it stages in shared memory with the rows' own
// vectors. Each warp handles one row, each lane one position of the tile
// and, in the accumulations, the head's channels lane, lane + 32, ... The
// softmax is taken online (running maximum and sum, rescaled as tiles come
// in). The backward pass recomputes the probabilities from each row's
// log-sum-exp and keeps no atomics: a query-major kernel gives dq and the
// rows' statistics, a key-major kernel dk and dv, every sum in a fixed
// order, so the results are the same bits from run to run.
//
// qkv (B,T,3C) is laid out [q | k | v], head h's channels h·hs .. h·hs+hs
// of each (hs = C/NH ≤ kMaxHeadSize); out (B,T,C). Every control path
// reaches every barrier: rows past T compute with masked values.

#include <math.h>

#include <cstdint>

#include "core/layout/attention_scratch.h"
#include "kernels/simt/block_reduce.h"
#include "kernels/simt/host_device.h"
#include "kernels/simt/launch_shape.h"

namespace dslaunch::kernels::simt {

inline constexpr int kAttentionRows = 8;   // rows per block, a warp each
inline constexpr int kAttentionTile = 32;  // positions per tile, a lane each
// A lane holds up to four of a row's channels, in registers (the loops
// over them have a fixed count, which the compiler unrolls): hs ≤ 128. It
// also keeps the key-major kernel's shared memory under CUDA's default
// 48 KiB.
inline constexpr int kChannelsPerLane = 4;
inline constexpr int kMaxHeadSize = kChannelsPerLane * kWarpSize;
static_assert(kMaxHeadSize == core::kMaxTiledHeadSize);

// Where a launch's rows lie: blocks of kAttentionRows rows over B·NH
// sequence-heads.
struct AttentionGrid {
  int64_t B, T, C, NH;

  DSL_HOST_DEVICE int64_t hs() const { return C / NH; }
  DSL_HOST_DEVICE int64_t row_blocks() const { return (T + kAttentionRows - 1) / kAttentionRows; }
  int blocks() const { return static_cast<int>(B * NH * row_blocks()); }
  // The block's sequence b and head h (bh = b·NH + h) and first row.
  template <class Thread>
  DSL_HOST_DEVICE int64_t bh(const Thread& t) const {
    return t.block_index() / row_blocks();
  }
  template <class Thread>
  DSL_HOST_DEVICE int64_t first_row(const Thread& t) const {
    return t.block_index() % row_blocks() * kAttentionRows;
  }
  // Element d of head h's part of vector `part` (0 q, 1 k, 2 v) at position i.
  DSL_HOST_DEVICE int64_t qkv_index(int64_t bh, int64_t i, int part, int64_t d) const {
    return (bh / NH * T + i) * 3 * C + part * C + bh % NH * hs() + d;
  }
  DSL_HOST_DEVICE int64_t out_index(int64_t bh, int64_t i, int64_t d) const {
    return (bh / NH * T + i) * C + bh % NH * hs() + d;
  }
};

// Floats of shared memory, laid out one after another. The tiles that lanes
// read a row each of have rows hs + 1 apart, so the 32 lanes hit 32
// different banks.
struct AttentionShared {
  int64_t hs;
  DSL_HOST_DEVICE int64_t tile_ld() const { return hs + 1; }
  DSL_HOST_DEVICE int64_t rows_floats() const { return kAttentionRows * hs; }
  DSL_HOST_DEVICE int64_t tile_floats() const { return kAttentionTile * tile_ld(); }
  DSL_HOST_DEVICE int64_t broadcast_floats() const { return kAttentionRows * kAttentionTile; }
};

// a · b over n floats, in order.
DSL_HOST_DEVICE inline float dot_product(const float* a, const float* b, int64_t n) {
  float sum = 0;
  for (int64_t d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

// rows[r·hs + d] = element d of part `part` at position first + r, for
// `count` positions (0 past T), with rows `ld` floats apart; the block's
// threads share the work.
template <class Thread>
DSL_HOST_DEVICE void stage_rows(Thread& t, float* rows, int64_t ld, const float* qkv,
                                const AttentionGrid& g, int64_t bh, int64_t first, int count,
                                int part) {
  const int64_t hs = g.hs();
  for (int64_t idx = t.thread_index(); idx < count * hs; idx += t.block_size()) {
    const int64_t r = idx / hs, d = idx % hs;
    const int64_t i = first + r;
    rows[r * ld + d] = i < g.T ? qkv[g.qkv_index(bh, i, part, d)] : 0.0f;
  }
}

// The same for a (B,T,C) tensor such as dout.
template <class Thread>
DSL_HOST_DEVICE void stage_out_rows(Thread& t, float* rows, int64_t ld, const float* x,
                                    const AttentionGrid& g, int64_t bh, int64_t first, int count) {
  const int64_t hs = g.hs();
  for (int64_t idx = t.thread_index(); idx < count * hs; idx += t.block_size()) {
    const int64_t r = idx / hs, d = idx % hs;
    const int64_t i = first + r;
    rows[r * ld + d] = i < g.T ? x[g.out_index(bh, i, d)] : 0.0f;
  }
}

// The online softmax of one row: the running maximum m and sum l of
// exp(s - m) over the positions seen, and a running Σ exp(s - m)·x of
// whatever else the caller weighs (rescaled with them).
struct OnlineSoftmax {
  float m = -INFINITY;
  float l = 0;
  // Takes a tile: this lane's score s (-inf where masked); returns this
  // lane's exp(s - m) under the new maximum and sets `rescale` to what the
  // running sums must be multiplied by.
  template <class Thread>
  DSL_HOST_DEVICE float add(Thread& t, float s, float& rescale) {
    const float m_new = fmaxf(m, warp_reduce(t, s, Max<float>{}));
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    rescale = m == -INFINITY ? 0.0f : expf(m - m_new);
    l = l * rescale + warp_reduce(t, p, Sum<float>{});
    m = m_new;
    return p;
  }
};

// out = softmax(q·kᵀ/sqrt(hs), causal)·v.
struct TiledAttentionForward {
  float* out;
  const float* qkv;
  AttentionGrid g;

  LaunchShape shape() const {
    const AttentionShared s{g.hs()};
    return {g.blocks(), kAttentionRows * kWarpSize,
            static_cast<int64_t>((s.rows_floats() + 2 * s.tile_floats() + s.broadcast_floats()) *
                                 sizeof(float))};
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t hs = g.hs();
    const AttentionShared s{hs};
    float* qs = t.template shared_memory<float>();
    float* ks = qs + s.rows_floats();
    float* vs = ks + s.tile_floats();
    float* ps = vs + s.tile_floats();
    const int64_t bh = g.bh(t), first = g.first_row(t);
    const int w = t.warp(), lane = t.lane();
    const int64_t i = first + w;
    const float scale = 1.0f / sqrtf(static_cast<float>(hs));
    stage_rows(t, qs, hs, qkv, g, bh, first, kAttentionRows, 0);
    OnlineSoftmax softmax;
    float acc[kChannelsPerLane] = {};
    const int64_t last = first + kAttentionRows - 1 < g.T ? first + kAttentionRows - 1 : g.T - 1;
    for (int64_t tile = 0; tile <= last; tile += kAttentionTile) {
      t.sync_threads();  // the last tile's readers are done
      stage_rows(t, ks, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 1);
      stage_rows(t, vs, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 2);
      t.sync_threads();
      const int64_t j = tile + lane;
      const bool visible = i < g.T && j <= i;
      const float score =
          visible ? scale * dot_product(qs + w * hs, ks + lane * s.tile_ld(), hs) : -INFINITY;
      float rescale;
      ps[w * kAttentionTile + lane] = softmax.add(t, score, rescale);
      t.sync_threads();
      for (int k = 0; k < kChannelsPerLane; ++k) {
        if (k * kWarpSize + lane >= hs) continue;
        const int64_t d = k * kWarpSize + lane;
        float sum = 0;
        for (int r = 0; r < kAttentionTile; ++r) {
          sum += ps[w * kAttentionTile + r] * vs[r * s.tile_ld() + d];
        }
        acc[k] = acc[k] * rescale + sum;
      }
    }
    if (i >= g.T) return;
    for (int k = 0; k < kChannelsPerLane; ++k) {
      if (k * kWarpSize + lane >= hs) continue;
      out[g.out_index(bh, i, k * kWarpSize + lane)] = acc[k] / softmax.l;
    }
  }
};

// The backward pass's query-major half: each row's log-sum-exp and
// D = Σ_j P_j·dP_j (the softmax gradient's correction, dP_j = dout·v_j)
// into lse and dsum (B·NH·T each, row bh·T + i), then dq += the query
// gradient.
struct TiledAttentionBackwardQuery {
  float* dqkv;
  float* lse;
  float* dsum;
  const float* dout;
  const float* qkv;
  AttentionGrid g;

  LaunchShape shape() const {
    const AttentionShared s{g.hs()};
    return {
        g.blocks(), kAttentionRows * kWarpSize,
        static_cast<int64_t>((2 * s.rows_floats() + 2 * s.tile_floats() + s.broadcast_floats()) *
                             sizeof(float))};
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t hs = g.hs();
    const AttentionShared s{hs};
    float* qs = t.template shared_memory<float>();
    float* dos = qs + s.rows_floats();
    float* ks = dos + s.rows_floats();
    float* vs = ks + s.tile_floats();
    float* ds_tile = vs + s.tile_floats();
    const int64_t bh = g.bh(t), first = g.first_row(t);
    const int w = t.warp(), lane = t.lane();
    const int64_t i = first + w;
    const float scale = 1.0f / sqrtf(static_cast<float>(hs));
    stage_rows(t, qs, hs, qkv, g, bh, first, kAttentionRows, 0);
    stage_out_rows(t, dos, hs, dout, g, bh, first, kAttentionRows);
    const int64_t last = first + kAttentionRows - 1 < g.T ? first + kAttentionRows - 1 : g.T - 1;
    // First pass: the statistics.
    OnlineSoftmax softmax;
    float weighted = 0;  // Σ exp(s - m)·dP, rescaled with the softmax
    for (int64_t tile = 0; tile <= last; tile += kAttentionTile) {
      t.sync_threads();
      stage_rows(t, ks, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 1);
      stage_rows(t, vs, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 2);
      t.sync_threads();
      const int64_t j = tile + lane;
      const bool visible = i < g.T && j <= i;
      const float score =
          visible ? scale * dot_product(qs + w * hs, ks + lane * s.tile_ld(), hs) : -INFINITY;
      const float dp = visible ? dot_product(dos + w * hs, vs + lane * s.tile_ld(), hs) : 0.0f;
      float rescale;
      const float p = softmax.add(t, score, rescale);
      weighted = weighted * rescale + warp_reduce(t, p * dp, Sum<float>{});
    }
    const float row_lse = i < g.T ? softmax.m + logf(softmax.l) : 0.0f;
    const float row_dsum = i < g.T ? weighted / softmax.l : 0.0f;
    // Second pass: dq = scale · Σ_j P_j·(dP_j - D)·k_j.
    float acc[kChannelsPerLane] = {};
    for (int64_t tile = 0; tile <= last; tile += kAttentionTile) {
      t.sync_threads();
      stage_rows(t, ks, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 1);
      stage_rows(t, vs, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 2);
      t.sync_threads();
      const int64_t j = tile + lane;
      const bool visible = i < g.T && j <= i;
      float ds = 0;
      if (visible) {
        const float p =
            expf(scale * dot_product(qs + w * hs, ks + lane * s.tile_ld(), hs) - row_lse);
        ds = p * (dot_product(dos + w * hs, vs + lane * s.tile_ld(), hs) - row_dsum);
      }
      ds_tile[w * kAttentionTile + lane] = ds;
      t.sync_threads();
      for (int k = 0; k < kChannelsPerLane; ++k) {
        if (k * kWarpSize + lane >= hs) continue;
        const int64_t d = k * kWarpSize + lane;
        for (int r = 0; r < kAttentionTile; ++r) {
          acc[k] += ds_tile[w * kAttentionTile + r] * ks[r * s.tile_ld() + d];
        }
      }
    }
    if (i >= g.T) return;
    for (int k = 0; k < kChannelsPerLane; ++k) {
      if (k * kWarpSize + lane >= hs) continue;
      dqkv[g.qkv_index(bh, i, 0, k * kWarpSize + lane)] += scale * acc[k];
    }
    if (lane == 0) {
      lse[bh * g.T + i] = row_lse;
      dsum[bh * g.T + i] = row_dsum;
    }
  }
};

// The key-major half, after TiledAttentionBackwardQuery: each block takes
// eight keys j and runs over the queries i ≥ j in tiles; dk_j += scale ·
// Σ_i P_ij·(dP_ij - D_i)·q_i and dv_j += Σ_i P_ij·dout_i.
struct TiledAttentionBackwardKeyValue {
  float* dqkv;
  const float* lse;
  const float* dsum;
  const float* dout;
  const float* qkv;
  AttentionGrid g;

  LaunchShape shape() const {
    const AttentionShared s{g.hs()};
    return {g.blocks(), kAttentionRows * kWarpSize,
            static_cast<int64_t>((2 * s.rows_floats() + 2 * s.tile_floats() + 2 * kAttentionTile +
                                  2 * s.broadcast_floats()) *
                                 sizeof(float))};
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t hs = g.hs();
    const AttentionShared s{hs};
    float* ks = t.template shared_memory<float>();
    float* vs = ks + s.rows_floats();
    float* qs = vs + s.rows_floats();
    float* dos = qs + s.tile_floats();
    float* lse_tile = dos + s.tile_floats();
    float* dsum_tile = lse_tile + kAttentionTile;
    float* p_tile = dsum_tile + kAttentionTile;
    float* ds_tile = p_tile + s.broadcast_floats();
    const int64_t bh = g.bh(t), first = g.first_row(t);
    const int w = t.warp(), lane = t.lane();
    const int64_t j = first + w;
    const float scale = 1.0f / sqrtf(static_cast<float>(hs));
    stage_rows(t, ks, hs, qkv, g, bh, first, kAttentionRows, 1);
    stage_rows(t, vs, hs, qkv, g, bh, first, kAttentionRows, 2);
    float dk[kChannelsPerLane] = {};
    float dv[kChannelsPerLane] = {};
    for (int64_t tile = first / kAttentionTile * kAttentionTile; tile < g.T;
         tile += kAttentionTile) {
      t.sync_threads();
      stage_rows(t, qs, s.tile_ld(), qkv, g, bh, tile, kAttentionTile, 0);
      stage_out_rows(t, dos, s.tile_ld(), dout, g, bh, tile, kAttentionTile);
      for (int r = t.thread_index(); r < kAttentionTile; r += t.block_size()) {
        const bool in = tile + r < g.T;
        lse_tile[r] = in ? lse[bh * g.T + tile + r] : 0.0f;
        dsum_tile[r] = in ? dsum[bh * g.T + tile + r] : 0.0f;
      }
      t.sync_threads();
      const int64_t i = tile + lane;
      const bool visible = j < g.T && i >= j && i < g.T;
      float p = 0, ds = 0;
      if (visible) {
        p = expf(scale * dot_product(qs + lane * s.tile_ld(), ks + w * hs, hs) - lse_tile[lane]);
        ds = p * (dot_product(dos + lane * s.tile_ld(), vs + w * hs, hs) - dsum_tile[lane]);
      }
      p_tile[w * kAttentionTile + lane] = p;
      ds_tile[w * kAttentionTile + lane] = ds;
      t.sync_threads();
      for (int k = 0; k < kChannelsPerLane; ++k) {
        if (k * kWarpSize + lane >= hs) continue;
        const int64_t d = k * kWarpSize + lane;
        for (int r = 0; r < kAttentionTile; ++r) {
          dk[k] += ds_tile[w * kAttentionTile + r] * qs[r * s.tile_ld() + d];
          dv[k] += p_tile[w * kAttentionTile + r] * dos[r * s.tile_ld() + d];
        }
      }
    }
    if (j >= g.T) return;
    for (int k = 0; k < kChannelsPerLane; ++k) {
      if (k * kWarpSize + lane >= hs) continue;
      const int64_t d = k * kWarpSize + lane;
      dqkv[g.qkv_index(bh, j, 1, d)] += scale * dk[k];
      dqkv[g.qkv_index(bh, j, 2, d)] += dv[k];
    }
  }
};

}  // namespace dslaunch::kernels::simt
