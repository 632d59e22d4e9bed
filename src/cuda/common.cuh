// Device-side building blocks shared by every normkit kernel: element conversions, 16-byte vector
// access, warp and row-group reductions, and CUDA error checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <algorithm>
#include <string>
#include <tuple>
#include <utility>

#include "normkit/plan.h"
#include "normkit/types.h"

namespace normkit::cuda {

// ---- errors ----
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // a failed launch is also the "last error": the next launch check must not see it
    throw CudaError(std::string("normkit: ") + what + ": " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ")");
  }
}
/// After every launch: configuration errors surface here, not at the next unrelated call.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// ---- programmatic dependent launch (sm_90 on) ----
// The second kernel of a backward (gamma/beta after dX, the partial reduce after its partials) is
// launched "programmatically": it may start while the kernel before it in the stream still runs,
// which hides its launch latency and, for gamma/beta next to dX (both only read x and dy), overlaps
// the two. Rules that keep stream order intact for everything after them:
//   * a kernel that lets its successor start early calls allow_dependent_launch();
//   * a programmatically launched kernel calls wait_for_previous_kernel() before it reads what the
//     previous kernel writes, and in any case before it exits (so that its completion still implies
//     the previous kernel's, which the next, normally launched kernel relies on);
//   * the first kernel of a call is always launched normally: its predecessor is the caller's.
// Both instructions are no-ops in a kernel that was not launched that way.

/// Lets the next kernel in the stream, when launched programmatically, start now.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}
/// Waits until the previous kernel in the stream has completed and its writes are visible.
__device__ __forceinline__ void wait_for_previous_kernel() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// How launch_kernel launches: programmatically (see above), in thread-block clusters of
/// `cluster_blocks` consecutive blocks (1 = no clusters; sm_90 on), and cooperatively (every block
/// resident at once, for a grid-wide sync).
struct LaunchMode {
  bool programmatic = false;
  int cluster_blocks = 1;
  bool cooperative = false;
};

/// kernel<<<grid, block, smem, stream>>>(args...) with the attributes `mode` asks for.
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                   LaunchMode mode, const char* what, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attributes[3];
  unsigned count = 0;
  if (mode.programmatic) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (mode.cluster_blocks > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = unsigned(mode.cluster_blocks);
    attributes[count].val.clusterDim.y = 1;
    attributes[count].val.clusterDim.z = 1;
    ++count;
  }
  if (mode.cooperative) {
    attributes[count].id = cudaLaunchAttributeCooperative;
    attributes[count].val.cooperative = 1;
    ++count;
  }
  config.attrs = attributes;
  config.numAttrs = count;
  check(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}

/// Lets `kernel` take `bytes` of dynamic shared memory on the current device (above 48 KB it must be
/// asked for). Asked once per kernel and device, so that launches inside a CUDA graph capture that
/// follow a first eager call make no attribute calls.
template <typename Kernel>
void allow_dynamic_smem(Kernel* kernel, std::int64_t bytes, const char* what) {
  // The 48 KB a launch gets without asking counts static shared memory too: 48 KB of dynamic
  // memory next to a kernel's static scratch failed to launch (fused, M = 16, N = 4096 bf16), so
  // any dynamic amount is asked for (once per kernel and size, cached below).
  if (bytes <= 0) return;
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

/// Asks the device how many clusters of `cluster_blocks` blocks of `kernel` it holds at once (in
/// `clusters`); the kernel must have opted in to non-portable sizes above kPortableClusterBlocks.
template <typename Kernel>
cudaError_t max_active_clusters(Kernel* kernel, dim3 block, std::size_t smem, int cluster_blocks, int& clusters) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(cluster_blocks));
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = unsigned(cluster_blocks);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
}

