// Backward of the fused epilogues (epilogue_common.cuh has the layout and the flags F).
// Per row, with xh = (x_new - mean) * rstd, a = xh [* w + b], g_o = d_normed:
//   dshift = g_o, dscale = g_o * a, g_a = g_o [* (1 + scale)], dbias = g_a, dweight = g_a * xh,
//   g_x = g_a [* w], d_total = d_x_new + rstd * (g_x - mean(g_x) - xh * mean(g_x * xh))
//   (RMSNorm: no mean(g_x) term), dx = d_total, dy = d_total [* gate], dgate = d_total * y.
// Gradients of per-sample and [D] operands are sums over rows: each CTA keeps its columns' sums in
// registers over its rows and writes one partial row per slot; epilogue_finalize adds the partial
// rows in a fixed order, so every gradient is bitwise reproducible (no atomics).
#include "epilogue_common.cuh"

template <typename TX, typename TO, int D, int RT, int F, bool VECTOR>
__global__ void __launch_bounds__(RT, EP_MINB)
epilogue_bwd(const TX* __restrict__ xs,                       // saved x_new (or x): [B * N, D]
             const TX* __restrict__ y, i64 syb, i64 syn,       // the residual's y (EP_GATE only)
             const float* __restrict__ gate, i64 sgb, i64 sgn,
             const float* __restrict__ scale, i64 smb, i64 smn,
             const float* __restrict__ weight, const float* __restrict__ bias,
             const float* __restrict__ mean, const float* __restrict__ rstd,
             const TX* __restrict__ d_xnew,                    // [B * N, D] (EP_RESID only)
             const TO* __restrict__ d_out,                     // [B * N, D]
             TX* __restrict__ dx, TX* __restrict__ dy,          // [B * N, D]; dy: EP_RESID only
             float* __restrict__ dgate_tok, float* __restrict__ dscale_tok,
             float* __restrict__ dshift_tok,                   // [B * N, D] per-token gradients
             float* __restrict__ part,                         // [B, chunks, Q, D] partial sums
             i64 N, i64 rows_per_cta) {
  constexpr int VEC = 16 / (int)sizeof(TX);
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);
  constexpr bool GATE = Has<F, EP_GATE>::v, GTOK = Has<F, EP_GATE_TOK>::v;
  constexpr bool MOD = Has<F, EP_MOD>::v, MTOK = Has<F, EP_MOD_TOK>::v;
  constexpr bool W = Has<F, EP_WEIGHT>::v, BIAS = Has<F, EP_BIAS>::v;
  constexpr bool RESID = Has<F, EP_RESID>::v, RMS = Has<F, EP_RMS>::v;
  using S = Slots<F>;
  // EP_BWD_SUMS: the column sums in shared memory ([q][c][j][t]: a warp's words in distinct
  // banks; thread t alone touches its own), not in registers, when they fit. EP_BWD_SMEM: the
  // per-sample and [D] operand rows (gate, scale, weight, bias) there too, when they fit beside.
  // Otherwise (and by default) both are held in registers over the rows.
  constexpr int PG = GATE && !GTOK, PS = MOD && !MTOK, PW = W, PB = BIAS && MOD;
  constexpr int P = PG + PS + PW + PB, ROW_BYTES = NCH * RT * VEC * 4, ROOM = 47 * 1024;
  constexpr bool SUMS_SH = EP_BWD_SUMS && S::Q > 0 && S::Q * ROW_BYTES <= ROOM;
  constexpr bool PARK = EP_BWD_SMEM && P > 0 && (P + (SUMS_SH ? S::Q : 0)) * ROW_BYTES <= ROOM;
  constexpr int IG = 0, IS = PG, IW = PG + PS, IB = PG + PS + PW;  // park slots
  __shared__ float red[Red<RT>::SLOTS];
  __shared__ Park<PARK ? P : 0, PARK ? RT : 1, PARK ? NCH : 1, VEC> park;
  const int t = threadIdx.x;
  const Span s = cta_span(N, rows_per_cta);
  int buf = 0;

  float g[NCH][VEC], sc[NCH][VEC], w[NCH][VEC], bb[NCH][VEC];
  if constexpr (GATE && !GTOK) load_row<VECTOR, float, D, RT>(gate + s.b * sgb, t, g);
  if constexpr (MOD && !MTOK) load_row<VECTOR, float, D, RT>(scale + s.b * smb, t, sc);
  if constexpr (W) load_row<VECTOR, float, D, RT>(weight, t, w);
  if constexpr (BIAS && MOD) load_row<VECTOR, float, D, RT>(bias, t, bb);  // a, for dscale
  if constexpr (PARK) {
    if constexpr (PG) park.put(IG, t, g);
    if constexpr (PS) park.put(IS, t, sc);
    if constexpr (PW) park.put(IW, t, w);
    if constexpr (PB) park.put(IB, t, bb);
  }
  __shared__ float sums_sh[SUMS_SH ? S::Q : 1][SUMS_SH ? NCH : 1][VEC][SUMS_SH ? RT : 1];
  float acc[S::Q > 0 && !SUMS_SH ? S::Q : 1][NCH][VEC];
  const auto sum = [&](int q, int c, int j) -> float& {  // column sum q, chunk c, lane j
    if constexpr (SUMS_SH) return sums_sh[q][c][j][t];
    else return acc[q][c][j];
  };
