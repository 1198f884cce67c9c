// Fused AdaLN backward, the column reductions (kernels/adaln_bwd.cu has the row kernel and the
// formulas): the paper's D-tile pass over x and dy, and the finalize that adds a backward's fp32
// partial rows in a fixed order (deterministic, no atomics).
#pragma once
#include "adaln_common.cuh"

// The paper's D-tile coalesced reduction: blockIdx = (d_tile, n_tile, group); thread (tx, ty)
// is pinned to column d = d_tile*TD + tx and walks rows ty, ty+TR, ... of its sequence tile,
// so a warp reads TD consecutive elements of one row (coalesced). The TR row-partials of the CTA
// are combined in a fixed order through shared memory; one fp32 partial per (group, n_tile).
template <typename TX, typename TY, int TD, int TR>
__global__ void __launch_bounds__(TD * TR)
adaln_bwd_dtile(const TX* __restrict__ x, i64 sxb, i64 sxn, const TY* __restrict__ dy,
                const float* __restrict__ mean, const float* __restrict__ rstd,
                float* __restrict__ part_scale, float* __restrict__ part_shift,
                i64 rows_per_group, i64 N, int D, int n_tile) {
  __shared__ float ss[TR][TD], sh[TR][TD];
  const int tx = threadIdx.x % TD, ty = threadIdx.x / TD;
  const int d = blockIdx.x * TD + tx;
  const i64 group = blockIdx.z;
  const i64 r0 = group * rows_per_group + (i64)blockIdx.y * n_tile;
  const i64 r1 = group * rows_per_group + min((i64)(blockIdx.y + 1) * n_tile, rows_per_group);
  float as = 0.f, ah = 0.f;
  if (d < D) {
#pragma unroll 4
    for (i64 row = r0 + ty; row < r1; row += TR) {
      const i64 b = row / N, n = row - b * N;
      const float xv = to_f32(x[b * sxb + n * sxn + d]);
      const float g = to_f32(dy[row * D + d]);
      as += g * (xv - mean[row]) * rstd[row];
      ah += g;
    }
  }
  ss[ty][tx] = as;
  sh[ty][tx] = ah;
  __syncthreads();
  if (ty == 0 && d < D) {
    for (int k = 1; k < TR; ++k) {
      as += ss[k][tx];
      ah += sh[k][tx];
    }
    const i64 slot = group * gridDim.y + blockIdx.y;
    part_scale[slot * D + d] = as;
    part_shift[slot * D + d] = ah;
  }
}

// One position's gradients: dscale, dshift at feature d of the group's output row (`row`, the
// row's offset), and zeroes at d in the table rows of the bit mask zero_rows.
__device__ __forceinline__ void store_grads(float* __restrict__ dscale, float* __restrict__ dshift,
                                            float* __restrict__ table, i64 row, int zero_rows,
                                            int D, int d, float a, float b) {
  dscale[row + d] = a;
  dshift[row + d] = b;
  for (int r = 0; zero_rows >> r; ++r)
    if (zero_rows >> r & 1) table[row + (i64)r * D + d] = 0.f;
}

// out[g, d] = sum_{k < slots} part[g, k, d] in a fixed order (deterministic); out rows are
// out_stride apart (D, or 6D when they are two rows of Wan's [B, 6, D] modulation gradient, so
// autograd needs no slice backward: then `table` is that gradient, [groups, K, D] contiguous,
// and its rows in the bit mask zero_rows are zeroed here, saving a fill kernel). Partial rows are
// P = ceil(D / (VEC*RT)) * VEC*RT wide, element d at position (c*VEC + j)*RT + t where
// d = (c*RT + t)*VEC + j (the row kernel's thread-major layout; RT = VEC = 1: plain, P = D).
// A warp reads 32 consecutive positions of one slot (coalesced); 32 lanes per position each add
// the slots k = lane, lane + 32, ... (a serial loop over hundreds of slots would be
// latency-bound), and lane 0 adds the 32 lane sums in order.
extern "C" __global__ void __launch_bounds__(1024)
adaln_bwd_finalize(const float* __restrict__ part_scale, const float* __restrict__ part_shift,
                   float* __restrict__ dscale, float* __restrict__ dshift, i64 out_stride,
                   float* __restrict__ table, int zero_rows, int slots, int D, int rt, int vec) {
  __shared__ float ss[32][33], sh[32][33];  // +1 column: no bank conflicts on the column reads
  pdl_wait();  // launched as a programmatic dependent (PDL): the row kernel's partial rows
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int P = (D + vec * rt - 1) / (vec * rt) * (vec * rt);
  const int s = blockIdx.x * 32 + tx;
  const int c = s / (vec * rt), j = s / rt % vec, t = s % rt;
  const int d = (c * rt + t) * vec + j;
  const bool in = s < P && d < D;
  const i64 group = blockIdx.y;
  float a = 0.f, b = 0.f;
  if (in) {
    const float* ps = part_scale + group * slots * (i64)P + s;
    const float* ph = part_shift + group * slots * (i64)P + s;
#pragma unroll 4
    for (int k = ty; k < slots; k += 32) {
      a += ps[(i64)k * P];
      b += ph[(i64)k * P];
    }
  }
  ss[ty][tx] = a;
  sh[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && in) {
    for (int k = 1; k < 32; ++k) {
      a += ss[k][tx];
      b += sh[k][tx];
    }
    store_grads(dscale, dshift, table, group * out_stride, zero_rows, D, d, a, b);
  }
}

