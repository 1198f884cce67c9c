// Fused AdaLN forward: y = LayerNorm(x) * (1 + scale) + shift, one pass over HBM.
//
// Layout: a CTA holds ROWS row groups of RT threads; each row group owns one row of x at a time
// and keeps it in registers (NCH chunks of VEC elements per thread), so x is read once and y
// written once. D, the dtypes and the mode are compile-time constants: every loop is unrolled
// and the row array stays in registers (no local memory).
#include "adaln_common.cuh"

// RIF (rows in flight, default 1): each row group loads RIF rows (rows row0 + r*ROWS + g) before
// the first reduction and reduces them together, so a thread has RIF times the bytes in flight
// and the CTA pays one pair of barriers per RIF rows. RIF = 1 is the measured 2026-12-01 kernel.
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, bool VECTOR,
          int RIF = 1>
__global__ void __launch_bounds__(RT * ROWS, 1)
adaln_fwd(const TX* __restrict__ x, i64 sxb, i64 sxn,          // x[b, n, d] = x[b*sxb + n*sxn + d]
          const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
          TY* __restrict__ y,                                  // contiguous [rows, D]
          float* __restrict__ mean_out, float* __restrict__ rstd_out,  // [rows] fp32
          i64 rows, i64 N, float eps) {
  constexpr int VEC = 16 / (int)sizeof(TX);             // elements per 16-byte load of x
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);  // chunks of VEC per thread
  __shared__ float red[ROWS][(RT > 32 ? RT / 32 : 1) * (RIF > 2 ? RIF : 2)];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;

  // Grid-stride over blocks of ROWS*RIF rows. The loop bound is uniform across the CTA, so the
  // barriers inside the group sums are reached by every thread, including those past the last row.
  for (i64 row0 = (i64)blockIdx.x * ROWS * RIF; row0 < rows;
       row0 += (i64)gridDim.x * ROWS * RIF) {
    i64 row[RIF], b[RIF], n[RIF];
    bool ok[RIF];
    float v[RIF][NCH][VEC];
    float s[RIF];
#pragma unroll
    for (int r = 0; r < RIF; ++r) {
      row[r] = row0 + r * ROWS + g;
      ok[r] = row[r] < rows;
      b[r] = ok[r] ? row[r] / N : 0;
      n[r] = ok[r] ? row[r] - b[r] * N : 0;
      const TX* xr = x + b[r] * sxb + n[r] * sxn;  // 64-bit offsets: B*N*D may pass 2^31
      s[r] = 0.f;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d0 = (c * RT + t) * VEC;
        if (ok[r] && d0 < D) {
          load_f32<VECTOR>(xr, d0, D, v[r][c]);
        } else {
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[r][c][j] = 0.f;
        }
#pragma unroll
        for (int j = 0; j < VEC; ++j) s[r] += v[r][c][j];
      }
    }
    float unused = 0.f;
    if constexpr (RIF == 1) group_sum2<RT>(s[0], unused, red[g], t);
    else group_sumK<RT, RIF>(s, red[g], t);
    float mu[RIF], q[RIF];
#pragma unroll
    for (int r = 0; r < RIF; ++r) mu[r] = s[r] * (1.f / D);

    // Two-pass variance from registers: sum of squared deviations, padded lanes left out
    // (they hold 0, and 0 - mu is not 0).
#pragma unroll
    for (int r = 0; r < RIF; ++r) {
      q[r] = 0.f;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d0 = (c * RT + t) * VEC;
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float dv = v[r][c][j] - mu[r];
          if (d0 + j < D) q[r] += dv * dv;
        }
      }
    }
    unused = 0.f;
    if constexpr (RIF == 1) group_sum2<RT>(q[0], unused, red[g], t);
    else group_sumK<RT, RIF>(q, red[g], t);

#pragma unroll
    for (int r = 0; r < RIF; ++r) {
      const float rs = rsqrtf(q[r] * (1.f / D) + eps);
      if (ok[r] && t == 0) {
        mean_out[row[r]] = mu[r];
        rstd_out[row[r]] = rs;
      }
      if (!ok[r]) continue;

      const i64 moff = MODE == MODE_TOKEN ? b[r] * smb + n[r] * smn
                                          : (MODE == MODE_SAMPLE ? b[r] * smb : 0);
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        const int d0 = (c * RT + t) * VEC;
        if (d0 >= D) continue;
        float sc[VEC], sh[VEC], o[VEC];
        load_f32<VECTOR>(scale + moff, d0, D, sc);
        load_f32<VECTOR>(shift + moff, d0, D, sh);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float xh = (v[r][c][j] - mu[r]) * rs;
          o[j] = MODE == MODE_AFFINE ? xh * sc[j] + sh[j] : xh * (1.f + sc[j]) + sh[j];
        }
        store_f32<VECTOR>(y + row[r] * D, d0, D, o);
      }
    }
  }
}