#pragma unroll
  for (int q = 0; q < S::Q; ++q) {
    if constexpr (SUMS_SH) {
#pragma unroll
      for (int c = 0; c < NCH; ++c)
#pragma unroll
        for (int j = 0; j < VEC; ++j) sum(q, c, j) = 0.f;
    } else {
      zero_row(acc[q]);
    }
  }

  // EP_BWD_PF (vector loads): row n + 1's tensors (d_x_new and y among them) are loaded, packed,
  // before row n's math, so a CTA keeps two rows of loads in flight.
  constexpr bool PF = EP_BWD_PF && VECTOR;
  Raw<TX, VEC> xr[NCH], dnr[NCH], yr[NCH];
  Raw<TO, VEC> gr[NCH];
  float mu_next = 0.f, rs_next = 0.f;
  const auto fetch = [&](i64 n) {  // row n's packed words and statistics into the *_next slots
    const i64 row = s.b * N + n;
    if constexpr (!RMS) mu_next = mean[row];
    rs_next = rstd[row];
    load_row_raw<TX, D, RT>(xs + row * D, t, xr);
    load_row_raw<TO, D, RT>(d_out + row * D, t, gr);
    if constexpr (PF && RESID) load_row_raw<TX, D, RT>(d_xnew + row * D, t, dnr);
    if constexpr (PF && RESID && GATE) load_row_raw<TX, D, RT>(y + s.b * syb + n * syn, t, yr);
  };
  if constexpr (PF) {
    if (s.n0 < s.n1) fetch(s.n0);  // uniform across the CTA
  }

  for (i64 n = s.n0; n < s.n1; ++n) {  // no rows (a CTA past N) still writes zero partials
    const i64 row = s.b * N + n;
    float mu, rs;
    float xh[NCH][VEC], go[NCH][VEC];
    float dn[NCH][VEC], yv[NCH][VEC];  // d_x_new and y (EP_RESID; y with EP_GATE)
    if constexpr (PF) {
      mu = mu_next;
      rs = rs_next;
#pragma unroll
      for (int c = 0; c < NCH; ++c) {
        unpack(xr[c], xh[c]);
        unpack(gr[c], go[c]);
        if constexpr (RESID) unpack(dnr[c], dn[c]);
        if constexpr (RESID && GATE) unpack(yr[c], yv[c]);
      }
      if (n + 1 < s.n1) fetch(n + 1);  // uniform across the CTA
    } else {
      mu = RMS ? 0.f : mean[row];
      rs = rstd[row];
      load_row<VECTOR, TX, D, RT>(xs + row * D, t, xh);
      load_row<VECTOR, TO, D, RT>(d_out + row * D, t, go);
    }
    if constexpr (PARK) {
      if constexpr (PG) park.get(IG, t, g);
      if constexpr (PS) park.get(IS, t, sc);
      if constexpr (PW) park.get(IW, t, w);
      if constexpr (PB) park.get(IB, t, bb);
    }
    if constexpr (MOD && MTOK) load_row<VECTOR, float, D, RT>(scale + s.b * smb + n * smn, t, sc);
    float dsc[NCH][VEC];
    float r[2] = {0.f, 0.f};  // sum(g_x), sum(g_x * xh) over the row
#pragma unroll
    for (int c = 0; c < NCH; ++c)
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const float h = (xh[c][j] - mu) * rs;
        float a = h;
        if constexpr (W) a *= w[c][j];
        if constexpr (BIAS && MOD) a += bb[c][j];  // a feeds dscale only
        float ga = go[c][j];
        if constexpr (MOD) {
          dsc[c][j] = ga * a;
          if constexpr (!MTOK) {
            sum(S::SCALE, c, j) += dsc[c][j];
            sum(S::SHIFT, c, j) += ga;
          }
          ga *= 1.f + sc[c][j];
        }
        if constexpr (BIAS) sum(S::BIAS, c, j) += ga;
        if constexpr (W) {
          sum(S::WEIGHT, c, j) += ga * h;
          ga *= w[c][j];
        }
        const bool in = (c * RT + t) * VEC + j < D;  // padded lanes hold -mu * rs, not 0
        xh[c][j] = in ? h : 0.f;
        go[c][j] = in ? ga : 0.f;  // go now holds g_x
        r[0] += go[c][j];
        r[1] += go[c][j] * xh[c][j];
      }
    if constexpr (MOD && MTOK) {
      store_row<VECTOR, float, D, RT>(dscale_tok + row * D, t, dsc);
      // dshift = d_normed: a second read of it from L1/L2, not a register copy of the row
      float d2[NCH][VEC];
      load_row<VECTOR, TO, D, RT>(d_out + row * D, t, d2);
      store_row<VECTOR, float, D, RT>(dshift_tok + row * D, t, d2);
    }
    group_sum<RT, 1>(r, red, buf, t, 0);
    buf ^= 1;
    const float m1 = RMS ? 0.f : r[0] * (1.f / D), m2 = r[1] * (1.f / D);