// FT (KernelConfig.bwd_fin_t): the finalize above with the fused row kernel's layout (D, RT, VEC)
// known at compile time: a position's feature without integer divisions (~100 of the ~315
// instructions per warp above, Nsight Compute), the slot loop's addresses as one pointer and
// immediate offsets. The same loads and the same additions in the same order: bitwise the same.
template <int D, int RT, int VEC>
__global__ void __launch_bounds__(1024)
adaln_bwd_finalize_t(const float* __restrict__ part_scale, const float* __restrict__ part_shift,
                     float* __restrict__ dscale, float* __restrict__ dshift, i64 out_stride,
                     float* __restrict__ table, int zero_rows, int slots) {
  constexpr int W = VEC * RT, P = (D + W - 1) / W * W;
  __shared__ float ss[32][33], sh[32][33];
  pdl_wait();
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int s = blockIdx.x * 32 + tx;
  const int d = (s / W * RT + s % RT) * VEC + s / RT % VEC;
  const bool in = s < P && d < D;
  const i64 group = blockIdx.y;
  float a = 0.f, b = 0.f;
  if (in) {
    const float* ps = part_scale + (group * slots + ty) * (i64)P + s;
    const float* ph = part_shift + (group * slots + ty) * (i64)P + s;
#pragma unroll 4
    for (int k = ty; k < slots; k += 32, ps += 32 * P, ph += 32 * P) {
      a += *ps;
      b += *ph;
    }
  }
  ss[ty][tx] = a;
  sh[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && in) {
#pragma unroll
    for (int k = 1; k < 32; ++k) {
      a += ss[k][tx];
      b += sh[k][tx];
    }
    store_grads(dscale, dshift, table, group * out_stride, zero_rows, D, d, a, b);
  }
}

// LASTK (the fused row kernel's epilogue, KernelConfig.bwd_lastk): no finalize kernel. After its
// partial rows each CTA of a group takes a ticket (fence, barrier, one atomic add to
// counts[2 * group]); the first chunks - K leave, the last K arrivals add the group's partial
// rows, K = min(chunks, P / 8): finalizer f owns the 8-position slices f, f + K, ... (one 32-byte
// sector of every partial row). A finalizer first waits for the group's last ticket (thread 0
// polls, the others wait at a barrier). It never waits on a CTA that cannot run: every CTA of the
// group not yet arrived is running or will get the slot of one that left, because only the K
// finalizers wait (at most K - 1 at a time), and the hardware dispatches a grid's CTAs in order,
// so an earlier group's finalizers never hold slots a later group's CTAs need before the earlier
// group is all dispatched (the residency caveat of round 23, much weakened: what it assumes is
// in-order dispatch and K free slots, not the whole grid resident). The last finalizer to finish
// zeroes the group's two counts for the next call (graph replays included). Within a slice thread
// (q, p) adds slots q, q + Q, ... of position p (Q = T / 8), then thread (0, p) adds the Q sums in
// order: a fixed order, other than the finalize kernel's (other rounding; dx is the same).
template <int D, int RT, int VEC, int T>
__device__ __forceinline__ void lastk_finalize(const float* __restrict__ part_scale,
                                               const float* __restrict__ part_shift, i64 group,
                                               int chunks, int slots, unsigned* __restrict__ counts,
                                               float* __restrict__ dscale,
                                               float* __restrict__ dshift, i64 out_stride,
                                               float* __restrict__ table, int zero_rows) {
  constexpr int W = VEC * RT, P = (D + W - 1) / W * W, NSL = P / 8, Q = T / 8;
  static_assert(P % 8 == 0 && T % 32 == 0, "sector slices, whole warps");
  __shared__ unsigned ticket_s;
  __shared__ float ls[Q][9], lh[Q][9];
  __threadfence();  // this thread's partial rows, visible at GPU scope before the count
  __syncthreads();
  if (threadIdx.x == 0) ticket_s = atomicAdd(counts + 2 * group, 1u);
  __syncthreads();
  const int K = min(chunks, NSL);
  const int f = (int)ticket_s - (chunks - K);
  if (f < 0) return;  // not among the last K arrivals
  if (threadIdx.x == 0) {
    while (ld_relaxed(counts + 2 * group) < (unsigned)chunks) __nanosleep(32);
    __threadfence();  // acquire: every CTA's partial rows
  }
  __syncthreads();
  const int p = threadIdx.x & 7, q = threadIdx.x >> 3;
  const float* ps = part_scale + group * slots * (i64)P;
  const float* ph = part_shift + group * slots * (i64)P;
  for (int sl = f; sl < NSL; sl += K) {
    const int s = sl * 8 + p;
    float a = 0.f, b = 0.f;
#pragma unroll 4
    for (int k = q; k < slots; k += Q) {
      a += __ldcg(ps + (i64)k * P + s);  // written by other CTAs of this grid: from L2
      b += __ldcg(ph + (i64)k * P + s);
    }
    ls[q][p] = a;
    lh[q][p] = b;
    __syncthreads();
    if (q == 0) {
      for (int r = 1; r < Q; ++r) {
        a += ls[r][p];
        b += lh[r][p];
      }
      const int d = (s / W * RT + s % RT) * VEC + s / RT % VEC;
      if (d < D) store_grads(dscale, dshift, table, group * out_stride, zero_rows, D, d, a, b);
    }
    __syncthreads();  // the next slice reuses ls, lh
  }
  if (threadIdx.x == 0 && atomicAdd(counts + 2 * group + 1, 1u) == (unsigned)K - 1) {
    counts[2 * group] = 0;  // every finalizer has left its poll: ready for the next call
    counts[2 * group + 1] = 0;
  }
}
