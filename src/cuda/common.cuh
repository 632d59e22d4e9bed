// Device-side building blocks shared by every normkit kernel: element conversions, 16-byte vector
// access, warp and row-group reductions, and CUDA error checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "normkit/plan.h"
#include "normkit/types.h"

namespace normkit::cuda {

// ---- errors ----
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw CudaError(std::string("normkit: ") + what + ": " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ")");
}
/// After every launch: configuration errors surface here, not at the next unrelated call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

/// Lets `kernel` take `bytes` of dynamic shared memory on the current device (above 48 KB it must be
/// asked for). Asked once per kernel and device, so that launches inside a CUDA graph capture that
/// follow a first eager call make no attribute calls.
template <typename Kernel>
void allow_dynamic_smem(Kernel* kernel, std::int64_t bytes, const char* what) {
  if (bytes <= (48 << 10)) return;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, std::int64_t> granted;
  std::lock_guard<std::mutex> lock(mutex);
  std::int64_t& have = granted[{reinterpret_cast<const void*>(kernel), device}];
  if (have >= bytes) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)), what);
  have = bytes;
}

// ---- element conversions (all math is fp32) ----
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// ---- vector access: VEC elements of T, 16 bytes when VEC = 16 / sizeof(T) ----
/// 16-bit types are kept as raw bits (the cuda_fp16/bf16 classes are not trivially copyable), so a
/// pack is a plain 16-byte value; bf16 -> fp32 is exact: the 16 bits are the top half of the float.
template <typename T> struct StorageOf { using type = unsigned short; };
template <> struct StorageOf<float> { using type = float; };

template <typename T> __device__ __forceinline__ float bits_to_float(typename StorageOf<T>::type b);
template <> __device__ __forceinline__ float bits_to_float<float>(float b) { return b; }
template <> __device__ __forceinline__ float bits_to_float<__half>(unsigned short b) { return __half2float(__ushort_as_half(b)); }
template <> __device__ __forceinline__ float bits_to_float<__nv_bfloat16>(unsigned short b) { return __uint_as_float(unsigned(b) << 16); }

template <typename T> __device__ __forceinline__ typename StorageOf<T>::type float_to_bits(float v);
template <> __device__ __forceinline__ float float_to_bits<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned short float_to_bits<__half>(float v) { return __half_as_ushort(__float2half_rn(v)); }
template <> __device__ __forceinline__ unsigned short float_to_bits<__nv_bfloat16>(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
  typename StorageOf<T>::type v[VEC];
  __device__ __forceinline__ float get(int i) const { return bits_to_float<T>(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = float_to_bits<T>(x); }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = 0;  // +0.0 in every float format
  }
  __device__ __forceinline__ static Pack load(const T* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Pack*>(p) = *this; }
};

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Pack<T, VEC> pack;
#pragma unroll
  for (int i = 0; i < VEC; ++i) pack.set(i, in[i]);
  pack.store(p);
}

// ---- reductions ----
/// Sum over the `width` lanes of an aligned lane group (width a power of two, <= warp size); every
/// lane of the warp must call it. The xor butterfly gives every lane the same, order-fixed result.
__device__ __forceinline__ float group_sum_in_warp(float v, int width) {
  for (int offset = width / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Sums (a, b) over a row group of `group_threads` threads (a power of two). Groups up to a warp
/// reduce with shuffles; larger groups combine their warps through `scratch` (2 * warps-per-block
/// floats). Every thread of the block must call it (it may synchronise the block).
__device__ __forceinline__ void row_group_sum2(float& a, float& b, int group_threads, float* scratch) {
  const int width = group_threads < kWarpSize ? group_threads : kWarpSize;
  a = group_sum_in_warp(a, width);
  b = group_sum_in_warp(b, width);
  if (group_threads <= kWarpSize) return;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  const int warps_per_group = group_threads / kWarpSize;
  const int first_warp = (warp / warps_per_group) * warps_per_group;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) {
    scratch[2 * warp] = a;
    scratch[2 * warp + 1] = b;
  }
  __syncthreads();
  a = 0.f;
  b = 0.f;
  for (int w = 0; w < warps_per_group; ++w) {  // fixed order: same bits every run
    a += scratch[2 * (first_warp + w)];
    b += scratch[2 * (first_warp + w) + 1];
  }
}

// ---- asynchronous global -> shared copies (cp.async, sm_80 and later) ----
/// Copies 16 bytes (both addresses 16-byte aligned) without passing through registers.
__device__ __forceinline__ void cp_async_16(void* smem, const void* global) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(global)
               : "memory");
