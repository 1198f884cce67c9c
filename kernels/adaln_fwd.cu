// Fused AdaLN forward: y = LayerNorm(x) * (1 + scale) + shift, one pass over HBM.
//
// Layout: a CTA holds ROWS row groups of RT threads; each row group owns one row of x at a time
// and keeps it in registers (NCH chunks of VEC elements per thread), so x is read once and y
// written once. D, the dtypes and the mode are compile-time constants: every loop is unrolled and
// the row array stays in registers (no local memory). docs/perf-notes.md has the measurements
// behind the two designs below.
#include "adaln_common.cuh"

// The forward for fp32 y and for rows that are not 16-byte aligned (adaln_fwd_pf below is faster
// for 16-bit y). One CTA per block of ROWS rows.
// LV: elements of x per vector load (0: a 16-byte load, 8 for 16-bit x; 4 makes the fp32
// modulation loads beside 16-bit x whole 16-byte words, coalesced across the warp).
// MINB: resident CTAs per SM ptxas must allow (a register cap). The row groups' reductions
// wait on the CTA's barrier (a named barrier per row group measured within 1% of it: 79.4
// against 78.9% of the copy, fp32 y at D = 1536).
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, bool VECTOR,
          int LV = 0, int MINB = 1>
__global__ void __launch_bounds__(RT * ROWS, MINB)
adaln_fwd(const TX* __restrict__ x, i64 sxb, i64 sxn,          // x[b, n, d] = x[b*sxb + n*sxn + d]
          const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
          TY* __restrict__ y,                                  // contiguous [rows, D]
          float* __restrict__ mean_out, float* __restrict__ rstd_out,  // [rows] fp32, or both null
          i64 rows, i64 N, float eps) {
  constexpr int VEC = LV ? LV : 16 / (int)sizeof(TX);   // elements per vector load of x
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);  // chunks of VEC per thread
  __shared__ float red[ROWS][Red<RT>::SLOTS];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;
  const int stats_lane = mean_out ? 0 : RT;  // RT (no lane): statistics not wanted, null
  int buf = 0;

  // Grid-stride over blocks of ROWS rows. The loop bound is uniform across the CTA, so the
  // barriers inside the group sums are reached by every thread, including those past the last row.
  for (i64 row0 = (i64)blockIdx.x * ROWS; row0 < rows; row0 += (i64)gridDim.x * ROWS) {
    const i64 row = row0 + g;
    const bool ok = row < rows;
    const i64 b = ok ? row / N : 0, n = ok ? row - b * N : 0;
    const TX* xr = x + b * sxb + n * sxn;  // 64-bit offsets: B*N*D may pass 2^31
    float v[NCH][VEC];
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (ok && d0 < D) {
        load_f32<VECTOR>(xr, d0, D, v[c]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[c][j] = 0.f;
      }
    }
    float mu, rs;
    row_stats<D, RT, 1>(v, red[g], buf, t, g, eps, mu, rs);
    if (!ok) continue;
    if (t == stats_lane) {
      mean_out[row] = mu;
      rstd_out[row] = rs;
    }
    const i64 moff = MODE == MODE_TOKEN ? b * smb + n * smn : (MODE == MODE_SAMPLE ? b * smb : 0);
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (d0 >= D) continue;
      float sc[VEC], sh[VEC], o[VEC];
      load_f32<VECTOR>(scale + moff, d0, D, sc);
      load_f32<VECTOR>(shift + moff, d0, D, sh);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float xh = (v[c][j] - mu) * rs;
        o[j] = MODE == MODE_AFFINE ? xh * sc[j] + sh[j] : xh * (1.f + sc[j]) + sh[j];
      }
      store_f32<VECTOR>(y + row * D, d0, D, o);
    }
  }
}

