// Fused block epilogues (suite/ops/epilogue/): a gated residual add fused with the next
// LayerNorm (optional affine and modulation), and RMSNorm. One row per CTA at a time: RT threads
// hold the row in registers, NCH chunks of VEC elements per thread (chunk c of thread t covers
// columns (c * RT + t) * VEC ..), so every tensor is read once and written once.
//
// Which operands exist is a compile-time flag set F: absent operands cost no registers and no
// loads. Per-sample operands (gate, scale, shift: one row per sample) are loaded once per CTA,
// since a CTA walks rows of one sample; per-token ones once per row.
// The backward declares __launch_bounds__(RT, EP_MINB), EP_MINB = 1: with (RT) alone ptxas held
// two per-token backwards (sm_90) at 32 and 48 registers and spilled; with the 1 it keeps them in
// registers. The forward keeps its prefetched row packed and declares 2 CTAs per SM up to 512
// threads (at D = 5120's 640 the cap of 48 registers spills): with one CTA of D / 8 threads per SM
// too few rows were in flight (docs/perf-notes.md).
//
// Switches of the backward, set per (op, width) by the launch table (SHIPPED in
// suite/ops/epilogue/cuda.py, which passes them with -D); these defaults are the rule's kernels:
//   EP_MINB       min CTAs per SM in __launch_bounds__ (register cap 64K / (RT * it))
//   EP_BWD_PF     (vector loads) the next row's x_new, d_out, d_x_new, y, mean and rstd loaded
//                 packed before this row's math (two rows of loads in flight per CTA)
//   EP_BWD_SMEM   per-sample / [D] operand rows in shared memory, read per row, not held in
//                 registers (when they fit the 48 KB of static shared memory)
//   EP_BWD_SUMS   the per-column sums over rows in shared memory (when they fit)
#pragma once
#include "adaln_common.cuh"
#ifndef EP_MINB
#define EP_MINB 1
#endif
#ifndef EP_BWD_PF
#define EP_BWD_PF 0
#endif
#ifndef EP_BWD_SMEM
#define EP_BWD_SMEM 0
#endif
#ifndef EP_BWD_SUMS
#define EP_BWD_SUMS 0
#endif

#define EP_GATE 1       // x_new = x + y * gate (else x + y)
#define EP_GATE_TOK 2   // gate is [B, N, D] (else one row per sample)
#define EP_MOD 4        // normed = ... * (1 + scale) + shift
#define EP_MOD_TOK 8    // scale/shift are [B, N, D]
#define EP_WEIGHT 16    // affine weight [D] (LayerNorm or RMSNorm)
#define EP_BIAS 32      // affine bias [D]
#define EP_RESID 64     // the residual add (residual_norm); without it x is normalised directly
#define EP_RMS 128      // RMSNorm: no mean, rstd = 1 / sqrt(mean(x^2) + eps)

template <int F, int BIT> struct Has { static constexpr bool v = (F & BIT) != 0; };

// Which per-thread column accumulators a backward needs (sums over rows): slot order in the
// partial rows is gate, scale, shift, weight, bias, each present only if reduced.
template <int F> struct Slots {
  static constexpr int G = ((F & EP_GATE) && !(F & EP_GATE_TOK)) ? 1 : 0;
  static constexpr int M = ((F & EP_MOD) && !(F & EP_MOD_TOK)) ? 2 : 0;
  static constexpr int W = (F & EP_WEIGHT) ? 1 : 0;
  static constexpr int B = (F & EP_BIAS) ? 1 : 0;
  static constexpr int Q = G + M + W + B;
  static constexpr int GATE = 0, SCALE = G, SHIFT = G + 1, WEIGHT = G + M, BIAS = G + M + W;
};

// v[c] <- p[columns of chunk c of thread t], as fp32; columns past D read 0. VECTOR: the host
// proved D % VEC == 0 and 16-byte alignment of p and its row strides.
template <bool VECTOR, typename T, int D, int RT, int NCH, int VEC>
__device__ __forceinline__ void load_row(const T* __restrict__ p, int t, float (&v)[NCH][VEC]) {
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d0 = (c * RT + t) * VEC;
    if (d0 < D) {
      load_f32<VECTOR>(p, d0, D, v[c]);
    } else {
#pragma unroll
      for (int j = 0; j < VEC; ++j) v[c][j] = 0.f;
    }
  }
}

// load_row's words kept packed (vector layout only); columns past D read 0.
template <typename T, int D, int RT, int NCH, int VEC>
__device__ __forceinline__ void load_row_raw(const T* __restrict__ p, int t, Raw<T, VEC> (&r)[NCH]) {
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d0 = (c * RT + t) * VEC;
    if (d0 < D) {
      load_raw(p, d0, r[c]);
    } else {
      zero_raw(r[c]);
    }
  }
}

template <bool VECTOR, typename T, int D, int RT, int NCH, int VEC>
__device__ __forceinline__ void store_row(T* __restrict__ p, int t, const float (&v)[NCH][VEC]) {
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d0 = (c * RT + t) * VEC;
    if (d0 < D) store_f32<VECTOR>(p, d0, D, v[c]);
  }
}

template <int NCH, int VEC>
__device__ __forceinline__ void zero_row(float (&v)[NCH][VEC]) {
#pragma unroll
  for (int c = 0; c < NCH; ++c)
#pragma unroll
    for (int j = 0; j < VEC; ++j) v[c][j] = 0.f;
}

// Operand rows parked in shared memory (P rows of D fp32, padded to NCH chunks): thread t owns
// the words it writes and alone reads them back, so no barrier is needed. Layout [p][c][k][t] of
// float4 (k: the 16-byte words of a chunk), so a warp's 16-byte reads hit distinct banks.
template <int P, int RT, int NCH, int VEC>
struct Park {
  static constexpr int K = VEC / 4;  // VEC is 4 or 8 fp32 (16 bytes of the x type)
  float4 w[P > 0 ? P : 1][NCH][K][RT];
  __device__ __forceinline__ void put(int p, int t, const float (&v)[NCH][VEC]) {
#pragma unroll
    for (int c = 0; c < NCH; ++c)
#pragma unroll
      for (int k = 0; k < K; ++k)
        w[p][c][k][t] = make_float4(v[c][4 * k], v[c][4 * k + 1], v[c][4 * k + 2], v[c][4 * k + 3]);
  }
  __device__ __forceinline__ void get(int p, int t, float (&v)[NCH][VEC]) const {
#pragma unroll
    for (int c = 0; c < NCH; ++c)
#pragma unroll
      for (int k = 0; k < K; ++k) {
        const float4 f = w[p][c][k][t];
        v[c][4 * k] = f.x; v[c][4 * k + 1] = f.y; v[c][4 * k + 2] = f.z; v[c][4 * k + 3] = f.w;
      }
  }
};

// Rows n0 .. n1 of sample blockIdx.y that this CTA walks (grid: chunks x B), rows_per_cta each.
struct Span {
  i64 b, n0, n1;
};
__device__ __forceinline__ Span cta_span(i64 N, i64 rows_per_cta) {
  Span s;
  s.b = blockIdx.y;
  s.n0 = (i64)blockIdx.x * rows_per_cta;
  s.n1 = s.n0 + rows_per_cta < N ? s.n0 + rows_per_cta : N;
  return s;
}