#else
  *static_cast<uint4*>(smem) = *static_cast<const uint4*>(global);
#endif
}
/// Copies 4 bytes (both addresses 4-byte aligned).
__device__ __forceinline__ void cp_async_4(void* smem, const void* global) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(smem))),
               "l"(global)
               : "memory");
#else
  *static_cast<float*>(smem) = *static_cast<const float*>(global);
#endif
}
/// Closes this thread's group of copies issued since the last commit (an empty group is fine).
__device__ __forceinline__ void cp_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/// Waits until at most `pending` (< kMaxRowStages) of this thread's committed groups are still in
/// flight; the completed copies are then visible to this thread (and only to it, without a barrier).
__device__ __forceinline__ void cp_async_wait(int pending) {
#if __CUDA_ARCH__ >= 800
  switch (pending) {
    case 0: asm volatile("cp.async.wait_group 0;\n" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;\n" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;\n" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;\n" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;\n" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;\n" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;\n" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;\n" ::: "memory"); break;
  }
  static_assert(kMaxRowStages <= 8, "cp_async_wait covers pending counts up to 7");
#endif
}

/// Count, mean and M2 (sum of squared deviations from the mean) of some of a row's elements.
struct Moments {
  float n, mean, m2;
};

/// The moments of the union of two disjoint parts (Chan, Golub and LeVeque): as robust as Welford's
/// update. Fixed argument order: the same parts give the same bits.
__device__ __forceinline__ Moments merge_moments(const Moments& a, const Moments& b) {
  const float n = a.n + b.n;
  if (n == 0.f) return a;
  const float delta = b.mean - a.mean;
  const float share_b = __fdividef(b.n, n);  // counts: exact integers, n > 0; ~2 ulp is plenty
  return {n, a.mean + delta * share_b, a.m2 + b.m2 + delta * delta * a.n * share_b};
}

/// Merges the lanes' moments over a row group of `group_threads` threads (a power of two) in one
/// reduction round; every lane gets the group's moments, bit-identical (a pair always merges the
/// lower lane's part first). Larger groups combine their warps through `scratch` (3 * warps-per-block
/// floats) in warp order. Every thread of the block must call it (it may synchronise the block).
__device__ __forceinline__ Moments row_group_moments(Moments m, int group_threads, float* scratch) {
  const int width = group_threads < kWarpSize ? group_threads : kWarpSize;
  const int lane = int(threadIdx.x) % kWarpSize;
  for (int offset = 1; offset < width; offset *= 2) {
    const Moments other{__shfl_xor_sync(0xffffffffu, m.n, offset), __shfl_xor_sync(0xffffffffu, m.mean, offset),
                        __shfl_xor_sync(0xffffffffu, m.m2, offset)};
    m = (lane & offset) ? merge_moments(other, m) : merge_moments(m, other);
  }
  if (group_threads <= kWarpSize) return m;
  const int warp = int(threadIdx.x) / kWarpSize;
  const int warps_per_group = group_threads / kWarpSize;
  const int first_warp = (warp / warps_per_group) * warps_per_group;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) {
    scratch[3 * warp] = m.n;
    scratch[3 * warp + 1] = m.mean;
    scratch[3 * warp + 2] = m.m2;
  }
  __syncthreads();
  Moments total{scratch[3 * first_warp], scratch[3 * first_warp + 1], scratch[3 * first_warp + 2]};
  for (int w = 1; w < warps_per_group; ++w)  // fixed order: same bits every run
    total = merge_moments(total, Moments{scratch[3 * (first_warp + w)], scratch[3 * (first_warp + w) + 1],
                                         scratch[3 * (first_warp + w) + 2]});
  return total;
}

/// Device-side views of the row tensors (64-bit strides: M * N may exceed 2^31).
template <typename T>
struct RowPtr {
  T* data;
  std::int64_t stride;
  __device__ __forceinline__ T* row(std::int64_t r) const { return data + r * stride; }
};

}  // namespace normkit::cuda