/// The grid of a persistent kernel run in clusters of `cluster_blocks` blocks (split rows), capped to
/// the clusters the device holds at once: a cluster that had to wait for a free slot would walk its
/// rows after all the others (two waves for one cluster's share). The planner sizes the grid from
/// the blocks per SM alone; where clusters may be placed (a GPC holds whole clusters) is the
/// device's to say. Asked once per kernel, device, block size, shared memory and cluster size.
template <typename Kernel>
unsigned cluster_grid(Kernel* kernel, unsigned planned_blocks, dim3 block, std::size_t smem, int cluster_blocks) {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, unsigned, std::size_t, int>, int> known;
  int clusters = 0;
  {
    std::lock_guard<std::mutex> lock(mutex);
    const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, block.x, smem, cluster_blocks);
    const auto it = known.find(key);
    if (it != known.end()) {
      clusters = it->second;
    } else {
      // Clusters above the portable size are launched only by a kernel that opts in (sm_90: up to 16).
      if (cluster_blocks > kPortableClusterBlocks)
        check(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
              "cudaFuncSetAttribute(NonPortableClusterSizeAllowed)");
      check(max_active_clusters(kernel, block, smem, cluster_blocks, clusters), "cudaOccupancyMaxActiveClusters");
      known[key] = clusters;
    }
  }
  if (clusters < 1) throw CudaError("normkit: the device holds no cluster of " + std::to_string(cluster_blocks) + " blocks");
  return std::min(planned_blocks, unsigned(clusters) * unsigned(cluster_blocks));
}

// ---- element conversions (all math is fp32) ----
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/// A row's mean from its sum: sum * (1 / N) and one FMA step of correction (the residual sum - q * N
/// is exact in an FMA). Why: sum * inv_cols alone can miss by an ulp, and a constant row's mean must
/// be its value exactly -- an ulp off, every xhat of the row is ulp(c) * rstd instead of 0, up to
/// |c| * 2^-24 / sqrt(eps) (LayerNorm of 1000 columns of 1000.0: y = b - 0.019 w, where PyTorch gives
/// b; review of the forward walks). The step makes the quotient exact wherever the row's sum is (n * c
/// in fp32), at two FMAs a row.
__device__ __forceinline__ float row_mean(float sum, int cols, float inv_cols) {
  const float q = sum * inv_cols;
  return fmaf(fmaf(-q, float(cols), sum), inv_cols, q);
}

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

/// Two 16-bit values in one 32-bit word (element 2j in the low half, as in memory).
template <typename T> __device__ __forceinline__ float word_low_to_float(unsigned w);
template <typename T> __device__ __forceinline__ float word_high_to_float(unsigned w);
template <typename T> __device__ __forceinline__ unsigned floats_to_word(float low, float high);
template <> __device__ __forceinline__ float word_low_to_float<__nv_bfloat16>(unsigned w) { return __uint_as_float(w << 16); }
template <> __device__ __forceinline__ float word_high_to_float<__nv_bfloat16>(unsigned w) { return __uint_as_float(w & 0xffff0000u); }
template <> __device__ __forceinline__ unsigned floats_to_word<__nv_bfloat16>(float low, float high) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}
template <> __device__ __forceinline__ float word_low_to_float<__half>(unsigned w) {
  return __low2float(*reinterpret_cast<const __half2*>(&w));
}
template <> __device__ __forceinline__ float word_high_to_float<__half>(unsigned w) {
  return __high2float(*reinterpret_cast<const __half2*>(&w));
}
template <> __device__ __forceinline__ unsigned floats_to_word<__half>(float low, float high) {
  const __half2 pair = __floats2half2_rn(low, high);
  return *reinterpret_cast<const unsigned*>(&pair);
}

