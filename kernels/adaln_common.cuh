// Shared helpers for the fused AdaLN kernels (compiled at run time by NVRTC: no CUDA headers,
// so the 16-bit float types and their conversions are defined here with inline PTX).
#pragma once

typedef long long i64;
typedef unsigned short u16;

// Storage-only 16-bit float types. All arithmetic happens in fp32.
struct bf16 { u16 v; };
struct f16 { u16 v; };

__device__ __forceinline__ float to_f32(float a) { return a; }
// bf16 is the top half of an fp32: widening is a shift (exact, NaN/Inf preserved).
__device__ __forceinline__ float to_f32(bf16 a) { return __uint_as_float(((unsigned)a.v) << 16); }
__device__ __forceinline__ float to_f32(f16 a) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(a.v));
  return f;
}

template <typename T> __device__ __forceinline__ T from_f32(float a);
template <> __device__ __forceinline__ float from_f32<float>(float a) { return a; }
// Round to nearest even, the same rounding torch uses for .to(bfloat16); NaN stays NaN.
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float a) {
  bf16 r;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.v) : "f"(a));
  return r;
}
template <> __device__ __forceinline__ f16 from_f32<f16>(float a) {
  f16 r;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.v) : "f"(a));
  return r;
}

// Element access inside an array of 32-bit words, so vector loads stay in registers (type punning
// through a union or a cast array would push the row to local memory). j is a compile-time
// constant after unrolling, so each access is one shift or mask.
template <typename T> struct Bits;
template <> struct Bits<float> {
  static constexpr bool BF16 = false;
  static __device__ __forceinline__ float get(const unsigned* u, int j) { return __uint_as_float(u[j]); }
  static __device__ __forceinline__ void put(unsigned* u, int j, float f) { u[j] = __float_as_uint(f); }
};
template <> struct Bits<bf16> {
  static constexpr bool BF16 = true;
  static __device__ __forceinline__ float get(const unsigned* u, int j) {
    const unsigned w = u[j >> 1];
    return __uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
  }
  static __device__ __forceinline__ void put(unsigned* u, int j, float f) {
    const unsigned h = from_f32<bf16>(f).v;
    u[j >> 1] = (j & 1) ? ((u[j >> 1] & 0xffffu) | (h << 16)) : h;
  }
};
template <> struct Bits<f16> {
  static constexpr bool BF16 = false;
  static __device__ __forceinline__ float get(const unsigned* u, int j) {
    f16 h;
    h.v = (u16)((u[j >> 1] >> (16 * (j & 1))) & 0xffffu);
    return to_f32(h);
  }
  static __device__ __forceinline__ void put(unsigned* u, int j, float f) {
    const unsigned h = from_f32<f16>(f).v;
    u[j >> 1] = (j & 1) ? ((u[j >> 1] & 0xffffu) | (h << 16)) : h;
  }
};

// Load N elements p[d0 .. d0+N) as fp32. VECTOR: the caller proved 16-byte alignment and
// d0+N <= D, so whole 16-byte (or 8-byte) words are loaded: LDG.128 moves 8 bf16 or 4 fp32.
// Otherwise scalar loads with a bound check; padded lanes read 0.
template <bool VECTOR, typename T, int N>
__device__ __forceinline__ void load_f32(const T* __restrict__ p, int d0, int D, float (&f)[N]) {
  constexpr int BYTES = N * (int)sizeof(T);
  if (VECTOR) {
    unsigned u[BYTES / 4];
    if (BYTES % 16 == 0) {
      const uint4* q = reinterpret_cast<const uint4*>(p + d0);
#pragma unroll
      for (int i = 0; i < BYTES / 16; ++i) {
        const uint4 w = q[i];
        u[4 * i] = w.x; u[4 * i + 1] = w.y; u[4 * i + 2] = w.z; u[4 * i + 3] = w.w;
      }
    } else {
      const uint2* q = reinterpret_cast<const uint2*>(p + d0);
#pragma unroll
      for (int i = 0; i < BYTES / 8; ++i) {
        const uint2 w = q[i];
        u[2 * i] = w.x; u[2 * i + 1] = w.y;
      }
    }
#pragma unroll
    for (int j = 0; j < N; ++j) f[j] = Bits<T>::get(u, j);
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j) f[j] = (d0 + j < D) ? to_f32(p[d0 + j]) : 0.f;
  }
}