#pragma unroll
    for (int c = 0; c < NCH; ++c)
#pragma unroll
      for (int j = 0; j < VEC; ++j) xh[c][j] = rs * (go[c][j] - m1 - xh[c][j] * m2);
    if constexpr (RESID) {
      if constexpr (!PF) load_row<VECTOR, TX, D, RT>(d_xnew + row * D, t, dn);
#pragma unroll
      for (int c = 0; c < NCH; ++c)
#pragma unroll
        for (int j = 0; j < VEC; ++j) xh[c][j] += dn[c][j];  // xh now holds d_total
    }
    store_row<VECTOR, TX, D, RT>(dx + row * D, t, xh);
    if constexpr (RESID) {
      if constexpr (GATE) {
        if constexpr (!PF) load_row<VECTOR, TX, D, RT>(y + s.b * syb + n * syn, t, yv);
        if constexpr (GTOK) load_row<VECTOR, float, D, RT>(gate + s.b * sgb + n * sgn, t, g);
#pragma unroll
        for (int c = 0; c < NCH; ++c)
#pragma unroll
          for (int j = 0; j < VEC; ++j) {
            const float dg = xh[c][j] * yv[c][j];
            if constexpr (GTOK) yv[c][j] = dg;
            else sum(S::GATE, c, j) += dg;
            xh[c][j] *= g[c][j];
          }
        if constexpr (GTOK) store_row<VECTOR, float, D, RT>(dgate_tok + row * D, t, yv);
      }
      store_row<VECTOR, TX, D, RT>(dy + row * D, t, xh);
    }
  }
  if constexpr (S::Q > 0) {
    float* p = part + ((i64)s.b * gridDim.x + blockIdx.x) * S::Q * D;
#pragma unroll
    for (int q = 0; q < S::Q; ++q) {
      if constexpr (SUMS_SH) {
        float v[NCH][VEC];
#pragma unroll
        for (int c = 0; c < NCH; ++c)
#pragma unroll
          for (int j = 0; j < VEC; ++j) v[c][j] = sum(q, c, j);
        store_row<VECTOR, float, D, RT>(p + q * D, t, v);
      } else {
        store_row<VECTOR, float, D, RT>(p + q * D, t, acc[q]);
      }
    }
  }
}

// out_q[b, d] = sum over chunks c of part[b, c, q, d], c in order (one thread per column), for
// slot q's own output out_q (o0 .. o4); slots whose bit is set in `sum_b` (weight, bias: one row
// for the whole batch) also add over b in order, into out_q[d]. Grid (ceil(D / 128), Q, B).
extern "C" __global__ void __launch_bounds__(128)
epilogue_finalize(const float* __restrict__ part, float* o0, float* o1, float* o2, float* o3,
                  float* o4, int B, int C, int Q, int D, int sum_b) {
  const int d = blockIdx.x * 128 + threadIdx.x, q = blockIdx.y, b = blockIdx.z;
  const bool all_b = (sum_b >> q) & 1;
  if (d >= D || (all_b && b > 0)) return;
  float acc = 0.f;
  for (int bi = all_b ? 0 : b; bi < (all_b ? B : b + 1); ++bi)
    for (int c = 0; c < C; ++c) acc += part[(((i64)bi * C + c) * Q + q) * D + d];
  float* out = q == 0 ? o0 : q == 1 ? o1 : q == 2 ? o2 : q == 3 ? o3 : o4;
  out[(i64)b * D + d] = acc;
}
