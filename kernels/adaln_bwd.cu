// Fused AdaLN backward. With xhat = (x - mean) * rstd and m = (1 + scale) (or weight):
//   g      = dy * m
//   dx     = rstd * (g - mean_d(g) - xhat * mean_d(g * xhat))
//   dscale = sum over the sample's rows of dy * xhat      (dweight: over all rows)
//   dshift = sum over the sample's rows of dy             (dbias:   over all rows)
// Two designs share the row kernel below:
//   "fused":  adaln_bwd<..., ACCUM=true> on a persistent grid (chunks, groups). Each CTA walks a
//             contiguous run of rows inside ONE group (a sample, or all rows for the affine LN),
//             reads x and dy once, writes dx, and keeps the column sums in fp32 registers. It then
//             writes one fp32 partial row per CTA; adaln_bwd_finalize_t adds the partials in a
//             fixed order. No atomics: the gradients are bitwise reproducible.
//   "dtile":  the paper's design. adaln_bwd<..., ACCUM=false> writes dx only, then
//             adaln_bwd_dtile re-reads x and dy on a (d_tile, n_tile) grid with each thread pinned
//             to one feature column (coalesced across the warp), and the same finalize.
#include "adaln_common.cuh"
#include "adaln_bwd_reduce.cu"  // the D-tile pass and the finalize (partial rows -> gradients)

// MINB (default 1): resident CTAs per SM that ptxas must allow (__launch_bounds__' second
// argument), i.e. a register cap of 65536 / (MINB * RT * ROWS) per thread.
// SACC (default false): the column sums of dy*xhat and dy live in shared memory, each slot owned
// by one thread (no barriers; the same fp32 additions in the same order as in registers, so a
// CTA's partial row is bitwise the register version's), freeing 2 registers per element.
// PF (default false; VECTOR only): the loads of the CTA's next row (x, dy, mean, rstd) are issued
// before the current row is reduced and stay packed in registers, so a row is always in flight.
// MSH (default false; not per token): the multiplier m = 1 + scale of the CTA's sample lives in
// shared memory, each slot written and read by one thread (no barrier), not in 16 registers.
// DYN (default false): those shared arrays in dynamic shared memory (the launch passes their
// bytes: multiplier rows, then column-sum rows), so they may pass the 48 KB of static shared
// memory (D = 5120: 40 KB of sums + 20 KB of multiplier).
// SV (default false): those shared slots in groups of 4 per thread (16-byte words: one LDS.128 /
// STS.128 instead of four scalar accesses; a warp's word is still 512 consecutive bytes, so no
// bank conflicts), the same additions in the same order: bitwise the same rows and sums.
// RM (default false; PF only): the second pass recomputes x-hat and dy from the current row's
// packed words (kept until the end of the row) instead of holding them unpacked through the row
// reduction: 16 fewer live registers at 16 elements per thread (room for SV at D = 3072 and
// 5120), the same arithmetic, so the same bits.
// Fixed designs, no template switch (each measured faster than its alternative):
// - Aligned (VECTOR) launches take the group's row blocks chunk, chunk + chunks, ..., so the
//   resident rows sweep the group as one window (as in adaln_fwd_pf); the unaligned fallback
//   takes a contiguous run (interleaved, it spilled 4 bytes on sm_80 at D = 4100, fp32 dy). dx
//   is the same either way; a CTA's column sums cover other rows, so dscale and dshift round
//   differently (still deterministic).
// - Accumulating, non-token launches let their finalize, launched as a programmatic dependent
//   (sm_90), start once every CTA has left its row loop, so the finalize's launch and ramp
//   overlap our tail (1.7 us per backward, median over 120 shapes).
// - With PF the CTA's first row is fetched before the multiplier is loaded and stored to shared
//   memory, so its DRAM latency is not paid after the multiplier's (-0.4 to -0.6 us per
//   backward at N = 4096).
// - Rows that are a whole number of chunks (D % (VEC * RT) == 0, every Wan width) drop the
//   per-element column tests, and per-sample or per-token groups (a group is a sample) find a
//   row's sample without a 64-bit division: the same arithmetic, 31% fewer instructions per row
//   block at D = 1536 (+3.5 to +7.7% at N = 65536, bf16 dy).
template <typename TX, typename TM, typename TY, int D, int RT, int ROWS, int MODE, bool VECTOR,
          bool ACCUM, int MINB = 1, bool SACC = false, bool PF = false, bool MSH = false,
          bool DYN = false, bool SV = false, bool RM = false>
