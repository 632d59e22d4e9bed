// normkit-bench: where the benchmark runs. One interface, two implementations:
//  - CudaBackend (backend_cuda.cu, only when normkit is built with CUDA): device memory, a device
//    kernel for random inputs, CUDA events around back-to-back stream launches, CUDA-graph replay,
//    device-to-device copy bandwidth;
//  - CpuBackend (backend_cpu.cpp, always built): host memory and the host clock, used when normkit
//    was built without CUDA or no CUDA device is visible (normkit then runs its CPU reference path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "normkit/normkit.h"

namespace nkbench {

/// One benchmarked call: `index` counts calls from 0 within a measurement (rotation picks the
/// buffer set from it).
using Call = std::function<void(std::int64_t index)>;

/// A measurement made ready to repeat (its warm-up done, in graph mode its graph captured):
/// each run() times one run and returns its per-call µs. Several can be alive at once, so that the
/// runs of different strategies can take turns (harness.h's measure_strategies).
class TimedRuns {
 public:
  virtual ~TimedRuns() = default;
  virtual double run() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual normkit::Device device() const = 0;
  /// The stream every timed call runs on (nullptr on the CPU).
  virtual CUstream_st* stream() const = 0;
  /// "NVIDIA H200 (132 SMs, L2 60 MiB, 139.8 GiB)" or "CPU reference path (host)".
  virtual std::string description() const = 0;
  virtual std::string device_name() const = 0;
  /// Bytes of last-level cache to defeat by rotating buffers (0: no rotation).
  virtual std::int64_t l2_bytes() const = 0;
  /// Memory currently free for benchmark buffers.
  virtual std::size_t free_memory() const = 0;
  /// The facts the planner would use on this device (CPU path: normkit's H200 defaults).
  virtual normkit::DeviceFacts planner_facts() const = 0;

  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  /// Fills `count` elements of `dtype` with pseudo-random N(0, 1) values (counter-based, seeded).
  virtual void fill_normal(void* ptr, normkit::DType dtype, std::int64_t count, std::uint64_t seed) = 0;
  virtual void synchronize() = 0;

  /// Copy bandwidth in bytes/s counting bytes read + bytes written (best of `repeats` copies of
  /// `bytes` each). Also returns the bytes used through *used_bytes.
  virtual double copy_bandwidth(std::size_t bytes, int repeats, std::size_t* used_bytes) = 0;

  /// Stream launches: `warmup` untimed calls now; each run() then times `iters` back-to-back calls.
  /// Call indices continue across warm-up and runs (0, 1, 2, ...).
  virtual std::unique_ptr<TimedRuns> prepare_stream(const Call& call, int warmup, int iters) = 0;
  /// Graph replay: `warmup` untimed stream calls, then `calls` calls (indices 0..calls-1) captured
  /// into one CUDA graph and replayed once untimed, all now; each run() times one replay.
  virtual std::unique_ptr<TimedRuns> prepare_graph(const Call& call, int warmup, int calls) = 0;
  virtual bool graphs_supported() const = 0;
  /// Time of a single call in µs (used to keep slow strategies within a time budget).
  virtual double time_once(const Call& call, std::int64_t index) = 0;
};

/// Picks the CUDA backend when normkit was built with CUDA and sees a device; otherwise the CPU
/// backend, with the reason in *why_cpu.
std::unique_ptr<Backend> make_backend(std::string* why_cpu);

std::unique_ptr<Backend> make_cpu_backend();
#if defined(NORMKIT_WITH_CUDA)
/// nullptr (and *why) when no device can be used.
std::unique_ptr<Backend> make_cuda_backend(std::string* why);
#endif

}  // namespace nkbench
