// A diagnostic, not part of the op: a streaming bf16 -> fp32 conversion with 16-byte accesses,
// the fp32-out forward's exact byte mix (a third of the bytes read, two thirds written) and no
// arithmetic, as a ceiling for that forward (C11; tools/mixed_copy.py). WIDEN = false copies
// bf16 -> bf16 (the same code as a 1:1 stream, to compare with torch's copy).
// Each thread handles 16-byte input words i, i + stride, ... ; UNROLL words are loaded before any
// is stored, so UNROLL loads per thread are in flight.
typedef long long i64;

// 8 bf16 (one 16-byte word) -> 8 fp32 (two words): bf16 is the top half of an fp32
__device__ __forceinline__ void put(uint4* __restrict__ out, i64 i, uint4 v, bool widen) {
  if (!widen) {
    out[i] = v;
    return;
  }
  out[2 * i] = make_uint4(v.x << 16, v.x & 0xffff0000u, v.y << 16, v.y & 0xffff0000u);
  out[2 * i + 1] = make_uint4(v.z << 16, v.z & 0xffff0000u, v.w << 16, v.w & 0xffff0000u);
}

template <int UNROLL, bool WIDEN>
__global__ void __launch_bounds__(256)
stream_convert(const uint4* __restrict__ in, uint4* __restrict__ out, i64 words) {
  const i64 stride = (i64)gridDim.x * blockDim.x;
  i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + (UNROLL - 1) * stride < words; i += UNROLL * stride) {
    uint4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = in[i + u * stride];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) put(out, i + u * stride, v[u], WIDEN);
  }
  for (; i < words; i += stride) put(out, i, in[i], WIDEN);
}