__global__ void __launch_bounds__(RT * ROWS, MINB)
adaln_bwd(const TX* __restrict__ x, i64 sxb, i64 sxn, const TY* __restrict__ dy,  // dy: [rows, D]
          const TM* __restrict__ scale, i64 smb, i64 smn,
          const float* __restrict__ mean, const float* __restrict__ rstd,
          TX* __restrict__ dx,                                       // contiguous [rows, D]
          TM* __restrict__ dscale_tok, TM* __restrict__ dshift_tok,  // MODE_TOKEN: [rows, D]
          float* __restrict__ part_scale, float* __restrict__ part_shift,  // [groups, chunks, D]
          i64 rows_per_group, i64 N) {
  constexpr int VEC = 16 / (int)sizeof(TX);
  constexpr int NCH = (D + VEC * RT - 1) / (VEC * RT);
  __shared__ float red[ROWS][Red<RT>::SLOTS];
  const int t = threadIdx.x % RT;
  const int g = threadIdx.x / RT;
  const int chunk = blockIdx.x, chunks = gridDim.x;
  const i64 group = blockIdx.y;

  // This CTA's rows inside its group (may be none: it still writes zeros): every chunks-th block
  // of ROWS rows (ILV, aligned launches), or a contiguous run.
  constexpr bool ILV = VECTOR;
  const i64 per = (rows_per_group + chunks - 1) / chunks;
  const i64 g0 = group * rows_per_group;
  const i64 r_begin = g0 + min((i64)chunk * (ILV ? ROWS : per), rows_per_group);
  const i64 r_end = g0 + (ILV ? rows_per_group : min((i64)(chunk + 1) * per, rows_per_group));
  const i64 step = ILV ? (i64)chunks * ROWS : ROWS;
  // FULL: every element of a padded row is a column (no tests); a row's sample is its group
  // unless the modulation is affine (one group of all rows)
  constexpr bool FULL = D % (VEC * RT) == 0;
  auto sample_of = [&](i64 row) -> i64 {
    if constexpr (MODE != MODE_AFFINE) return group;
    return row / N;
  };
  static_assert(!PF || VECTOR, "prefetch needs the 16-byte layout");
  static_assert(!RM || PF, "rematerialising needs the packed row");
  // One row's loads: x and dy packed (raw 16-byte words), mean and rstd.
  struct RowIn {
    Raw<TX, VEC> x[NCH];
    Raw<TY, VEC> dy[NCH];
    float mu, rs;
  };
  auto fetch = [&](i64 row, RowIn& in) {
    const bool ok = row < r_end;
    const i64 b = ok ? sample_of(row) : 0, n = ok ? row - b * N : 0;
    in.mu = ok ? mean[row] : 0.f;
    in.rs = ok ? rstd[row] : 0.f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (ok && (FULL || d0 < D)) {
        load_raw(x + b * sxb + n * sxn, d0, in.x[c]);
        load_raw(dy + row * D, d0, in.dy[c]);
      } else {
        zero_raw(in.x[c]);
        zero_raw(in.dy[c]);
      }
    }
  };
  RowIn cur, nxt;  // the first row's loads go out before the multiplier's
  if (PF) fetch(r_begin + g, cur);  // no branch: rows past r_end load nothing

  // The multiplier m is the same for every row of the CTA unless modulation is per token.
  float m[NCH][VEC];
  if (MODE != MODE_TOKEN) {
    const i64 moff = MODE == MODE_SAMPLE ? group * smb : 0;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (FULL || d0 < D) {
        load_f32<VECTOR>(scale + moff, d0, D, m[c]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) m[c][j] = 0.f;
      }
#pragma unroll
      for (int j = 0; j < VEC; ++j) m[c][j] += MODE == MODE_SAMPLE ? 1.f : 0.f;
    }
  }
  constexpr bool MS = MSH && MODE != MODE_TOKEN;
  constexpr int P = NCH * VEC * RT;  // element slots of a padded row, thread-major
  constexpr bool MST = MS && !DYN, SAT = SACC && ACCUM && MODE != MODE_TOKEN && !DYN;
  __shared__ __align__(16) float msh_s[MST ? ROWS : 1][MST ? P : 1];
  __shared__ __align__(16) float sacc_s[SAT ? ROWS : 1][SAT ? 2 * P : 1];
  extern __shared__ __align__(16) float dsm[];  // DYN: [ROWS][P] multiplier, then [ROWS][2P] sums
  static_assert(!SV || VEC % 4 == 0, "4-slot words");
  // the slot of element (c, j) of thread t: consecutive threads, consecutive banks (SV: words)
  auto slot = [&](int c, int j) -> int {
    if constexpr (SV) return ((c * (VEC / 4) + j / 4) * RT + t) * 4 + (j & 3);
    return (c * VEC + j) * RT + t;
  };
  float* const msh = DYN ? dsm + g * P : &msh_s[g][0];
  float* const sacc = DYN ? dsm + (MS ? ROWS * P : 0) + g * 2 * P : &sacc_s[g][0];
  if constexpr (MS) {
#pragma unroll
    for (int c = 0; c < NCH; ++c)
      if constexpr (SV) {
#pragma unroll
        for (int j = 0; j < VEC; j += 4)
          *reinterpret_cast<float4*>(msh + slot(c, j)) =
              make_float4(m[c][j], m[c][j + 1], m[c][j + 2], m[c][j + 3]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) msh[(c * VEC + j) * RT + t] = m[c][j];
      }
  }
  auto mval = [&](int c, int j) -> float {
    if constexpr (MS) return msh[(c * VEC + j) * RT + t];
    return m[c][j];
  };
  // SV: chunk c of the shared multiplier as 16-byte words
  auto mchunk = [&](int c, float (&mc)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {
      const float4 w = *reinterpret_cast<const float4*>(msh + slot(c, j));
      mc[j] = w.x, mc[j + 1] = w.y, mc[j + 2] = w.z, mc[j + 3] = w.w;
    }
  };
  float acc_s[NCH][VEC], acc_h[NCH][VEC];  // column sums of dy*xhat and dy, fp32
  // SACC: slot (c, j) of thread t at [(c*VEC + j)*RT + t] (consecutive threads, consecutive banks)
  // (only where there are column sums: not in the D-tile dx pass nor with per-token modulation)
  constexpr bool SA = SACC && ACCUM && MODE != MODE_TOKEN;