template <bool VECTOR, typename T, int N>
__device__ __forceinline__ void store_f32(T* __restrict__ p, int d0, int D, const float (&f)[N]) {
  constexpr int BYTES = N * (int)sizeof(T);
  if (VECTOR) {
    unsigned u[BYTES / 4];
#pragma unroll
    for (int j = 0; j < N; ++j) Bits<T>::put(u, j, f[j]);
    if (BYTES % 16 == 0) {
      uint4* q = reinterpret_cast<uint4*>(p + d0);
#pragma unroll
      for (int i = 0; i < BYTES / 16; ++i)
        q[i] = make_uint4(u[4 * i], u[4 * i + 1], u[4 * i + 2], u[4 * i + 3]);
    } else {
      uint2* q = reinterpret_cast<uint2*>(p + d0);
#pragma unroll
      for (int i = 0; i < BYTES / 8; ++i) q[i] = make_uint2(u[2 * i], u[2 * i + 1]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < N; ++j)
      if (d0 + j < D) p[d0 + j] = from_f32<T>(f[j]);
  }
}

// Row-group reductions. A row group is RT threads owning one row: RT < 32 lives inside one warp
// (xor-shuffles with offsets < RT never cross into a neighbouring row); RT >= 32 is a whole number
// of warps that also exchange per-warp results through shared memory, in a fixed order, so every
// result is bitwise reproducible. Every thread of the row group must call them.
//
// Shared scratch: `red` holds RED_SLOTS floats per row group and two buffers used in turn (the
// caller flips `buf` between consecutive reductions), so one barrier per reduction suffices: a
// thread writes buffer k again only after the barrier of the reduction in between, which every
// thread reaches after reading buffer k.
template <int RT> struct Red {
  static constexpr int WARPS = RT > 32 ? RT / 32 : 1;
  static constexpr int SLOTS = 2 * 2 * WARPS;  // 2 buffers x up to 2 values x warps
};

// Barrier of one row group: the whole CTA when it is the only group (ROWS == 1), else a named
// barrier per group (ids 1..ROWS; 0 is __syncthreads), so row groups never wait for each other.
// The intrinsic, not inline PTX: an asm "memory" clobber would also stop the compiler from
// issuing the next global loads (the modulation) before the barrier (measured: -8 points).
template <int RT, int ROWS>
__device__ __forceinline__ void group_barrier(int g) {
  if (ROWS == 1) {
    __syncthreads();
  } else {
    __barrier_sync_count(g + 1, RT);
  }
}

// v[k] <- sum of v[k] over the row group (K values reduced together).
template <int RT, int ROWS, int K>
__device__ __forceinline__ void group_sum(float (&v)[K], float* red, int buf, int t, int g) {
#pragma unroll
  for (int o = (RT < 32 ? RT : 32) / 2; o > 0; o >>= 1)
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] += __shfl_xor_sync(0xffffffffu, v[k], o);
  if (RT > 32) {
    constexpr int W = Red<RT>::WARPS;
    float* r = red + buf * 2 * W;
    if ((t & 31) == 0)
#pragma unroll
      for (int k = 0; k < K; ++k) r[(t >> 5) * K + k] = v[k];
    group_barrier<RT, ROWS>(g);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      v[k] = 0.f;
#pragma unroll
      for (int w = 0; w < W; ++w) v[k] += r[w * K + k];
    }
  }
}

// Mean and rstd of the row a row group holds in v (padded lanes hold 0): the sum, then the
// two-pass variance, each over the row group in a fixed order. Every thread of the row group
// calls it; each reduction uses scratch buffer `buf` of `red`, then flips it.
template <int D, int RT, int ROWS, int NCH, int VEC>
__device__ __forceinline__ void row_stats(const float (&v)[NCH][VEC], float* red, int& buf, int t,
                                          int g, float eps, float& mu, float& rs) {
  float s[1] = {0.f};
#pragma unroll
  for (int c = 0; c < NCH; ++c)
#pragma unroll
    for (int j = 0; j < VEC; ++j) s[0] += v[c][j];
  group_sum<RT, ROWS>(s, red, buf, t, g);
  buf ^= 1;
  mu = s[0] * (1.f / D);
  float q[1] = {0.f};
#pragma unroll
  for (int c = 0; c < NCH; ++c) {
    const int d0 = (c * RT + t) * VEC;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const float dv = v[c][j] - mu;
      if (d0 + j < D) q[0] += dv * dv;  // padded lanes left out: 0 - mu is not 0
    }
  }
  group_sum<RT, ROWS>(q, red, buf, t, g);
  buf ^= 1;
  rs = rsqrtf(q[0] * (1.f / D) + eps);
}

