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

// out[g, d] = sum_{k < slots} part[g, k, d] in a fixed order (deterministic); out rows are
// out_stride apart (D, or 6D when they are two rows of Wan's [B, 6, D] modulation gradient, so
// autograd needs no slice backward: then `table` is that gradient, [groups, K, D] contiguous,
// and its rows in the bit mask zero_rows are zeroed here, saving a fill kernel). Partial rows are
// P = ceil(D / (VEC*RT)) * VEC*RT wide, element d at position (c*VEC + j)*RT + t where
// d = (c*RT + t)*VEC + j (the fused row kernel's thread-major layout; RT = VEC = 1: the D-tile
// pass's plain rows, P = D). The layout is template arguments: a position's feature without
// integer divisions at run time (they were ~100 of ~315 instructions per warp, Nsight Compute),
// the slot loop's addresses one pointer and immediate offsets.
// A warp reads 32 consecutive positions of one slot (coalesced); 32 lanes per position each add
// the slots k = lane, lane + 32, ... (a serial loop over hundreds of slots would be
// latency-bound), and lane 0 adds the 32 lane sums in order.
template <int D, int RT, int VEC>
__global__ void __launch_bounds__(1024)
adaln_bwd_finalize_t(const float* __restrict__ part_scale, const float* __restrict__ part_shift,
                     float* __restrict__ dscale, float* __restrict__ dshift, i64 out_stride,
                     float* __restrict__ table, int zero_rows, int slots) {
  constexpr int W = VEC * RT, P = (D + W - 1) / W * W;
  __shared__ float ss[32][33], sh[32][33];  // +1 column: no bank conflicts on the column reads
  pdl_wait();  // launched as a programmatic dependent (PDL): the row kernel's partial rows
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
    const i64 row = group * out_stride;
    dscale[row + d] = a;
    dshift[row + d] = b;
    for (int r = 0; zero_rows >> r; ++r)
      if (zero_rows >> r & 1) table[row + (i64)r * D + d] = 0.f;
  }
}