#pragma unroll
  for (int c = 0; c < NCH; ++c)
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      acc_s[c][j] = acc_h[c][j] = 0.f;
      if constexpr (SA && SV) {  // 16-byte words (scalar stores 16 bytes apart: 4-way conflicts)
        if (j % 4 == 0) {
          *reinterpret_cast<float4*>(sacc + slot(c, j)) = make_float4(0.f, 0.f, 0.f, 0.f);
          *reinterpret_cast<float4*>(sacc + P + slot(c, j)) = make_float4(0.f, 0.f, 0.f, 0.f);
        }
      } else if constexpr (SA) {
        sacc[(c * VEC + j) * RT + t] = 0.f;
        sacc[((NCH + c) * VEC + j) * RT + t] = 0.f;
      }
    }
  auto acc_add = [&](int c, int j, float vs, float vh) {
    if constexpr (SA) {
      sacc[(c * VEC + j) * RT + t] += vs;
      sacc[((NCH + c) * VEC + j) * RT + t] += vh;
    } else {
      acc_s[c][j] += vs;
      acc_h[c][j] += vh;
    }
  };
  // SV: chunk c's column sums += vs, vh as read-modify-writes of 16-byte words
  auto acc_add4 = [&](int c, const float (&vs)[VEC], const float (&vh)[VEC]) {
#pragma unroll
    for (int j = 0; j < VEC; j += 4) {
      float4* ws = reinterpret_cast<float4*>(sacc + slot(c, j));
      float4 a = *ws;
      a.x += vs[j], a.y += vs[j + 1], a.z += vs[j + 2], a.w += vs[j + 3];
      *ws = a;
      float4* wh = reinterpret_cast<float4*>(sacc + P + slot(c, j));
      float4 h = *wh;
      h.x += vh[j], h.y += vh[j + 1], h.z += vh[j + 2], h.w += vh[j + 3];
      *wh = h;
    }
  };

  for (i64 row0 = r_begin; row0 < r_end; row0 += step) {  // uniform bound: barriers are safe
    const i64 row = row0 + g;
    const bool ok = row < r_end;
    const i64 b = ok ? sample_of(row) : 0;
    const i64 n = ok ? row - b * N : 0;
    if (PF && row0 + step < r_end) fetch(row + step, nxt);
    const float mu = PF ? cur.mu : (ok ? mean[row] : 0.f);
    const float rs = PF ? cur.rs : (ok ? rstd[row] : 0.f);
    const TX* xr = x + b * sxb + n * sxn;
    const i64 moff = b * smb + n * smn;

    // RM: xh and dyv are refilled from cur in the second pass (ptxas may then drop them here)
    float xh[NCH][VEC], gy[NCH][VEC], dyv[NCH][VEC];
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      float xv[VEC];
      if (PF) {
        unpack(cur.x[c], xv);
        unpack(cur.dy[c], dyv[c]);
      }
      // with the prefetch the fetch already zeroed rows past the end, nothing to clear
      if (PF && MODE != MODE_TOKEN) {
      } else if (ok && (FULL || d0 < D)) {
        if (!PF) {
          load_f32<VECTOR>(xr, d0, D, xv);
          load_f32<VECTOR>(dy + row * D, d0, D, dyv[c]);
        }
        if (MODE == MODE_TOKEN) {
          load_f32<VECTOR>(scale + moff, d0, D, m[c]);
#pragma unroll
          for (int j = 0; j < VEC; ++j) m[c][j] += 1.f;
        }
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          xv[j] = dyv[c][j] = 0.f;
          if (MODE == MODE_TOKEN) m[c][j] = 0.f;  // per-sample m is kept for the next row
        }
      }
      float mc[MS && SV ? VEC : 1];
      if constexpr (MS && SV) mchunk(c, mc);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const bool in = FULL || d0 + j < D;  // padded lanes must not touch the row sums
        xh[c][j] = in ? (xv[j] - mu) * rs : 0.f;
        gy[c][j] = in ? dyv[c][j] * (MS && SV ? mc[MS && SV ? j : 0] : mval(c, j)) : 0.f;
        s1 += gy[c][j];
        s2 += gy[c][j] * xh[c][j];
      }
    }
    if (PF && !RM) cur = nxt;
    float s12[2] = {s1, s2};
    // one scratch buffer and a second barrier (the next row's writes wait for this row's
    // reads): with alternating buffers ptxas spilled on sm_80 and the H200 measured no gain
    group_sum<RT, ROWS>(s12, red[g], 0, t, g);
    if (RT > 32) group_barrier<RT, ROWS>(g);
    if (!ok) {
      if (RM) cur = nxt;
      continue;
    }
    const float a1 = s12[0] * (1.f / D), a2 = s12[1] * (1.f / D);
