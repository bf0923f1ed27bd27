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
#include <cstring>
#include <stdexcept>

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

// Where one sequence-head's vectors lie in a tensor: position i's at
// start + i·stride.
struct PositionRows {
  int64_t start;
  int64_t stride;
  DSL_HOST_DEVICE int64_t operator()(int64_t i) const { return start + i * stride; }
};

// Where a launch's rows lie: blocks of kAttentionRows rows over B·NH
// sequence-heads.
struct AttentionGrid {
  int64_t B, T, C, NH;

  DSL_HOST_DEVICE int64_t hs() const { return C / NH; }
  DSL_HOST_DEVICE float scale() const { return 1.0f / sqrtf(static_cast<float>(hs())); }
  DSL_HOST_DEVICE int64_t row_blocks() const { return (T + kAttentionRows - 1) / kAttentionRows; }
  // A launch of every block, with `shared_floats` of shared memory.
  LaunchShape launch(int64_t shared_floats) const {
    return {static_cast<int>(B * NH * row_blocks()), kAttentionRows * kWarpSize,
            shared_floats * static_cast<int64_t>(sizeof(float))};
  }
  // The block's sequence b and head h (bh = b·NH + h), its first row, and
  // the last row it holds (before T).
  template <class Thread>
  DSL_HOST_DEVICE int64_t bh(const Thread& t) const {
    return t.block_index() / row_blocks();
  }
  template <class Thread>
  DSL_HOST_DEVICE int64_t first_row(const Thread& t) const {
    return t.block_index() % row_blocks() * kAttentionRows;
  }
  DSL_HOST_DEVICE int64_t last_row(int64_t first) const {
    return first + kAttentionRows - 1 < T ? first + kAttentionRows - 1 : T - 1;
  }
  // Element d of head h's part of vector `part` (0 q, 1 k, 2 v) at position i.
  DSL_HOST_DEVICE int64_t qkv_index(int64_t bh, int64_t i, int part, int64_t d) const {
    return (bh / NH * T + i) * 3 * C + part * C + bh % NH * hs() + d;
  }
  DSL_HOST_DEVICE int64_t out_index(int64_t bh, int64_t i, int64_t d) const {
    return (bh / NH * T + i) * C + bh % NH * hs() + d;
  }
  // Part `part` of qkv for sequence-head bh; a (B,T,C) tensor's (out, dout).
  DSL_HOST_DEVICE PositionRows qkv_rows(int64_t bh, int part) const {
    return {qkv_index(bh, 0, part, 0), 3 * C};
  }
  DSL_HOST_DEVICE PositionRows out_rows(int64_t bh) const { return {out_index(bh, 0, 0), C}; }
};

// Floats of shared memory, laid out one after another. Lanes read a row
// each of the tiles, so their rows are spaced for the 32 lanes to hit 32
// different banks: hs + 1 apart when a lane reads a float at a time; when
// hs is a multiple of 4 and they read 16 bytes at a time (dot_product), a
// multiple of 4 that is not of 8, so that each quarter-warp's eight 16-byte
// reads cover the 32 banks, and every row starts 16-byte aligned.
struct AttentionShared {
  int64_t hs;
  DSL_HOST_DEVICE int64_t tile_ld() const {
    if (hs % 4 != 0) return hs + 1;
    return hs % 8 == 0 ? hs + 4 : hs + 8;
  }
  DSL_HOST_DEVICE int64_t rows_floats() const { return kAttentionRows * hs; }
  DSL_HOST_DEVICE int64_t tile_floats() const { return kAttentionTile * tile_ld(); }
  DSL_HOST_DEVICE int64_t broadcast_floats() const { return kAttentionRows * kAttentionTile; }
};

// v = p[0..3], p 16-byte aligned: one 128-bit load on a GPU. The emulator
// refuses an address the GPU would fault on.
DSL_HOST_DEVICE inline void load4(const float* p, float (&v)[4]) {
#if defined(__CUDA_ARCH__)
  const float4 x = *reinterpret_cast<const float4*>(p);
  v[0] = x.x;
  v[1] = x.y;
  v[2] = x.z;
  v[3] = x.w;
#else
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    throw std::logic_error("a 16-byte load from an address that is not 16-byte aligned");
  }
  std::memcpy(v, p, sizeof v);
#endif
}

// a · b over n floats, in order; 16 bytes a load where n is a multiple of 4
// (AttentionShared aligns the rows then). The kernels are compiled without
// contracting a·b + c (for AdamW's sake), so the sums fuse explicitly: one
// instruction instead of two on a GPU, and the same correctly rounded fmaf
// on the CPU's emulator.
DSL_HOST_DEVICE inline float dot_product(const float* a, const float* b, int64_t n) {
  float sum = 0;
  if (n % 4 == 0) {
    for (int64_t d = 0; d < n; d += 4) {
      float x[4], y[4];
      load4(a + d, x);
      load4(b + d, y);
      for (int e = 0; e < 4; ++e) sum = fmaf(x[e], y[e], sum);
    }
    return sum;
  }
  for (int64_t d = 0; d < n; ++d) sum = fmaf(a[d], b[d], sum);
  return sum;
}

