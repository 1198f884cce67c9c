// A diagnostic, not part of the op: streams with no arithmetic, to find what the fp32-out
// forward's byte mix (bf16 read, fp32 written: a third read, two thirds written) can reach at all
// (C11; lab/mixed_copy.py). KIND:
//   COPY: bf16 -> bf16, 16-byte words (a 1:1 stream, to compare with torch's copy);
//   PAIR: bf16 -> fp32, a 16-byte load and two 16-byte stores 32 bytes wide per thread (the
//         forward's own pattern at D = 1536: a warp's store covers every other 16 bytes);
//   COAL: bf16 -> fp32, an 8-byte load and one 16-byte store per item (each warp's store is
//         512 consecutive bytes).
// BLOCKED: CTA b owns the items b * 256 * UNROLL ... (b + 1) * 256 * UNROLL - 1 (one CTA per
// block, as torch's elementwise kernels), else a grid-stride loop over whole waves. UNROLL items
// are loaded before any is stored, so UNROLL loads per thread are in flight.
typedef long long i64;
enum { COPY = 0, PAIR = 1, COAL = 2 };

template <int KIND>
struct Item {  // what one thread loads per item
  typedef uint4 In;
};
template <>
struct Item<COAL> {
  typedef uint2 In;
};

// bf16 is the top half of an fp32
__device__ __forceinline__ uint4 widen(unsigned a, unsigned b) {
  return make_uint4(a << 16, a & 0xffff0000u, b << 16, b & 0xffff0000u);
}
template <int KIND>
__device__ __forceinline__ void put(uint4* __restrict__ out, i64 i, uint4 v) {
  if (KIND == COPY) {
    out[i] = v;
  } else {
    out[2 * i] = widen(v.x, v.y);
    out[2 * i + 1] = widen(v.z, v.w);
  }
}
template <int KIND>
__device__ __forceinline__ void put(uint4* __restrict__ out, i64 i, uint2 v) {
  out[i] = widen(v.x, v.y);
}

template <int UNROLL, int KIND, bool BLOCKED>
__global__ void __launch_bounds__(256)
stream_convert(const void* __restrict__ src, uint4* __restrict__ out, i64 items) {
  using In = typename Item<KIND>::In;
  const In* __restrict__ in = static_cast<const In*>(src);
  const i64 stride = BLOCKED ? blockDim.x : (i64)gridDim.x * blockDim.x;
  i64 i = BLOCKED ? (i64)blockIdx.x * blockDim.x * UNROLL + threadIdx.x
                  : (i64)blockIdx.x * blockDim.x + threadIdx.x;
  const i64 end = BLOCKED ? min(items, (i64)(blockIdx.x + 1) * blockDim.x * UNROLL) : items;
  for (; i + (UNROLL - 1) * stride < end; i += UNROLL * stride) {
    In v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = in[i + u * stride];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) put<KIND>(out, i + u * stride, v[u]);
    if (BLOCKED) return;  // a CTA's block is one round of UNROLL items per thread
  }
  for (; i < end; i += stride) put<KIND>(out, i, in[i]);
}