/// VEC elements of T as one aligned value (16 bytes when VEC = 16 / sizeof(T)). fp32 and single
/// 16-bit elements are stored as they are; pairs of 16-bit elements are stored as 32-bit words, so
/// that reading one is a shift or a mask of its register (storing them as separate 16-bit values
/// made the compiler split every loaded word with PRMT first: 2 instructions per element, plus 16-bit
/// zeroing of padding; SASS of the fused loop at 095e3ab).
template <typename T, int VEC, bool kWords = (sizeof(T) == 2 && VEC % 2 == 0)>
struct alignas(sizeof(T) * VEC) Pack {
  typename StorageOf<T>::type v[VEC];
  __device__ __forceinline__ float get(int i) const { return bits_to_float<T>(v[i]); }
  __device__ __forceinline__ void set(int i, float x) { v[i] = float_to_bits<T>(x); }
  __device__ __forceinline__ void set_pair(int j, float low, float high) {
    set(2 * j, low);
    set(2 * j + 1, high);
  }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int i = 0; i < VEC; ++i) v[i] = 0;  // +0.0 in every float format
  }
  __device__ __forceinline__ void fill(float x) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) set(i, x);
  }
  /// Elements [first, first + M) of this pack from `part` (a pack of M elements of the same type).
  template <int M>
  __device__ __forceinline__ void assign(int first, const Pack<T, M>& part) {
#pragma unroll
    for (int i = 0; i < M; ++i) v[first + i] = part.v[i];
  }
  __device__ __forceinline__ static Pack load(const T* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Pack*>(p) = *this; }
};

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack<T, VEC, true> {
  unsigned w[VEC / 2];
  __device__ __forceinline__ float get(int i) const {
    return (i & 1) ? word_high_to_float<T>(w[i / 2]) : word_low_to_float<T>(w[i / 2]);
  }
  /// Sets one element (a read-modify-write of its word: for set-up code; set_pair in loops).
  __device__ __forceinline__ void set(int i, float x) {
    const unsigned bits = float_to_bits<T>(x);
    w[i / 2] = (i & 1) ? ((w[i / 2] & 0x0000ffffu) | (bits << 16)) : ((w[i / 2] & 0xffff0000u) | bits);
  }
  __device__ __forceinline__ void set_pair(int j, float low, float high) { w[j] = floats_to_word<T>(low, high); }
  __device__ __forceinline__ void zero() {
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) w[j] = 0u;  // +0.0 twice
  }
  __device__ __forceinline__ void fill(float x) {
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) set_pair(j, x, x);
  }
  template <int M>
  __device__ __forceinline__ void assign(int first, const Pack<T, M>& part) {
    static_assert(M % 2 == 0, "16-bit parts are whole words");
#pragma unroll
    for (int j = 0; j < M / 2; ++j) w[first / 2 + j] = part.w[j];
  }
  __device__ __forceinline__ static Pack load(const T* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Pack*>(p) = *this; }
};

template <typename T, int VEC>
__device__ __forceinline__ void store_vec(T* p, const float (&in)[VEC]) {
  Pack<T, VEC> pack;
  if constexpr (VEC % 2 == 0) {
#pragma unroll
    for (int j = 0; j < VEC / 2; ++j) pack.set_pair(j, in[2 * j], in[2 * j + 1]);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) pack.set(i, in[i]);
  }
  pack.store(p);
}

// ---- reductions ----
/// Sum over the `width` lanes of an aligned lane group (width a power of two, < warp size); every
/// lane of the warp must call it. The xor butterfly gives every lane the same, order-fixed result.
__device__ __forceinline__ float group_sum_in_warp(float v, int width) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    if (offset < width) v += __shfl_xor_sync(0xffffffffu, v, offset);  // unrolled: no loop counter
  return v;
}

/// Sum over a whole warp, unrolled and unconditional (a conditional shuffle is a branch around it:
/// 15 more branches per row in the fused kernel's loop at 6d0c0f6); every lane gets the same bits.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// Block-shared scratch of the row-group sums (row_group_sum): two buffers of up to kValues floats
/// per warp, taken in turn. A sum writes one buffer and reads it after a barrier of its group; the
/// next sum writes the other one, and the sum after that may reuse the first because every thread
/// of the group has passed the barrier of the sum in between only after its reads of the first
/// (other groups write other slots). Every thread of the block takes the same turns (it calls the
/// same sums in the same order).
struct GroupScratch {
  static constexpr int kValues = 2;                                  // per warp and sum
  static constexpr int kBuffer = kValues * (1024 / kWarpSize);       // floats per buffer
  static constexpr int kFloats = 2 * kBuffer;                        // declare __shared__ float s[kFloats]
  float* base;
  int turn = 0;
  __device__ __forceinline__ explicit GroupScratch(float* shared) : base(shared) {}
  __device__ __forceinline__ float* next() {
    float* buffer = base + turn * kBuffer;
    turn ^= 1;
    return buffer;
  }
};

