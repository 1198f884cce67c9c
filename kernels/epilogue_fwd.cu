// Forward of the fused epilogues (epilogue_common.cuh has the layout and the flags F).
//   residual_norm (EP_RESID): x_new = round_TX(x + y * gate), normed = LN(x_new) [* w + b]
//                             [* (1 + scale) + shift], rounded to TO once.
//   rms_norm (EP_RMS):        normed = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps).
// The statistics are those of the rounded x_new (what the next block reads), in fp32, two-pass.
#include "epilogue_common.cuh"

template <typename TX, typename TO, int D, int RT, int F, bool VECTOR>
__global__ void __launch_bounds__(RT, RT <= 512 ? 2 : 1)  // D = 5120: 2 would spill
epilogue_fwd(const TX* __restrict__ x, i64 sxb, i64 sxn,        // x[b, n, :] = x + b*sxb + n*sxn
             const TX* __restrict__ y, i64 syb, i64 syn,
             const float* __restrict__ gate, i64 sgb, i64 sgn,
             const float* __restrict__ scale, const float* __restrict__ shift, i64 smb, i64 smn,
             const float* __restrict__ weight, const float* __restrict__ bias,  // [D]
             TX* __restrict__ x_new, TO* __restrict__ out,       // contiguous [B * N, D]
             float* __restrict__ mean_out, float* __restrict__ rstd_out,  // [B * N]
             i64 N, i64 rows_per_cta, float eps) {
  constexpr int VEC = 16 / (int)sizeof(TX);
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);
  constexpr bool GATE = Has<F, EP_GATE>::v, GTOK = Has<F, EP_GATE_TOK>::v;
  constexpr bool MOD = Has<F, EP_MOD>::v, MTOK = Has<F, EP_MOD_TOK>::v;
  constexpr bool W = Has<F, EP_WEIGHT>::v, BIAS = Has<F, EP_BIAS>::v;
  constexpr bool RESID = Has<F, EP_RESID>::v, RMS = Has<F, EP_RMS>::v;
  __shared__ float red[Red<RT>::SLOTS];
  const int t = threadIdx.x;
  const Span s = cta_span(N, rows_per_cta);
  if (s.n0 >= N) return;  // uniform across the CTA
  int buf = 0;

  float g[NCH][VEC], sc[NCH][VEC], sh[NCH][VEC], w[NCH][VEC], bb[NCH][VEC];
  if constexpr (GATE && !GTOK) load_row<VECTOR, float, D, RT>(gate + s.b * sgb, t, g);
  if constexpr (MOD && !MTOK) {
    load_row<VECTOR, float, D, RT>(scale + s.b * smb, t, sc);
    load_row<VECTOR, float, D, RT>(shift + s.b * smb, t, sh);
  }
  if constexpr (W) load_row<VECTOR, float, D, RT>(weight, t, w);
  if constexpr (BIAS) load_row<VECTOR, float, D, RT>(bias, t, bb);

  // Software pipeline: row n + 1's x and y are loaded before row n's reductions, so a CTA keeps
  // two rows of loads in flight (64-bit offsets: B * N * D may pass 2^31). With vector loads the
  // prefetched row stays in its 16-byte words until used, half the registers of its fp32 copy.
  float xc[NCH][VEC], yc[NCH][VEC];
  Raw<TX, VEC> xr[NCH], yr[NCH];
  if constexpr (VECTOR) {
    load_row_raw<TX, D, RT>(x + s.b * sxb + s.n0 * sxn, t, xr);
    if constexpr (RESID) load_row_raw<TX, D, RT>(y + s.b * syb + s.n0 * syn, t, yr);
  } else {
    load_row<VECTOR, TX, D, RT>(x + s.b * sxb + s.n0 * sxn, t, xc);
    if constexpr (RESID) load_row<VECTOR, TX, D, RT>(y + s.b * syb + s.n0 * syn, t, yc);
  }
  for (i64 n = s.n0; n < s.n1; ++n) {
    const i64 row = s.b * N + n;
    float v[NCH][VEC], yv[NCH][VEC];
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      if constexpr (VECTOR) {
        unpack(xr[c], v[c]);
        if constexpr (RESID) unpack(yr[c], yv[c]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          v[c][j] = xc[c][j];
          yv[c][j] = yc[c][j];
        }
      }
    }
    if (n + 1 < s.n1) {  // uniform across the CTA
      if constexpr (VECTOR) {
        load_row_raw<TX, D, RT>(x + s.b * sxb + (n + 1) * sxn, t, xr);
        if constexpr (RESID) load_row_raw<TX, D, RT>(y + s.b * syb + (n + 1) * syn, t, yr);
      } else {
        load_row<VECTOR, TX, D, RT>(x + s.b * sxb + (n + 1) * sxn, t, xc);
        if constexpr (RESID) load_row<VECTOR, TX, D, RT>(y + s.b * syb + (n + 1) * syn, t, yc);
      }
    }
    if constexpr (RESID) {
      if constexpr (GATE && GTOK) load_row<VECTOR, float, D, RT>(gate + s.b * sgb + n * sgn, t, g);
#pragma unroll
      for (int c = 0; c < NCH; ++c)
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const float a = GATE ? v[c][j] + yv[c][j] * g[c][j] : v[c][j] + yv[c][j];
          v[c][j] = to_f32(from_f32<TX>(a));  // the residual as stored; padded lanes stay 0
        }
      store_row<VECTOR, TX, D, RT>(x_new + row * D, t, v);
    }
    float mu = 0.f, rs;
    if constexpr (RMS) {
      float q[1] = {0.f};
#pragma unroll
      for (int c = 0; c < NCH; ++c)
#pragma unroll
        for (int j = 0; j < VEC; ++j) q[0] += v[c][j] * v[c][j];
      group_sum<RT, 1>(q, red, buf, t, 0);
      buf ^= 1;
      rs = rsqrtf(q[0] * (1.f / D) + eps);
    } else {
      row_stats<D, RT, 1>(v, red, buf, t, 0, eps, mu, rs);
      if (t == 0) mean_out[row] = mu;
    }
    if (t == 0) rstd_out[row] = rs;
    if constexpr (MOD && MTOK) {
      load_row<VECTOR, float, D, RT>(scale + s.b * smb + n * smn, t, sc);
      load_row<VECTOR, float, D, RT>(shift + s.b * smb + n * smn, t, sh);
    }
#pragma unroll
    for (int c = 0; c < NCH; ++c)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        float a = (v[c][j] - mu) * rs;
        if constexpr (W) a *= w[c][j];
        if constexpr (BIAS) a += bb[c][j];
        if constexpr (MOD) a = a * (1.f + sc[c][j]) + sh[c][j];
        v[c][j] = a;
      }
    store_row<VECTOR, TO, D, RT>(out + row * D, t, v);
  }
}