#pragma unroll
    for (int c = 0; c < NCH; ++c) {
      const int d0 = (c * RT + t) * VEC;
      if (!FULL && d0 >= D) continue;
      if constexpr (RM) {  // the same values as the first pass computed (d0 < D: every lane in)
        float xv[VEC];
        unpack_again(cur.x[c], xv);
        unpack_again(cur.dy[c], dyv[c]);
#pragma unroll
        for (int j = 0; j < VEC; ++j) xh[c][j] = FULL || d0 + j < D ? (xv[j] - mu) * rs : 0.f;
      }
      float o[VEC];
#pragma unroll
      for (int j = 0; j < VEC; ++j) o[j] = rs * (gy[c][j] - a1 - xh[c][j] * a2);
      store_f32<VECTOR>(dx + row * D, d0, D, o);
      if (MODE == MODE_TOKEN) {  // per-token modulation: the "reduction" is elementwise
        float ds[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) ds[j] = dyv[c][j] * xh[c][j];
        store_f32<VECTOR>(dscale_tok + row * D, d0, D, ds);
        store_f32<VECTOR>(dshift_tok + row * D, d0, D, dyv[c]);
      } else if (ACCUM && SA && SV) {
        float vs[VEC];
#pragma unroll
        for (int j = 0; j < VEC; ++j) vs[j] = dyv[c][j] * xh[c][j];
        acc_add4(c, vs, dyv[c]);
      } else if (ACCUM) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) acc_add(c, j, dyv[c][j] * xh[c][j], dyv[c][j]);
      }
    }
    if (RM) cur = nxt;
  }
  if (!ACCUM || MODE == MODE_TOKEN) return;
  pdl_launch_dependents();  // the finalize's launch may start (a no-op without PDL)

  // Partial slot (group, chunk*ROWS + g): one per row group, every slot written (zeros when the
  // CTA had no rows or in padding), so finalize never reads garbage. Thread-major layout: the
  // element (c, j) of thread t at (c*VEC + j)*RT + t of a row padded to NCH*VEC*RT, so a warp's
  // store is 128 consecutive bytes (column-major per thread, [d0 + j], wrote 4 of every 32 bytes:
  // 7 excess sectors per useful one, half of all sectors at N = 4096, Nsight Compute).
  const i64 base = ((group * chunks + chunk) * ROWS + g) * (i64)P;
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d0 = (c * RT + t) * VEC;
    float ws[VEC], wh[VEC];  // SV: the CTA's sums read back as 16-byte words, no bank conflicts
    if constexpr (SA && SV) {
#pragma unroll
      for (int j = 0; j < VEC; j += 4) {
        const float4 a = *reinterpret_cast<const float4*>(sacc + slot(c, j));
        const float4 h = *reinterpret_cast<const float4*>(sacc + P + slot(c, j));
        ws[j] = a.x, ws[j + 1] = a.y, ws[j + 2] = a.z, ws[j + 3] = a.w;
        wh[j] = h.x, wh[j + 1] = h.y, wh[j + 2] = h.z, wh[j + 3] = h.w;
      }
    }
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int k = (c * VEC + j) * RT + t;
      const bool in = FULL || d0 + j < D;
      if constexpr (SA && SV) {
        part_scale[base + k] = in ? ws[j] : 0.f;
        part_shift[base + k] = in ? wh[j] : 0.f;
      } else {
        part_scale[base + k] = !in ? 0.f : SA ? sacc[k] : acc_s[c][j];
        part_shift[base + k] = !in ? 0.f : SA ? sacc[P + k] : acc_h[c][j];
      }
    }
  }
}