// Two rows per row group (16-byte aligned rows, per-sample or affine modulation): each thread
// holds the same columns of two consecutive rows, so one barrier set reduces both rows (K = 2
// values per group_sum) and one load of a chunk's scale and shift serves both (half the L1
// modulation reads per row of adaln_fwd), with twice adaln_fwd's bytes of x in flight per thread.
// The rows stay packed (16 registers for two bf16 rows of 16 elements per thread) and are
// unpacked at each of their three reads (unpack_again: ptxas cannot keep the unpacked copies).
// Per row the same additions in the same order as adaln_fwd, but not bitwise its output: there
// the compiler contracts the mean into each subtraction (one FFMA), here it rounds the mean first
// (y differs by 2e-9 to 1.4e-8 relative); both are within fp32 rounding of a
// float64 reference.
// A pair is rows 2p, 2p + 1 of one sample (with N odd, a sample's last pair has one row), so
// both rows share the modulation. One CTA per block of ROWS pairs (the host launches one per
// block: B * ceil(N / 2) / ROWS CTAs); MINB as in adaln_fwd. LV as in adaln_fwd: 4 (16-bit x)
// loads 8 bytes of x per chunk, so fp32 y is one 16-byte store per chunk and row (a warp's
// store 512 consecutive bytes, whole sectors: half the L1 store sectors of two 16-byte stores
// 32 bytes apart per lane) and one load of scale and shift serves both rows.
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, int MINB = 1,
          int LV = 0>
__global__ void __launch_bounds__(RT * ROWS, MINB)
adaln_fwd_r2(const TX* __restrict__ x, i64 sxb, i64 sxn,
             const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
             TY* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
             i64 rows, i64 N, float eps) {
  static_assert(MODE != MODE_TOKEN, "per-token modulation has nothing to share between rows");
  constexpr int VEC = LV ? LV : 16 / (int)sizeof(TX);
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);
  __shared__ float red[ROWS][Red<RT>::SLOTS];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;
  const int stats_lane = mean_out ? 0 : RT;  // RT (no lane): statistics not wanted, null
  int buf = 0;

  const i64 per = (N + 1) / 2, pairs = rows / N * per;  // pairs per sample, in all
  const i64 p0 = (i64)blockIdx.x * ROWS;  // uniform: a CTA past the pairs leaves whole
  if (p0 >= pairs) return;
  const i64 p = p0 + g;
  const i64 b = p < pairs ? p / per : 0, n0 = p < pairs ? 2 * (p - b * per) : N;
  const i64 moff = MODE == MODE_SAMPLE ? b * smb : 0;
  const i64 row = b * N + n0;  // the pair's first row; the second is row + 1
  const bool ok[2] = {n0 < N, n0 + 1 < N};
  Raw<TX, VEC> xw[2][NCH];
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const TX* xr = x + b * sxb + (ok[k] ? n0 + k : 0) * sxn;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (ok[k] && d0 < D) load_raw(xr, d0, xw[k][c]);
      else zero_raw(xw[k][c]);
    }
  }
  // row_stats for both rows at once: the same sums per row, one group_sum of 2 values
  float s[2] = {0.f, 0.f}, mu[2], rs[2];
#pragma unroll
  for (int k = 0; k < 2; ++k)
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      float v[VEC];
      unpack(xw[k][c], v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) s[k] += v[j];
    }
  group_sum<RT, 1>(s, red[g], buf, t, g);
  buf ^= 1;
  float q[2] = {0.f, 0.f};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    mu[k] = s[k] * (1.f / D);
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      float v[VEC];
      unpack_again(xw[k][c], v);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float dv = v[j] - mu[k];
        if (d0 + j < D) q[k] += dv * dv;  // padded lanes left out: 0 - mu is not 0
      }
    }
  }
  group_sum<RT, 1>(q, red[g], buf, t, g);
  buf ^= 1;
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    rs[k] = rsqrtf(q[k] * (1.f / D) + eps);
    if (ok[k] && t == stats_lane) {
      mean_out[row + k] = mu[k];
      rstd_out[row + k] = rs[k];
    }
  }
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d0 = (c * RT + t) * VEC;
    if (d0 >= D) continue;
    if (!ok[0]) continue;
    // fp32 y from 16-bit x: a chunk's 8 outputs are two 16-byte stores, which must follow each
    // other (a half sector written now and its other half after another row's stores cost
    // 25%: measured), so that row's halves go together and the scale and shift of each half,
    // 8 registers, are loaded per row (the second row's from L1). Else one load of the
    // chunk's scale and shift serves both rows.
    constexpr bool HALVES = sizeof(TY) == 4 && VEC == 8;
    constexpr int SUB = HALVES ? 4 : VEC;
    float sc[SUB], sh[SUB];
    if (!HALVES) {
      load_f32<true>(scale + moff, d0, D, sc);
      load_f32<true>(shift + moff, d0, D, sh);
    }
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (!ok[k]) continue;
      float v[VEC];
      unpack_again(xw[k][c], v);
