// normkit-bench: the CUDA backend. Every CUDA runtime call is checked (NKB_CUDA throws with the
// call, file, line and the runtime's message).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>

#include "backend.h"
#include "rng.h"

#define NKB_CUDA(call)                                                                        \
  do {                                                                                        \
    const cudaError_t nkb_err_ = (call);                                                      \
    if (nkb_err_ != cudaSuccess) {                                                            \
      throw std::runtime_error(std::string("CUDA error: ") + #call + " at " + __FILE__ + ":" + \
                               std::to_string(__LINE__) + ": " + cudaGetErrorString(nkb_err_)); \
    }                                                                                         \
  } while (0)

namespace nkbench {
namespace {

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ double from_float<double>(float v) { return double(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <typename T>
__global__ void fill_normal_kernel(T* out, std::int64_t count, std::uint64_t seed) {
  const std::int64_t stride = std::int64_t(gridDim.x) * blockDim.x;
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    out[i] = from_float<T>(normal_at(seed, std::uint64_t(i)));
  }
}

/// Owns a pair of CUDA events.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  EventPair() {
    NKB_CUDA(cudaEventCreate(&start));
    NKB_CUDA(cudaEventCreate(&stop));
  }
  ~EventPair() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  double elapsed_us() {
    NKB_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    NKB_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return double(ms) * 1000.0;
  }
};

/// Back-to-back launches on the stream between two events.
class StreamRuns final : public TimedRuns {
 public:
  StreamRuns(const Call& call, cudaStream_t stream, int warmup, int iters) : call_(call), stream_(stream), iters_(iters) {
    for (int i = 0; i < warmup; ++i) call_(index_++);
    NKB_CUDA(cudaGetLastError());
  }
  double run() override {
    NKB_CUDA(cudaEventRecord(ev_.start, stream_));
    for (int i = 0; i < iters_; ++i) call_(index_++);
    NKB_CUDA(cudaEventRecord(ev_.stop, stream_));
    const double per_call = ev_.elapsed_us() / std::max(iters_, 1);
    NKB_CUDA(cudaGetLastError());
    return per_call;
  }

 private:
  Call call_;
  cudaStream_t stream_;
  int iters_;
  std::int64_t index_ = 0;
  EventPair ev_;
};

/// One CUDA graph of `calls` calls, replayed between two events.
class GraphRuns final : public TimedRuns {
 public:
  GraphRuns(const Call& call, cudaStream_t stream, int warmup, int calls) : stream_(stream), calls_(calls) {
    for (int i = 0; i < warmup; ++i) call(i);
    NKB_CUDA(cudaStreamSynchronize(stream_));
    // ThreadLocal: any capture-unsafe runtime call made by this thread inside normkit fails loudly.
    NKB_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      for (int i = 0; i < calls; ++i) call(i);
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(stream_, &broken);
      if (broken) cudaGraphDestroy(broken);
      cudaGetLastError();  // clear the capture error; rethrow the original
      throw;
    }
    NKB_CUDA(cudaStreamEndCapture(stream_, &graph_));
    try {
      NKB_CUDA(cudaGraphInstantiate(&exec_, graph_, 0));
      NKB_CUDA(cudaGraphLaunch(exec_, stream_));  // warm replay
      NKB_CUDA(cudaStreamSynchronize(stream_));
    } catch (...) {
      release();  // a constructor that throws gets no destructor call
      throw;
    }
  }
  ~GraphRuns() override { release(); }
  GraphRuns(const GraphRuns&) = delete;
  GraphRuns& operator=(const GraphRuns&) = delete;

  double run() override {
    NKB_CUDA(cudaEventRecord(ev_.start, stream_));
    NKB_CUDA(cudaGraphLaunch(exec_, stream_));
    NKB_CUDA(cudaEventRecord(ev_.stop, stream_));
    return ev_.elapsed_us() / std::max(calls_, 1);
  }

