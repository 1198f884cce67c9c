// Fused AdaLN forward: y = LayerNorm(x) * (1 + scale) + shift, one pass over HBM.
//
// Layout: a CTA holds ROWS row groups of RT threads; each row group owns one row of x at a time
// and keeps it in registers (NCH chunks of VEC elements per thread), so x is read once and y
// written once. D, the dtypes and the mode are compile-time constants: every loop is unrolled
// and the row array stays in registers (no local memory).
#include "adaln_common.cuh"

template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, bool VECTOR>
__global__ void __launch_bounds__(RT * ROWS, 1)
adaln_fwd(const TX* __restrict__ x, i64 sxb, i64 sxn,          // x[b, n, d] = x[b*sxb + n*sxn + d]
          const TM* __restrict__ scale, const TM* __restrict__ shift, i64 smb, i64 smn,
          TY* __restrict__ y,                                  // contiguous [rows, D]
          float* __restrict__ mean_out, float* __restrict__ rstd_out,  // [rows] fp32
          i64 rows, i64 N, float eps) {
  constexpr int VEC = 16 / (int)sizeof(TX);             // elements per 16-byte load of x
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);  // chunks of VEC per thread
  __shared__ float red[ROWS][RT > 32 ? 2 * (RT / 32) : 2];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;

  // Grid-stride over blocks of ROWS rows. The loop bound is uniform across the CTA, so the
  // barriers inside group_sum2 are reached by every thread, including those past the last row.
  for (i64 row0 = (i64)blockIdx.x * ROWS; row0 < rows; row0 += (i64)gridDim.x * ROWS) {
    const i64 row = row0 + g;
    const bool ok = row < rows;
    const i64 b = ok ? row / N : 0;
    const i64 n = ok ? row - b * N : 0;
    const TX* xr = x + b * sxb + n * sxn;  // 64-bit offsets: B*N*D may pass 2^31

    float v[NCH][VEC];
    float s = 0.f, unused = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (ok && d0 < D) {
        load_f32<VECTOR>(xr, d0, D, v[c]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) v[c][j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) s += v[c][j];
    }
    group_sum2<RT>(s, unused, red[g], t);
    const float mu = s * (1.f / D);

    // Two-pass variance from registers: sum of squared deviations, padded lanes left out
    // (they hold 0, and 0 - mu is not 0).
    float q = 0.f;
    unused = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float dv = v[c][j] - mu;
        if (d0 + j < D) q += dv * dv;
      }
    }
    group_sum2<RT>(q, unused, red[g], t);
    const float rs = rsqrtf(q * (1.f / D) + eps);
    if (ok && t == 0) {
      mean_out[row] = mu;
      rstd_out[row] = rs;
    }
    if (!ok) continue;

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