/// Hardware barriers 1..kGroupBarriers are free for row groups (0 is __syncthreads; normkit uses no
/// other named barrier).
constexpr int kGroupBarriers = 15;

/// Barrier of this thread's row group of `group_threads` threads (a power of two, at least a warp):
/// a named barrier of the group when the block has at most kGroupBarriers groups, else the whole
/// block. A group's barrier leaves the other groups running: a block-wide barrier per row made the
/// 16 warps of a fused block (8 rows of 64 threads) wait for the slowest row every iteration (SASS
/// at 877b21c). Shifts, not divisions: both counts are powers of two.
__device__ __forceinline__ void group_barrier(int group_threads) {
  const int shift = __ffs(group_threads) - 1;
  const int groups = int(blockDim.x) >> shift;
  if (groups == 1 || groups > kGroupBarriers) {
    __syncthreads();
    return;
  }
  const int id = 1 + (int(threadIdx.x) >> shift);
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(group_threads) : "memory");
}

/// Groups of up to this many warps read all their warp sums directly in the group-local form of
/// row_group_sum (wider ones add them with a second butterfly).
constexpr int kGroupSumDirectWarps = 4;

/// The middle step of a sum over more than a warp: v, already summed over each warp (every lane of
/// the warp holds its warp's sums), stored by lane 0 of each warp (this thread's `warp` and `lane`)
/// in the next scratch buffer, [warp][k]. Returns the buffer; its values may be read after a
/// barrier of the threads that stored them.
template <int K>
__device__ __forceinline__ const float* publish_warp_sums(const float (&v)[K], GroupScratch& scratch, int warp, int lane) {
  static_assert(K <= GroupScratch::kValues, "GroupScratch holds up to kValues sums per warp");
  float* buffer = scratch.next();
  if (lane == 0) {
#pragma unroll
    for (int k = 0; k < K; ++k) buffer[K * warp + k] = v[k];
  }
  return buffer;
}

/// v = the sums of `warps` published warp sums (publish_warp_sums, from `first`, after their
/// barrier): lane l < warps reads warp l's, the other lanes take 0, and a warp butterfly adds them.
template <int K>
__device__ __forceinline__ void add_warp_sums(float (&v)[K], const float* first, int warps, int lane) {
  const bool mine = lane < warps;
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(mine ? first[K * lane + k] : 0.f);
}

/// Sums each of v[0..K) over a row group of `group_threads` threads (a power of two); every lane of
/// the group gets the same bits. Groups up to a warp reduce with an xor butterfly; larger groups
/// first reduce each warp and publish the warp sums in `scratch`, then:
/// - kGroupLocal (the backward kernels): after a barrier of the group only (group_barrier), groups of
///   2 or 4 warps read all their warp sums in every lane and add them in warp order, no shuffles
///   (the fused kernel's common layout is 64 threads a row; at 8192 x 768 this and the wider partial
///   reduce took the LayerNorm full backward from 23.1 to 18.8 us, A/B at 877b21c);
/// - otherwise, and for groups of more than 4 warps: after a block barrier (kGroupLocal: the group's),
///   lane l < warps reads warp l's sum (the other lanes take 0) and one more warp butterfly adds them.
///   The forward keeps this form throughout: with the group-local one ptxas spilled its LayerNorm
///   bf16 staged 4 x 8 instance (40 bytes) and 131072 x 4096 took 8 % longer (same A/B).
/// Either way a fixed order, the same in every lane. One barrier per call, none for groups of up to
/// a warp. Every thread of the group must call it; every thread of the block when the barrier is the
/// block's (!kGroupLocal, or more than kGroupBarriers groups).
template <int K, bool kGroupLocal = true>
__device__ __forceinline__ void row_group_sum(float (&v)[K], int group_threads, GroupScratch& scratch) {
  if (group_threads < kWarpSize) {
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = group_sum_in_warp(v[k], group_threads);
    return;
  }
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  if (group_threads == kWarpSize) return;
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  const float* buffer = publish_warp_sums(v, scratch, warp, lane);
  const int warps_per_group = group_threads / kWarpSize;
  const int first_warp = warp & ~(warps_per_group - 1);  // a power of two: no integer division
  const float* group = buffer + K * first_warp;
  if constexpr (kGroupLocal) {
    group_barrier(group_threads);
    if (warps_per_group <= kGroupSumDirectWarps) {
      static_assert(kGroupSumDirectWarps == 4, "the reads below take 2 or 4 warp sums");
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float sum = group[k] + group[K + k];
        if (warps_per_group == 4) sum = (sum + group[2 * K + k]) + group[3 * K + k];
        v[k] = sum;
      }
      return;
    }
  } else {
    __syncthreads();
  }
  add_warp_sums(v, group, warps_per_group, lane);
}