// rows[r·ld + d] = element d of position first + r (0 past T), for `count`
// positions of the source's `positions`. A warp copies a row, a lane a
// channel: the reads coalesce, and no thread divides (a 64-bit division is
// a long instruction sequence on a GPU: dividing per element made staging
// cost more than the arithmetic).
template <class Thread>
DSL_HOST_DEVICE void stage_rows(Thread& t, float* rows, int64_t ld, const float* source,
                                const AttentionGrid& g, int64_t first, int count,
                                PositionRows positions) {
  const int64_t hs = g.hs();
  const int warps = t.block_size() / kWarpSize;
  for (int r = t.warp(); r < count; r += warps) {
    const int64_t i = first + r;
    float* to = rows + r * ld;
    if (i < g.T) {
      const float* from = source + positions(i);
      for (int64_t d = t.lane(); d < hs; d += kWarpSize) to[d] = from[d];
    } else {
      for (int64_t d = t.lane(); d < hs; d += kWarpSize) to[d] = 0.0f;
    }
  }
}

// acc[k] = acc[k]·rescale + Σ_r weights[r]·tile[r·ld + d] for this lane's
// channels d = k·32 + lane: a tile's weighted rows into a row's sums.
template <class Thread>
DSL_HOST_DEVICE void accumulate_tile(const Thread& t, float* acc, const float* weights,
                                     const float* tile, int64_t ld, int64_t hs,
                                     float rescale = 1.0f) {
  for (int k = 0; k < kChannelsPerLane; ++k) {
    const int64_t d = k * kWarpSize + t.lane();
    if (d >= hs) continue;
    float sum = 0;
    for (int r = 0; r < kAttentionTile; ++r) sum = fmaf(weights[r], tile[r * ld + d], sum);
    acc[k] = acc[k] * rescale + sum;
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

// Stages the keys and values of positions [tile, tile + 32) into ks and vs,
// between barriers: the last tile's readers are done before, every thread
// sees the new tile after.
template <class Thread>
DSL_HOST_DEVICE void next_key_tile(Thread& t, float* ks, float* vs, const AttentionShared& s,
                                   const float* qkv, const AttentionGrid& g, int64_t bh,
                                   int64_t tile) {
  t.sync_threads();
  stage_rows(t, ks, s.tile_ld(), qkv, g, tile, kAttentionTile, g.qkv_rows(bh, 1));
  stage_rows(t, vs, s.tile_ld(), qkv, g, tile, kAttentionTile, g.qkv_rows(bh, 2));
  t.sync_threads();
}

// out = softmax(q·kᵀ/sqrt(hs), causal)·v.
struct TiledAttentionForward {
  float* out;
  const float* qkv;
  AttentionGrid g;

  LaunchShape shape() const {
    const AttentionShared s{g.hs()};
    return g.launch(s.rows_floats() + 2 * s.tile_floats() + s.broadcast_floats());
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t hs = g.hs();
    const float scale = g.scale();
    const AttentionShared s{hs};
    float* qs = t.template shared_memory<float>();
    float* ks = qs + s.rows_floats();
    float* vs = ks + s.tile_floats();
    float* ps = vs + s.tile_floats();
    const int64_t bh = g.bh(t), first = g.first_row(t);
    const int w = t.warp(), lane = t.lane();
    const int64_t i = first + w;
    stage_rows(t, qs, hs, qkv, g, first, kAttentionRows, g.qkv_rows(bh, 0));
    OnlineSoftmax softmax;
    float acc[kChannelsPerLane] = {};
    for (int64_t tile = 0; tile <= g.last_row(first); tile += kAttentionTile) {
      next_key_tile(t, ks, vs, s, qkv, g, bh, tile);
      const int64_t j = tile + lane;
      const bool visible = i < g.T && j <= i;
      const float score =
          visible ? scale * dot_product(qs + w * hs, ks + lane * s.tile_ld(), hs) : -INFINITY;
      float rescale;
      ps[w * kAttentionTile + lane] = softmax.add(t, score, rescale);
      t.sync_threads();
      accumulate_tile(t, acc, ps + w * kAttentionTile, vs, s.tile_ld(), hs, rescale);
    }
    if (i >= g.T) return;
    for (int k = 0; k < kChannelsPerLane; ++k) {
      const int64_t d = k * kWarpSize + lane;
      if (d < hs) out[g.out_index(bh, i, d)] = acc[k] / softmax.l;
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
    return g.launch(2 * s.rows_floats() + 2 * s.tile_floats() + s.broadcast_floats());
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t hs = g.hs();
    const float scale = g.scale();
    const AttentionShared s{hs};
    float* qs = t.template shared_memory<float>();
    float* dos = qs + s.rows_floats();
    float* ks = dos + s.rows_floats();
    float* vs = ks + s.tile_floats();
    float* ds_tile = vs + s.tile_floats();
    const int64_t bh = g.bh(t), first = g.first_row(t);
    const int w = t.warp(), lane = t.lane();
    const int64_t i = first + w;
    stage_rows(t, qs, hs, qkv, g, first, kAttentionRows, g.qkv_rows(bh, 0));
    stage_rows(t, dos, hs, dout, g, first, kAttentionRows, g.out_rows(bh));
    // First pass: the statistics.
    OnlineSoftmax softmax;
    float weighted = 0;  // Σ exp(s - m)·dP, rescaled with the softmax
    for (int64_t tile = 0; tile <= g.last_row(first); tile += kAttentionTile) {
      next_key_tile(t, ks, vs, s, qkv, g, bh, tile);
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
    for (int64_t tile = 0; tile <= g.last_row(first); tile += kAttentionTile) {
      next_key_tile(t, ks, vs, s, qkv, g, bh, tile);
      const int64_t j = tile + lane;
      float ds = 0;
      if (i < g.T && j <= i) {
        const float p =
            expf(scale * dot_product(qs + w * hs, ks + lane * s.tile_ld(), hs) - row_lse);
        ds = p * (dot_product(dos + w * hs, vs + lane * s.tile_ld(), hs) - row_dsum);
      }
      ds_tile[w * kAttentionTile + lane] = ds;
      t.sync_threads();
      accumulate_tile(t, acc, ds_tile + w * kAttentionTile, ks, s.tile_ld(), hs);
    }
    if (i >= g.T) return;
    for (int k = 0; k < kChannelsPerLane; ++k) {
      const int64_t d = k * kWarpSize + lane;
      if (d < hs) dqkv[g.qkv_index(bh, i, 0, d)] += scale * acc[k];
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
    return g.launch(2 * s.rows_floats() + 2 * s.tile_floats() + 2 * kAttentionTile +
                    2 * s.broadcast_floats());
  }
  template <class Thread>
  DSL_HOST_DEVICE void operator()(Thread& t) const {
    const int64_t hs = g.hs();
    const float scale = g.scale();
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
    stage_rows(t, ks, hs, qkv, g, first, kAttentionRows, g.qkv_rows(bh, 1));
    stage_rows(t, vs, hs, qkv, g, first, kAttentionRows, g.qkv_rows(bh, 2));
    float dk[kChannelsPerLane] = {};
    float dv[kChannelsPerLane] = {};
    for (int64_t tile = first / kAttentionTile * kAttentionTile; tile < g.T;
         tile += kAttentionTile) {
      t.sync_threads();
      stage_rows(t, qs, s.tile_ld(), qkv, g, tile, kAttentionTile, g.qkv_rows(bh, 0));
      stage_rows(t, dos, s.tile_ld(), dout, g, tile, kAttentionTile, g.out_rows(bh));
      for (int r = t.thread_index(); r < kAttentionTile; r += t.block_size()) {
        const bool in = tile + r < g.T;
        lse_tile[r] = in ? lse[bh * g.T + tile + r] : 0.0f;
        dsum_tile[r] = in ? dsum[bh * g.T + tile + r] : 0.0f;
      }
      t.sync_threads();
      const int64_t i = tile + lane;
      float p = 0, ds = 0;
      if (j < g.T && i >= j && i < g.T) {
        p = expf(scale * dot_product(qs + lane * s.tile_ld(), ks + w * hs, hs) - lse_tile[lane]);
        ds = p * (dot_product(dos + lane * s.tile_ld(), vs + w * hs, hs) - dsum_tile[lane]);
      }
      p_tile[w * kAttentionTile + lane] = p;
      ds_tile[w * kAttentionTile + lane] = ds;
      t.sync_threads();
      accumulate_tile(t, dk, ds_tile + w * kAttentionTile, qs, s.tile_ld(), hs);
      accumulate_tile(t, dv, p_tile + w * kAttentionTile, dos, s.tile_ld(), hs);
    }
    if (j >= g.T) return;
    for (int k = 0; k < kChannelsPerLane; ++k) {
      const int64_t d = k * kWarpSize + lane;
      if (d >= hs) continue;
      dqkv[g.qkv_index(bh, j, 1, d)] += scale * dk[k];
      dqkv[g.qkv_index(bh, j, 2, d)] += dv[k];
    }
  }
};

}  // namespace dslaunch::kernels::simt
