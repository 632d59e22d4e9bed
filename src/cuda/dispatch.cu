// The CUDA layer's host entry points: device facts, pointer classification, and the (T, W) type
// switch that hands a validated problem and its plan to the strategy launchers.
#include <algorithm>
#include <mutex>
#include <vector>

#include "core/device_support.h"
#include "cuda/common.cuh"
#include "cuda/dispatch.h"
#include "cuda/kernels.h"

// nvcc's __CUDA_ARCH_LIST__ (the architectures this file is built for, e.g. 800,900) as a string
#define NORMKIT_STRINGIFY_ARGS(...) #__VA_ARGS__
#define NORMKIT_STRINGIFY(...) NORMKIT_STRINGIFY_ARGS(__VA_ARGS__)

namespace normkit::detail {

using cuda::check;

namespace {

/// Stands in for the fused split walk in the cluster occupancy queries: what the query counts is
/// blocks of one block an SM (the dynamic shared memory asked for leaves room for no second one). Also
/// the probe of whether this build has code for the device at all (cuda_device_facts).
__global__ void one_block_an_sm_kernel() {}

/// DeviceFacts::cluster_sms of the current device (sm_90 on): SMs that clusters of k = 1..16 blocks
/// fill at once at one block an SM; 0 where the driver does not answer (the planner then keeps the
/// blocks a row needs).
void fill_cluster_sms(DeviceFacts& facts, int threads) {
  for (int& sms : facts.cluster_sms) sms = 0;
  if (facts.max_cluster_blocks < 2) return;
  const int smem = int(facts.smem_per_sm / 2) + 1024;  // more than half an SM's shared memory
  if (cudaFuncSetAttribute(one_block_an_sm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess ||
      cudaFuncSetAttribute(one_block_an_sm_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return;
  }
  const int largest = std::max(facts.max_cluster_blocks, facts.max_nonportable_cluster_blocks);
  for (int blocks = 1; blocks <= std::min(largest, kMaxFusedSplitBlocks); ++blocks) {
    int clusters = 0;
    if (cuda::max_active_clusters(one_block_an_sm_kernel, dim3(unsigned(threads)), std::size_t(smem), blocks, clusters) !=
        cudaSuccess) {
      (void)cudaGetLastError();
      clusters = 0;
    }
    facts.cluster_sms[blocks - 1] = clusters * blocks;
  }
}

}  // namespace

DeviceFacts cuda_device_facts() {
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mutex;
  static std::vector<std::optional<DeviceFacts>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  if (device >= int(cache.size())) cache.resize(std::size_t(device) + 1);
  if (!cache[std::size_t(device)]) {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
    // A GPU outside the architectures built has no kernel image: say so, and how to rebuild, before the
    // first launch fails with the runtime's bare message (any kernel of the library answers alike).
    cudaFuncAttributes image{};
    const cudaError_t has_image = cudaFuncGetAttributes(&image, one_block_an_sm_kernel);
    if (has_image == cudaErrorNoKernelImageForDevice || has_image == cudaErrorInvalidDeviceFunction) {
      (void)cudaGetLastError();
#ifdef __CUDA_ARCH_LIST__
      const std::string built = NORMKIT_STRINGIFY(__CUDA_ARCH_LIST__);
#else
      const std::string built;
#endif
      throw CudaError(no_kernels_for_device_message(prop.name, prop.major, prop.minor, built));
    }
    check(has_image, "cudaFuncGetAttributes");
    DeviceFacts facts;
    facts.sm_count = prop.multiProcessorCount;
    facts.l2_bytes = prop.l2CacheSize;
    facts.smem_per_block = std::int64_t(prop.sharedMemPerBlock);
    facts.smem_per_block_optin = std::int64_t(prop.sharedMemPerBlockOptin);
    facts.smem_per_sm = std::int64_t(prop.sharedMemPerMultiprocessor);
    facts.warp_size = prop.warpSize;
    facts.max_threads_per_block = prop.maxThreadsPerBlock;
    facts.max_cluster_blocks = prop.major >= 9 ? kPortableClusterBlocks : 0;  // thread-block clusters: sm_90 on
    facts.max_nonportable_cluster_blocks = prop.major >= 9 ? kMaxFusedSplitBlocks : 0;  // sm_90: 16 when opted in
    facts.programmatic_launch = prop.major >= 9;         // programmatic dependent launch: sm_90 on
    facts.builtin_table = builtin_table_for(prop.name, prop.multiProcessorCount);
    fill_cluster_sms(facts, kFusedBlockThreads);
    if (facts.warp_size != kWarpSize)
      throw CudaError("normkit: device warp size " + std::to_string(facts.warp_size) + " but kernels are built for " +
                      std::to_string(kWarpSize));
    cache[std::size_t(device)] = facts;
  }
  return *cache[std::size_t(device)];
}

bool cuda_device_present() {
  // Asked by every validated call (pointer classification): the answer cannot change within a process.
  static const bool present = [] {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky "no device" error
      return false;
    }
    return count > 0;
  }();
  return present;
}

PointerClass classify_pointer(const void* ptr) {
  if (ptr == nullptr || !cuda_device_present()) return {};
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
    (void)cudaGetLastError();
    return {};
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice: {
      int current = -1;
      if (cudaGetDevice(&current) != cudaSuccess) {
        (void)cudaGetLastError();
        return {PointerKind::Device, attributes.device};
      }
      return {attributes.device == current ? PointerKind::Device : PointerKind::OtherDevice, attributes.device,
              current};
    }
    case cudaMemoryTypeUnregistered: return {PointerKind::Host};
    default: return {};  // pinned host and managed memory are reachable from every device
  }
}

namespace {

/// Calls f(T{}, W{}) for the problem's activation and weight dtypes.
template <typename F>
void dispatch_types(DType activation, DType weight, F&& f) {
  switch (activation) {
    case DType::F32: f(float{}, float{}); return;
    case DType::F16:
      if (weight == DType::F32) f(__half{}, float{}); else f(__half{}, __half{});
      return;
    case DType::BF16:
      if (weight == DType::F32) f(__nv_bfloat16{}, float{}); else f(__nv_bfloat16{}, __nv_bfloat16{});
      return;
    case DType::F64: break;
  }
  throw CudaError(std::string("normkit: internal error: no CUDA kernels for dtype ") + dtype_name(activation));
}

DType forward_weight_dtype(const ForwardProblem& p) {
  if (p.weight) return p.weight->dtype;
  if (p.bias) return p.bias->dtype;
  return p.x.dtype;
}

}  // namespace

void cuda_forward(const ForwardProblem& p, const Plan& plan, CUstream_st* stream) {
  dispatch_types(p.x.dtype, forward_weight_dtype(p), [&](auto t, auto w) {
    if (plan.row.block_rows)
      cuda::launch_forward_block_rows<decltype(t), decltype(w)>(p, plan, stream);
    else
      cuda::launch_forward<decltype(t), decltype(w)>(p, plan, stream);
  });
}

void cuda_backward(const BackwardProblem& p, const Plan& plan, void* workspace, CUstream_st* stream) {
  if (p.rows() == 0) {
    // No rows: the weight gradients are sums over nothing.
    if (p.dweight) check(cudaMemsetAsync(p.dweight->data, 0, std::size_t(p.cols()) * dtype_size(p.dweight->dtype), stream), "cudaMemsetAsync(dweight)");
    if (p.dbias) check(cudaMemsetAsync(p.dbias->data, 0, std::size_t(p.cols()) * dtype_size(p.dbias->dtype), stream), "cudaMemsetAsync(dbias)");
    return;
  }
  float* partials = static_cast<float*>(workspace);
  dispatch_types(p.x.dtype, p.weight_dtype(), [&](auto t, auto w) {
    using T = decltype(t);
    using W = decltype(w);
    if (plan.strategy == Strategy::Fused) {
      // dX alone: no partials to keep, plain dX -- unless the row is split over a cluster, whose
      // layout (the fused kernel's block and items) only the fused kernel has instances for.
      if (plan.mask.any_gamma_beta() || plan.row.split > 1) cuda::launch_fused_backward<T, W>(p, plan, partials, stream);
      else cuda::launch_backward_dx<T, W>(p, plan, stream);
      return;
    }
    if (plan.one_launch) {  // dX and the tiled strips in one grid
      cuda::launch_dx_and_tiled<T, W>(p, plan, stream);
      return;
    }
    cuda::launch_backward_dx<T, W>(p, plan, stream);
    if (!plan.mask.any_gamma_beta()) return;
    // gamma/beta next to dX (both only read x and dy); launched normally when it is the call's first kernel
    const bool programmatic = plan.programmatic_launch && plan.mask.dx;
    switch (plan.strategy) {
      case Strategy::Simple: cuda::launch_gamma_beta_simple<T, W>(p, plan, programmatic, stream); break;
      case Strategy::Tiled: cuda::launch_gamma_beta_tiled<T, W>(p, plan, programmatic, stream); break;
      case Strategy::TwoPass: cuda::launch_gamma_beta_two_pass<T, W>(p, plan, partials, programmatic, stream); break;
      default: throw CudaError("normkit: internal error: unplanned strategy");
    }
  });
}

void* cuda_alloc_async(std::size_t bytes, CUstream_st* stream) {
  void* ptr = nullptr;
  check(cudaMallocAsync(&ptr, bytes, stream), "cudaMallocAsync(workspace)");
  return ptr;
}

void cuda_free_async(void* ptr, CUstream_st* stream) { check(cudaFreeAsync(ptr, stream), "cudaFreeAsync(workspace)"); }

}  // namespace normkit::detail