/// row_group_sum over the whole block, finished in its first warp only: returns true there, with v
/// the block's sums (the same bits as row_group_sum's butterfly over the warp sums); the other warps
/// return false with their own warp's sums. For sums only the first warp uses (a split row's block
/// sums, which its lanes send to the cluster, ClusterSum::send): the other warps skip the second
/// butterfly and go on to wait for the cluster's. Every thread of the block must call it.
template <int K>
__device__ __forceinline__ bool block_sum_in_first_warp(float (&v)[K], GroupScratch& scratch) {
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = warp_sum(v[k]);
  const int warp = int(threadIdx.x) / kWarpSize, lane = int(threadIdx.x) % kWarpSize;
  const float* buffer = publish_warp_sums(v, scratch, warp, lane);
  __syncthreads();
  if (warp != 0) return false;
  add_warp_sums(v, buffer, int(blockDim.x) / kWarpSize, lane);
  return true;
}

/// row_group_sum of one value.
template <bool kGroupLocal = true>
__device__ __forceinline__ float row_group_sum1(float a, int group_threads, GroupScratch& scratch) {
  float v[1] = {a};
  row_group_sum<1, kGroupLocal>(v, group_threads, scratch);
  return v[0];
}

/// row_group_sum of two values (the backward's row sums).
template <bool kGroupLocal = true>
__device__ __forceinline__ void row_group_sum2(float& a, float& b, int group_threads, GroupScratch& scratch) {
  float v[2] = {a, b};
  row_group_sum<2, kGroupLocal>(v, group_threads, scratch);
  a = v[0];
  b = v[1];
}

