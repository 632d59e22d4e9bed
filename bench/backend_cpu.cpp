// normkit-bench: the CPU backend (host memory, host clock). normkit runs its float64 reference here.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "backend.h"
#include "rng.h"

namespace nkbench {
namespace {

using Clock = std::chrono::steady_clock;

double elapsed_us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

/// Host memory available to allocate, from /proc/meminfo (MemAvailable); 0 when unknown.
std::size_t host_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::size_t value = 0;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemAvailable:") return value * 1024;
  }
  return 0;
}

/// Calls on the host, timed with the host clock.
class HostRuns final : public TimedRuns {
 public:
  HostRuns(const Call& call, int warmup, int iters) : call_(call), iters_(iters) {
    for (int i = 0; i < warmup; ++i) call_(index_++);
  }
  double run() override {
    const auto t0 = Clock::now();
    for (int i = 0; i < iters_; ++i) call_(index_++);
    return elapsed_us(t0, Clock::now()) / std::max(iters_, 1);
  }

 private:
  Call call_;
  int iters_;
  std::int64_t index_ = 0;
};

class CpuBackend final : public Backend {
 public:
  normkit::Device device() const override { return normkit::Device::Cpu; }
  CUstream_st* stream() const override { return nullptr; }
  std::string description() const override { return "CPU reference path (host memory, host clock)"; }
  std::string device_name() const override { return "CPU (normkit reference path)"; }
  std::int64_t l2_bytes() const override { return 0; }
  std::size_t free_memory() const override { return host_available_bytes(); }
  normkit::DeviceFacts planner_facts() const override { return normkit::DeviceFacts::h200(); }

  void* alloc(std::size_t bytes) override {
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
    void* p = std::aligned_alloc(256, rounded);
    if (!p) throw std::runtime_error("host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
  }
  void release(void* ptr) override { std::free(ptr); }

  void fill_normal(void* ptr, normkit::DType dtype, std::int64_t count, std::uint64_t seed) override {
    for (std::int64_t i = 0; i < count; ++i) {
      const float v = normal_at(seed, std::uint64_t(i));
      switch (dtype) {
        case normkit::DType::F32: static_cast<float*>(ptr)[i] = v; break;
        case normkit::DType::F64: static_cast<double*>(ptr)[i] = v; break;
        case normkit::DType::F16: static_cast<std::uint16_t*>(ptr)[i] = host_float_to_half(v); break;
        case normkit::DType::BF16: static_cast<std::uint16_t*>(ptr)[i] = host_float_to_bf16(v); break;
      }
    }
  }
  void synchronize() override {}

  double copy_bandwidth(std::size_t bytes, int repeats, std::size_t* used_bytes) override {
    void* a = alloc(bytes);
    void* b = alloc(bytes);
    std::memset(a, 1, bytes);
    std::memset(b, 0, bytes);
    double best = 0;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      const auto t0 = Clock::now();
      std::memcpy(b, a, bytes);
      const auto t1 = Clock::now();
      best = std::max(best, 2.0 * double(bytes) / (elapsed_us(t0, t1) * 1e-6));
    }
    release(a);
    release(b);
    if (used_bytes) *used_bytes = bytes;
    return best;
  }

  std::unique_ptr<TimedRuns> prepare_stream(const Call& call, int warmup, int iters) override {
    return std::make_unique<HostRuns>(call, warmup, iters);
  }
  std::unique_ptr<TimedRuns> prepare_graph(const Call&, int, int) override {
    throw std::runtime_error("CUDA-graph replay needs a CUDA device");
  }
  bool graphs_supported() const override { return false; }
  double time_once(const Call& call, std::int64_t index) override {
    const auto t0 = Clock::now();
    call(index);
    return elapsed_us(t0, Clock::now());
  }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

std::unique_ptr<Backend> make_backend(std::string* why_cpu) {
#if defined(NORMKIT_WITH_CUDA)
  std::string why;
  if (auto cuda = make_cuda_backend(&why)) return cuda;
  if (why_cpu) *why_cpu = "no CUDA device (" + why + "): timing the CPU reference path";
#else
  if (why_cpu) *why_cpu = "built without CUDA: timing the CPU reference path";
#endif
  return make_cpu_backend();
}

}  // namespace nkbench