#pragma unroll
      for (int h = 0; h < VEC; h += SUB) {
        if (HALVES) {
          load_f32<true>(scale + moff, d0 + h, D, sc);
          load_f32<true>(shift + moff, d0 + h, D, sh);
        }
        float o[SUB];
#pragma unroll
        for (int j = 0; j < SUB; ++j) {
          const float xh = (v[h + j] - mu[k]) * rs[k];
          o[j] = MODE == MODE_AFFINE ? xh * sc[j] + sh[j] : xh * (1.f + sc[j]) + sh[j];
        }
        store_f32<true>(y + (row + k) * D, d0 + h, D, o);
      }
    }
  }
}

// Persistent, software-pipelined forward (16-byte aligned rows only; the host falls back to
// adaln_fwd otherwise). The CTA takes row blocks blockIdx.x, blockIdx.x + gridDim.x, ..., so the
// resident rows are one window sweeping the tensor (as a copy's are), not gridDim.x streams at
// far-apart addresses (a contiguous run per CTA: 2-6% slower at N = 65536, bf16 y).
// It issues the loads of its next row before reducing the current one, so every
// resident row group keeps one row of x in flight through its reductions and stores (adaln_fwd
// has none in flight while it reduces). The prefetched row stays packed (bf16: 8 registers per 16
// elements). Same arithmetic as adaln_fwd: bitwise the same output. MINB: resident CTAs per SM
// ptxas must allow (a register cap, as in adaln_bwd). LV: as in adaln_fwd.
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, int MINB = 1,
          int LV = 0>
__global__ void __launch_bounds__(RT * ROWS, MINB)
adaln_fwd_pf(const TX* __restrict__ x, i64 sxb, i64 sxn,
             const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
             TY* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
             i64 rows, i64 N, float eps) {
  constexpr int VEC = LV ? LV : 16 / (int)sizeof(TX);
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);
  const int stats_lane = mean_out ? 0 : RT;  // RT (no lane): statistics not wanted, null
  __shared__ float red[ROWS][Red<RT>::SLOTS];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;
  int buf = 0;

  // row blocks; this CTA owns s_begin, s_begin + stride, ... below s_end
  const i64 steps = (rows + ROWS - 1) / ROWS;
  const i64 s_begin = (i64)blockIdx.x, s_end = steps, stride = (i64)gridDim.x;

  auto fetch = [&](i64 row, Raw<TX, VEC> (&r)[NCH]) {
    const bool ok = row < rows;
    const i64 b = ok ? row / N : 0;
    const TX* xr = x + b * sxb + (ok ? row - b * N : 0) * sxn;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (ok && d0 < D) load_raw(xr, d0, r[c]);
      else zero_raw(r[c]);
    }
  };
  Raw<TX, VEC> cur[NCH], nxt[NCH];
  if (s_begin < s_end) fetch(s_begin * ROWS + g, cur);

  for (i64 s = s_begin; s < s_end; s += stride) {  // uniform bound: barriers are safe
    const i64 row = s * ROWS + g;
    if (s + stride < s_end) fetch(row + stride * ROWS, nxt);
    const bool ok = row < rows;
    const i64 b = ok ? row / N : 0, n = ok ? row - b * N : 0;

    float v[NCH][VEC];
#pragma unroll
    for (int c = 0; c < NCH; ++c) unpack(cur[c], v[c]);
    float mu, rs;
    row_stats<D, RT, ROWS>(v, red[g], buf, t, g, eps, mu, rs);

    if (ok) {
      if (t == stats_lane) {
        mean_out[row] = mu;
        rstd_out[row] = rs;
      }
      const i64 moff = MODE == MODE_TOKEN ? b * smb + n * smn : (MODE == MODE_SAMPLE ? b * smb : 0);
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d0 = (c * RT + t) * VEC;
        if (d0 >= D) continue;
        float sc[VEC], sh[VEC], o[VEC];
        load_f32<true>(scale + moff, d0, D, sc);
        load_f32<true>(shift + moff, d0, D, sh);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xh = (v[c][j] - mu) * rs;
          o[j] = MODE == MODE_AFFINE ? xh * sc[j] + sh[j] : xh * (1.f + sc[j]) + sh[j];
        }
        store_f32<true>(y + row * D, d0, D, o);
      }
    }
#pragma unroll
    for (int c = 0; c < NCH; ++c) cur[c] = nxt[c];
  }
}