// Modes: which tensor multiplies x-hat and how its rows are indexed.
#define MODE_SAMPLE 0  // scale/shift [B, D] with a batch stride: y = xhat * (1 + scale) + shift
#define MODE_TOKEN 1   // scale/shift [B, N, D]:                 y = xhat * (1 + scale) + shift
#define MODE_AFFINE 2  // weight/bias [D] (plain affine LayerNorm): y = xhat * weight + bias

// Raw 16- (or 8-) byte words of N elements of T at p + d0 (VECTOR layout: the caller proved
// alignment and d0 + N <= D), kept packed in registers until unpack(): a prefetched bf16 row costs half the
// registers of its fp32 copy.
template <typename T, int N>
struct Raw {
  static constexpr int WORDS = N * (int)sizeof(T) / 4;
  unsigned u[WORDS];
};
template <typename T, int N>
__device__ __forceinline__ void load_raw(const T* __restrict__ p, int d0, Raw<T, N>& r) {
  if ((N * sizeof(T)) % 16 == 0) {
    const uint4* q = reinterpret_cast<const uint4*>(p + d0);
#pragma unroll
    for (int i = 0; i < Raw<T, N>::WORDS / 4; ++i) {
      const uint4 w = q[i];
      r.u[4 * i] = w.x; r.u[4 * i + 1] = w.y; r.u[4 * i + 2] = w.z; r.u[4 * i + 3] = w.w;
    }
  } else {  // 8-byte words (4 16-bit elements beside a float row)
    const uint2* q = reinterpret_cast<const uint2*>(p + d0);
#pragma unroll
    for (int i = 0; i < Raw<T, N>::WORDS / 2; ++i) {
      const uint2 w = q[i];
      r.u[2 * i] = w.x; r.u[2 * i + 1] = w.y;
    }
  }
}
template <typename T, int N>
__device__ __forceinline__ void zero_raw(Raw<T, N>& r) {
#pragma unroll
  for (int i = 0; i < Raw<T, N>::WORDS; ++i) r.u[i] = 0u;
}
template <typename T, int N>
__device__ __forceinline__ void unpack(const Raw<T, N>& r, float (&f)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) f[j] = Bits<T>::get(r.u, j);
}
// unpack() through PTX the compiler cannot match with an earlier unpack() of the same words, so
// a second unpack of a kept packed row is recomputed, not kept from the first (16-bit types; for
// fp32 there is nothing to unpack)
template <typename T, int N>
__device__ __forceinline__ void unpack_again(const Raw<T, N>& r, float (&f)[N]) {
#pragma unroll
  for (int j = 0; j < N; ++j) {
    const unsigned w = r.u[sizeof(T) == 2 ? j >> 1 : j];
    unsigned o;
    if constexpr (sizeof(T) == 4) {
      o = w;
    } else if constexpr (Bits<T>::BF16) {  // bf16: the half moved to the top, zeros below
      if (j & 1) asm("prmt.b32 %0, %1, 0, 0x3244;" : "=r"(o) : "r"(w));
      else asm("prmt.b32 %0, %1, 0, 0x1044;" : "=r"(o) : "r"(w));
    } else {  // f16
      float x;
      const unsigned short h = (unsigned short)(w >> (16 * (j & 1)));
      asm("cvt.f32.f16 %0, %1;" : "=f"(x) : "h"(h));
      o = __float_as_uint(x);
    }
    f[j] = __uint_as_float(o);
  }
}

// Programmatic dependent launch (sm_90+; no-ops when the launch is not one): the primary lets its
// dependent launch; the dependent waits for the primary's completion and memory.
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
