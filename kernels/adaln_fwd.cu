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
// MINB: resident CTAs per SM ptxas must allow (a register cap). NAMED: each row group's
// reductions wait on its own named barrier, else on the CTA's (docs/perf-notes.md, round 4).
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, bool VECTOR,
          int LV = 0, int MINB = 1, bool NAMED = false>
__global__ void __launch_bounds__(RT * ROWS, MINB)
adaln_fwd(const TX* __restrict__ x, i64 sxb, i64 sxn,          // x[b, n, d] = x[b*sxb + n*sxn + d]
          const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
          TY* __restrict__ y,                                  // contiguous [rows, D]
          float* __restrict__ mean_out, float* __restrict__ rstd_out,  // [rows] fp32
          i64 rows, i64 N, float eps) {
  constexpr int VEC = LV ? LV : 16 / (int)sizeof(TX);   // elements per vector load of x
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);  // chunks of VEC per thread
  __shared__ float red[ROWS][Red<RT>::SLOTS];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;
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
    row_stats<D, RT, NAMED ? ROWS : 1>(v, red[g], buf, t, g, eps, mu, rs);
    if (!ok) continue;
    if (t == 0) {
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

// Persistent, software-pipelined forward (16-byte aligned rows only; the host falls back to
// adaln_fwd otherwise). Each CTA walks a contiguous run of row blocks and issues the loads of its
// next row before reducing the current one, so every resident row group keeps one row of x in
// flight through its reductions and stores (adaln_fwd has none in flight while it reduces). The
// prefetched row stays packed (bf16: 8 registers per 16 elements). MREG: per-sample or affine
// modulation is held in registers, reloaded only when the row group's sample changes, instead of
// reading 8 * D bytes from L1/L2 per row. Same arithmetic as adaln_fwd: bitwise the same output.
// MINB: resident CTAs per SM ptxas must allow (a register cap, as in adaln_bwd). LV: as in
// adaln_fwd. ILV: the CTA takes row blocks blockIdx.x, blockIdx.x + gridDim.x, ... instead of a
// contiguous run, so the resident rows are one window sweeping the tensor (as a copy's are), not
// gridDim.x streams at far-apart addresses.
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, bool MREG,
          int MINB = 1, int LV = 0, bool ILV = false>
__global__ void __launch_bounds__(RT * ROWS, MINB)
adaln_fwd_pf(const TX* __restrict__ x, i64 sxb, i64 sxn,
             const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
             TY* __restrict__ y, float* __restrict__ mean_out, float* __restrict__ rstd_out,
             i64 rows, i64 N, float eps) {
  constexpr int VEC = LV ? LV : 16 / (int)sizeof(TX);
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);
  constexpr bool KEEP = MREG && MODE != MODE_TOKEN;
  __shared__ float red[ROWS][Red<RT>::SLOTS];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;
  int buf = 0;

  // row blocks; this CTA owns s_begin, s_begin + stride, ... below s_end
  const i64 steps = (rows + ROWS - 1) / ROWS;
  const i64 per = (steps + gridDim.x - 1) / gridDim.x;
  const i64 s_begin = ILV ? (i64)blockIdx.x : min((i64)blockIdx.x * per, steps);
  const i64 s_end = ILV ? steps : min(s_begin + per, steps);
  const i64 stride = ILV ? (i64)gridDim.x : 1;

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
  float ksc[KEEP ? NCH : 1][VEC], ksh[KEEP ? NCH : 1][VEC];
  i64 kept = -1;  // the sample whose modulation ksc/ksh hold

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
      if (t == 0) {
        mean_out[row] = mu;
        rstd_out[row] = rs;
      }
      const i64 moff = MODE == MODE_TOKEN ? b * smb + n * smn : (MODE == MODE_SAMPLE ? b * smb : 0);
      if (KEEP && kept != (MODE == MODE_SAMPLE ? b : 0)) {
        kept = MODE == MODE_SAMPLE ? b : 0;
#pragma unroll
        for (int c = 0; c < (KEEP ? NCH : 0); ++c) {
          const int d0 = (c * RT + t) * VEC;
          if (d0 < D) {
            load_f32<true>(scale + moff, d0, D, ksc[c]);
            load_f32<true>(shift + moff, d0, D, ksh[c]);
          }
        }
      }
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d0 = (c * RT + t) * VEC;
        if (d0 >= D) continue;
        float sc[VEC], sh[VEC], o[VEC];
        if (KEEP) {
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            sc[j] = ksc[KEEP ? c : 0][j];
            sh[j] = ksh[KEEP ? c : 0][j];
          }
        } else {
          load_f32<true>(scale + moff, d0, D, sc);
          load_f32<true>(shift + moff, d0, D, sh);
        }
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