/// Sum over a whole block of THREADS threads (a compile-time multiple of the warp size); every thread
/// gets the same bits. Each warp's butterfly, the warp sums published in `warp_sums` (THREADS /
/// kWarpSize floats of shared memory), one __syncthreads, then every thread adds all warp sums in warp
/// order (broadcast reads, no second butterfly). Consecutive sums must take different `warp_sums`
/// buffers: a thread may write the next sum's while others still read this one's.
/// kFewRegisters: the warp sums are read 4 at a time, a chunk a loop iteration (not unrolled), where
/// all at once would hold one register per warp at the kernel's register peak (the same sum, in the
/// same order: the same bits). `warp_sums` must then be 16-byte aligned.
template <int THREADS, bool kFewRegisters = false>
__device__ __forceinline__ float block_sum(float v, float* warp_sums) {
  static_assert(THREADS % kWarpSize == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  constexpr int kWarps = THREADS / kWarpSize;
  v = warp_sum(v);
  if constexpr (kWarps == 1) {
    return v;
  } else {
    if (threadIdx.x % kWarpSize == 0) warp_sums[threadIdx.x / kWarpSize] = v;
    __syncthreads();
    if constexpr (kFewRegisters && kWarps % 4 == 0) {
      const float4* chunks = reinterpret_cast<const float4*>(warp_sums);
      float4 c = chunks[0];
      float sum = ((c.x + c.y) + c.z) + c.w;
#pragma unroll 1
      for (int k = 1; k < kWarps / 4; ++k) {
        c = chunks[k];
        sum = (((sum + c.x) + c.y) + c.z) + c.w;
      }
      return sum;
    } else {
      float sum = warp_sums[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) sum += warp_sums[w];
      return sum;
    }
  }
}

// ---- asynchronous global -> shared copies (cp.async, sm_80 and later) ----
/// Shared-memory address (the .shared window) of a generic pointer into shared memory.
__device__ __forceinline__ unsigned shared_address(const void* smem) {
  return static_cast<unsigned>(__cvta_generic_to_shared(smem));
}
/// `value` through an empty asm statement: the compiler must keep the result in a register and cannot
/// re-derive it where it is used. For shared-memory base addresses, which nvcc otherwise recomputes
/// at every use under register pressure (on sm_90 a special-register read of the CTA's cluster id
/// and three integer instructions each time: the forward's SASS at 13ce181).
__device__ __forceinline__ unsigned opaque(unsigned value) {
  asm volatile("" : "+r"(value));
  return value;
}
/// 16 bytes from a shared_address() (16-byte aligned) into `out`. Volatile, like the cp.async
/// statements: the compiler keeps volatile asm in program order, so a read of a staged slot stays
/// after the cp.async.wait_group that makes the slot's copy visible, and before the next copy into it.
template <typename P>
__device__ __forceinline__ void load_shared_16(unsigned smem, P& out) {
  static_assert(sizeof(P) == 16, "16-byte loads");
  unsigned* w = reinterpret_cast<unsigned*>(&out);
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "r"(smem));
}
/// 16 bytes to a shared_address() (16-byte aligned), volatile like load_shared_16: a later
/// load_shared_16 of the same slot by this thread stays after it.
template <typename P>
__device__ __forceinline__ void store_shared_16(unsigned smem, const P& in) {
  static_assert(sizeof(P) == 16, "16-byte stores");
  const unsigned* w = reinterpret_cast<const unsigned*>(&in);
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}
/// 4 bytes (a float) from a shared_address().
__device__ __forceinline__ float load_shared_4(unsigned smem) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(smem));
  return v;
}
/// Copies 16 bytes (both addresses 16-byte aligned) without passing through registers; `smem` is a
/// shared_address().
__device__ __forceinline__ void cp_async_16(unsigned smem, const void* global) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem), "l"(global) : "memory");
#else
  asm volatile("{\n .reg .b32 a, b, c, d;\n ld.global.v4.b32 {a, b, c, d}, [%1];\n st.shared.v4.b32 [%0], {a, b, c, d};\n}\n" ::"r"(smem),
               "l"(global)
               : "memory");
#endif
}
/// cp_async_16 when `copy`, else 16 zero bytes into `smem` (the source is not read: cp.async with a
/// source size of 0 fills the whole destination with zeros).
__device__ __forceinline__ void cp_async_16_or_zeros(unsigned smem, const void* global, bool copy) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(global), "r"(copy ? 16 : 0) : "memory");
#else
  if (copy) {
    cp_async_16(smem, global);
  } else {
    asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(smem), "r"(0) : "memory");
  }
#endif
}
/// Copies 4 bytes (both addresses 4-byte aligned); `smem` is a shared_address().
__device__ __forceinline__ void cp_async_4(unsigned smem, const void* global) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smem), "l"(global) : "memory");
#else
  asm volatile("{\n .reg .b32 a;\n ld.global.b32 a, [%1];\n st.shared.b32 [%0], a;\n}\n" ::"r"(smem), "l"(global) : "memory");
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

/// Device-side views of the row tensors (64-bit strides: M * N may exceed 2^31).
template <typename T>
struct RowPtr {
  T* data;
  std::int64_t stride;
  __device__ __forceinline__ T* row(std::int64_t r) const { return data + r * stride; }
};

}  // namespace normkit::cuda