 private:
  void release() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
    exec_ = nullptr;
    graph_ = nullptr;
  }

  cudaStream_t stream_;
  int calls_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  EventPair ev_;
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int ordinal) : ordinal_(ordinal) {
    NKB_CUDA(cudaSetDevice(ordinal_));
    NKB_CUDA(cudaGetDeviceProperties(&prop_, ordinal_));
    NKB_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~CudaBackend() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  normkit::Device device() const override { return normkit::Device::Cuda; }
  CUstream_st* stream() const override { return stream_; }
  std::string device_name() const override { return prop_.name; }
  std::string description() const override {
    std::ostringstream os;
    os << prop_.name << " (cc " << prop_.major << "." << prop_.minor << ", " << prop_.multiProcessorCount
       << " SMs, L2 " << (prop_.l2CacheSize >> 20) << " MiB, "
       << double(prop_.totalGlobalMem) / double(1ULL << 30) << " GiB)";
    // what the planner sizes fused split rows by (DeviceFacts::cluster_sms), as the library read it
    const normkit::DeviceFacts facts = normkit::current_device_facts();
    os << "; SMs filled by clusters of 1..16 blocks:";
    for (int sms : facts.cluster_sms) os << ' ' << sms;
    return os.str();
  }
  std::int64_t l2_bytes() const override { return prop_.l2CacheSize; }
  std::size_t free_memory() const override {
    std::size_t free_b = 0, total_b = 0;
    NKB_CUDA(cudaMemGetInfo(&free_b, &total_b));
    return free_b;
  }
  normkit::DeviceFacts planner_facts() const override { return normkit::current_device_facts(); }

  void* alloc(std::size_t bytes) override {
    void* p = nullptr;
    NKB_CUDA(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
    return p;
  }
  void release(void* ptr) override {
    if (ptr) NKB_CUDA(cudaFree(ptr));
  }

  void fill_normal(void* ptr, normkit::DType dtype, std::int64_t count, std::uint64_t seed) override {
    if (count <= 0) return;
    const int threads = 256;
    const std::int64_t want = (count + threads - 1) / threads;
    const int blocks = int(std::min<std::int64_t>(want, std::int64_t(prop_.multiProcessorCount) * 16));
    switch (dtype) {
      case normkit::DType::F32:
        fill_normal_kernel<<<blocks, threads, 0, stream_>>>(static_cast<float*>(ptr), count, seed);
        break;
      case normkit::DType::F64:
        fill_normal_kernel<<<blocks, threads, 0, stream_>>>(static_cast<double*>(ptr), count, seed);
        break;
      case normkit::DType::F16:
        fill_normal_kernel<<<blocks, threads, 0, stream_>>>(static_cast<__half*>(ptr), count, seed);
        break;
      case normkit::DType::BF16:
        fill_normal_kernel<<<blocks, threads, 0, stream_>>>(static_cast<__nv_bfloat16*>(ptr), count, seed);
        break;
    }
    NKB_CUDA(cudaGetLastError());
  }
  void synchronize() override { NKB_CUDA(cudaStreamSynchronize(stream_)); }

  double copy_bandwidth(std::size_t bytes, int repeats, std::size_t* used_bytes) override {
    void* a = alloc(bytes);
    void* b = alloc(bytes);
    double best = 0;
    try {
      NKB_CUDA(cudaMemsetAsync(a, 0x3c, bytes, stream_));
      NKB_CUDA(cudaMemsetAsync(b, 0, bytes, stream_));
      NKB_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream_));  // warm-up
      EventPair ev;
      for (int r = 0; r < std::max(repeats, 1); ++r) {
        NKB_CUDA(cudaEventRecord(ev.start, stream_));
        NKB_CUDA(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream_));
        NKB_CUDA(cudaEventRecord(ev.stop, stream_));
        const double us = ev.elapsed_us();
        best = std::max(best, 2.0 * double(bytes) / (us * 1e-6));
      }
    } catch (...) {
      cudaFree(a);
      cudaFree(b);
      throw;
    }
    release(a);
    release(b);
    if (used_bytes) *used_bytes = bytes;
    return best;
  }

  std::unique_ptr<TimedRuns> prepare_stream(const Call& call, int warmup, int iters) override {
    return std::make_unique<StreamRuns>(call, stream_, warmup, iters);
  }
  std::unique_ptr<TimedRuns> prepare_graph(const Call& call, int warmup, int calls) override {
    return std::make_unique<GraphRuns>(call, stream_, warmup, calls);
  }
  bool graphs_supported() const override { return true; }

  double time_once(const Call& call, std::int64_t index) override {
    EventPair ev;
    NKB_CUDA(cudaEventRecord(ev.start, stream_));
    call(index);
    NKB_CUDA(cudaEventRecord(ev.stop, stream_));
    return ev.elapsed_us();
  }

 private:
  int ordinal_ = 0;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = cudaGetErrorString(err);
    return nullptr;
  }
  if (count == 0) {
    if (why) *why = "cudaGetDeviceCount reports 0 devices";
    return nullptr;
  }
  if (!normkit::cuda_available()) {
    if (why) *why = "normkit::cuda_available() is false";
    return nullptr;
  }
  int ordinal = 0;
  NKB_CUDA(cudaGetDevice(&ordinal));
  return std::make_unique<CudaBackend>(ordinal);
}

}  // namespace nkbench
