// normkit public types: dtypes, views over row-major matrices, execution settings, errors.
// Host-only header: it needs no CUDA headers, so C++ users without CUDA can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

// Same declaration as the CUDA runtime's, so a cudaStream_t converts implicitly.
struct CUstream_st;

namespace normkit {

/// Element types. F64 is served by the CPU reference path only (gradcheck, fp64 tensors).
enum class DType : std::uint8_t { F32, F16, BF16, F64 };

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

/// Thrown for every invalid argument. The message names the argument and the expected vs actual value.
/// Nothing is written to any output when it is thrown by validation.
class Error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Thrown when the CUDA runtime reports a failure (launch error, no device, out of memory).
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A read-only row-major matrix: `rows` rows of `cols` contiguous elements, consecutive rows
/// `row_stride` elements apart (row_stride >= cols). A row_stride of -1 means "packed" (= cols).
struct ConstRows {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = -1;
  std::int64_t stride() const { return row_stride < 0 ? cols : row_stride; }
};

/// A writable row-major matrix (see ConstRows).
struct Rows {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::int64_t row_stride = -1;
  std::int64_t stride() const { return row_stride < 0 ? cols : row_stride; }
  operator ConstRows() const { return {data, dtype, rows, cols, row_stride}; }
};

/// A read-only contiguous vector (weight, bias, per-row mean/rstd).
struct ConstVec {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t size = 0;
};

/// A writable contiguous vector.
struct Vec {
  void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t size = 0;
  operator ConstVec() const { return {data, dtype, size}; }
};

enum class Device : std::uint8_t { Cpu, Cuda };

/// Longest row (N) the CUDA path accepts: 2^30 elements (a row of 2 GiB in fp16). Longer rows throw
/// normkit::Error; the CPU path has no such limit.
constexpr std::int64_t kMaxCudaRowLength = std::int64_t(1) << 30;

/// How the gamma/beta (weight-gradient) reduction of a backward call is computed.
/// Auto asks the planner; any other value forces that strategy or fails with normkit::Error.
enum class Strategy : std::uint8_t { Auto, Simple, Tiled, TwoPass, Fused };

const char* strategy_name(Strategy strategy);
/// Parses "auto", "simple", "tiled", "two_pass", "fused"; throws normkit::Error otherwise.
Strategy parse_strategy(const std::string& name);

/// Caller-owned scratch memory on the call's device. Query its size with *_workspace_size().
struct Workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

struct PlannerTable;  // normkit/plan.h

/// Where and how a call runs.
struct ExecConfig {
  Device device = Device::Cuda;
  CUstream_st* stream = nullptr;  ///< CUDA stream (nullptr = legacy default stream); ignored on CPU.
  Strategy strategy = Strategy::Auto;
  /// The planner's thresholds for this call (nullptr: default_planner_table(device facts), i.e. the file
  /// NORMKIT_PLANNER_TABLE names, else the GPU's built-in table: the H100 SXM's on that GPU, the H200's
  /// on any other and on the CPU path). Must outlive the call.
  const PlannerTable* table = nullptr;
  /// true: the caller has already made sure that every pointer of the call is memory of `device`
  /// (a framework whose tensors carry their device, as normkit's PyTorch binding does). Validation
  /// then skips the one check that asks the CUDA runtime, cudaPointerGetAttributes on each
  /// pointer (up to 8 a call, twice for a backward that first asks its workspace size), which
  /// turns a pageable host pointer, or memory of a GPU other than the current one, given to a CUDA
  /// call into an error naming the argument. Every
  /// other check (dtypes, sizes, strides, null data, alignment) still runs. Leave it false unless
  /// the pointers' device is known: a host pointer would reach a kernel and fault.
  bool caller_checked_pointers = false;
};

}  // namespace normkit
