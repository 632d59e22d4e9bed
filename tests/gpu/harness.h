// GPU test harness: RAII device buffers, problem builders (host + device copies), the float64
// reference driven through the public CPU API (multithreaded over row chunks), and the GPU runs with
// poisoned outputs, poisoned workspace and guard elements behind every vector output.
//
// Fairness rules (shared by every GPU test):
//  * inputs are fresh random values (std::mt19937_64 seeded from the case name), never zeros;
//  * mean/rstd are computed ONCE by the CPU forward in F32 and fed to both the GPU backward and the
//    reference backward, so both see the same per-row statistics;
//  * the reference runs entirely in F64 on F64 copies of the exact (already rounded) inputs, and the
//    GPU outputs, converted to double, are compared with it by relative L2 error
//    (test_util.h tolerance(): activations by their dtype, dweight/dbias by the weight dtype,
//    mean/rstd at fp32 level 1e-5);
//  * every device output (and the workspace) is filled with 0xFF bytes (NaN in every float dtype)
//    before the call, copied back whole, and checked: an unwritten element is a NaN and fails, and
//    every byte outside the logical output (row gaps, guard elements) must still be 0xFF.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "normkit/normkit.h"
#include "test_util.h"

namespace normkit {
/// Readable test parameters in gtest messages (found by argument-dependent lookup).
inline void PrintTo(DType t, std::ostream* os) { *os << dtype_name(t); }
inline void PrintTo(Strategy s, std::ostream* os) { *os << strategy_name(s); }
inline void PrintTo(const Mask& m, std::ostream* os) {
  *os << "{dx=" << m.dx << " dweight=" << m.dweight << " dbias=" << m.dbias << "}";
}
}  // namespace normkit

namespace normkit::gputest {

using test::HostBuffer;

/// Throws std::runtime_error naming the expression when `err` is not cudaSuccess.
void cuda_check(cudaError_t err, const char* what, const char* file, int line);
#define NK_CUDA(expr) ::normkit::gputest::cuda_check((expr), #expr, __FILE__, __LINE__)

/// The process-wide non-blocking stream the tests run on (created on first use).
cudaStream_t test_stream();
/// Destroys the test stream and every cached case (call before main returns).
void shutdown();

/// Worker threads for host-side work (hardware_concurrency, at least 1).
int host_threads();
/// Runs fn(chunk, begin, end) over [0, n) in chunks of `grain` on host_threads() threads.
/// Exceptions thrown by fn are rethrown in the caller.
void parallel_chunks(std::int64_t n, std::int64_t grain,
                     const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn);
inline std::int64_t chunk_count(std::int64_t n, std::int64_t grain) { return n <= 0 ? 0 : (n + grain - 1) / grain; }

/// RAII cudaMalloc'ed memory. All transfers are ordered on `stream` and synchronous to the host.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

  void* get() const { return ptr_; }
  unsigned char* bytes_ptr() const { return static_cast<unsigned char*>(ptr_); }
  std::size_t bytes() const { return bytes_; }
  /// Fills every byte with test::kPoisonByte (NaN in every float dtype).
  void poison(cudaStream_t stream);
  void upload(const HostBuffer& host, cudaStream_t stream);
  void upload(const void* host, std::size_t bytes, std::size_t offset, cudaStream_t stream);
  /// Downloads the whole buffer into a host buffer of `dtype`.
  HostBuffer download(DType dtype, cudaStream_t stream) const;
  void download(void* host, std::size_t bytes, std::size_t offset, cudaStream_t stream) const;

 private:
  void reset();
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Where a row-major matrix lives inside its buffer (in elements).
struct Layout {
  std::int64_t rows = 0, cols = 0, stride = 0, offset = 0;
  /// Buffer size in elements that holds the matrix (offset prefix included).
  std::int64_t elements() const { return rows == 0 ? offset + 1 : offset + (rows - 1) * stride + cols; }
  std::int64_t at(std::int64_t r, std::int64_t c) const { return offset + r * stride + c; }
  bool has_gaps() const { return offset > 0 || stride > cols; }
};

/// One problem: shapes, dtypes, which of weight/bias exist, eps, and the memory layout of the
/// matrices (row padding -> non-contiguous rows; offset -> base pointer not vector aligned).
struct Spec {
  std::string name;
  bool rms = false;
  std::int64_t M = 0, N = 0;
  DType dtype = DType::F16;
  std::optional<DType> wdtype;  ///< weight/bias/dweight/dbias dtype; default = dtype
  bool has_weight = true;
  bool has_bias = true;         ///< LayerNorm only
  double eps = 1e-5;
  std::int64_t pad_x = 0, pad_dy = 0, pad_out = 0;  ///< row_stride = N + pad
  std::int64_t offset = 0;      ///< base pointers of all matrices offset by this many elements
  /// weight and bias start this many elements into their buffers (e.g. 4 fp32: 16-byte aligned, as
  /// the vector rule needs, but not 32-byte aligned)
  std::int64_t weight_offset = 0;

  DType weight_dtype() const { return wdtype.value_or(dtype); }
  bool bias_present() const { return !rms && has_bias; }
  Layout x_layout() const { return {M, N, N + pad_x, offset}; }
  Layout dy_layout() const { return {M, N, N + pad_dy, offset}; }
  Layout out_layout() const { return {M, N, N + pad_out, offset}; }
  /// The full mask of the op (RMSNorm never has dbias).
  Mask full_mask() const { return Mask{true, true, !rms}; }
};
void PrintTo(const Spec& s, std::ostream* os);

Spec ln_spec(std::string name, std::int64_t M, std::int64_t N, DType dtype);
/// gtest's parameter name of a Spec case: its own name.
inline std::string spec_name(const testing::TestParamInfo<Spec>& info) { return info.param.name; }
Spec rms_spec(std::string name, std::int64_t M, std::int64_t N, DType dtype);
/// The planner's view of `spec` for `op`: every output requested, rows 16-byte aligned (as the specs of
/// the staged, short-row and split suites are).
Problem problem_of(const Spec& spec, Op op);
/// `s` with every matrix's rows padded by `pad` elements (multiples of 16 bytes keep rows aligned).
inline Spec padded(Spec s, std::int64_t pad) {
  s.pad_x = s.pad_dy = s.pad_out = pad;
  return s;
}
/// `s` with weight, bias and their gradients in dtype `w`.
inline Spec with_weight_dtype(Spec s, DType w) {
  s.wdtype = w;
  return s;
}

/// Host copies of a problem's inputs. Matrices follow the spec's layouts; elements outside the
/// logical matrix hold the poison pattern (NaN), so a kernel that reads a gap produces NaNs.
struct HostCase {
  Spec spec;
  HostBuffer x, dy;         ///< activation dtype, strided
  HostBuffer weight, bias;  ///< weight dtype, N elements (empty when absent)
  HostBuffer mean, rstd;    ///< F32, M: from the CPU forward (mean empty for RMSNorm)
};
/// Builds the inputs (seeded from the spec name unless `seed` is given) and the F32 mean/rstd.
std::unique_ptr<HostCase> make_host_case(const Spec& spec, std::optional<std::uint64_t> seed = std::nullopt);
std::uint64_t seed_of(const std::string& name);

/// Fills the logical elements of `layout` in `b` with uniform values in center +- halfwidth
/// (mt19937_64, deterministic per seed and independent of the thread count); gaps untouched.
void fill_random(HostBuffer& b, const Layout& layout, std::uint64_t seed, double center, double halfwidth);

/// Device copies of a HostCase's inputs (byte-identical, gaps included).
struct DeviceCase {
  DeviceBuffer x, dy, weight, bias, mean, rstd;
};
DeviceCase upload_case(const HostCase& hc, cudaStream_t stream);

/// Float64 reference results (dx packed [M, N]).
struct RefBackward {
  std::vector<double> dx, dweight, dbias;
};
struct RefForward {
  std::vector<double> y, mean, rstd;  ///< y packed [M, N]; mean empty for RMSNorm
};
/// The public CPU API (Device::Cpu) run entirely in F64 on F64 copies of the inputs, with the same
/// mean/rstd as the GPU call. dweight/dbias are always computed (also without weight); dx when asked.
RefBackward reference_backward(const HostCase& hc, bool with_dx = true);
RefForward reference_forward(const HostCase& hc);

/// A case built once per process: host inputs, device inputs, backward reference (lazy).
struct Bundle {
  std::unique_ptr<HostCase> host;
  DeviceCase dev;
  std::optional<RefBackward> ref;
  const RefBackward& backward_ref();
};
/// Cached by spec name (the spec must be the same for the same name).
Bundle& cached_case(const Spec& spec);
void drop_cached_case(const std::string& name);

/// Relative L2 error accumulator with rel_l2_error semantics (NaN/inf where the reference is
/// finite -> infinite error).
struct Err {
  double num = 0, den = 0;
  std::int64_t bad = 0, first_bad = -1, count = 0;
  void add(double got, double ref, std::int64_t index);
  void merge(const Err& o);
  /// ||got - ref|| / max(||ref||, floor)
  double rel(double floor = 1e-30) const;
  std::string describe(double floor = 1e-30) const;
};
/// got: whole strided buffer of `layout`; ref: packed [rows, cols]. Parallel.
Err compare_matrix(const HostBuffer& got, const Layout& layout, const std::vector<double>& ref);
/// The first n elements of `got` against ref[0, n).
Err compare_vector(const HostBuffer& got, std::int64_t n, const std::vector<double>& ref);
/// Bytes of `b` outside the logical matrix that are not the poison byte.
std::int64_t unpoisoned_gap_bytes(const HostBuffer& b, const Layout& layout);
/// Bytes of elements [begin, end) of `b` that are not the poison byte.
std::int64_t unpoisoned_bytes(const HostBuffer& b, std::int64_t begin, std::int64_t end);

/// Elements behind every vector output that must stay untouched.
constexpr std::int64_t kGuard = 64;

enum class WsMode { Convenience, Explicit };

struct BackwardOut {
  bool ran = false;         ///< false: strategy unsupported, the call threw normkit::Error as required
  std::string why_not;
  Plan plan;
  Mask mask;
  HostBuffer dx;            ///< whole strided buffer (out layout), when requested
  HostBuffer dweight, dbias;  ///< N + kGuard elements, when requested
};
/// Runs the CUDA backward. A forced strategy is first checked with strategy_supported(): when it
/// is unsupported the call (and plan_*_backward) must throw normkit::Error and leave every output
/// poisoned; when it is supported, the plan must name exactly that strategy. `table`: the call's
/// planner table (ExecConfig::table; nullptr = the default).
BackwardOut gpu_backward(const HostCase& hc, const DeviceCase& dc, Mask mask, Strategy strategy,
                         cudaStream_t stream, WsMode ws = WsMode::Explicit, const PlannerTable* table = nullptr);
/// Compares every requested output with the reference (and checks gaps/guards stay poisoned).
/// `floor`: denominator floor for outputs whose reference is (close to) zero (N = 1).
void expect_backward_matches(const HostCase& hc, const BackwardOut& out, const RefBackward& ref,
                             double floor = 1e-30);
/// Bitwise repeatability: dx, dweight and dbias of two identical calls are the same bytes.
void expect_same_bits(const BackwardOut& a, const BackwardOut& b, const std::string& what);
/// gpu_backward + expect_backward_matches; returns whether the strategy ran.
bool check_backward(const HostCase& hc, const DeviceCase& dc, const RefBackward& ref, Mask mask,
                    Strategy strategy, cudaStream_t stream = test_stream(), WsMode ws = WsMode::Explicit,
                    double floor = 1e-30);

struct ForwardOut {
  HostBuffer y;           ///< whole strided buffer (out layout)
  HostBuffer mean, rstd;  ///< F32, M + kGuard (mean empty for RMSNorm)
  Plan plan;              ///< what the call ran (plan_*_forward)
};
/// `table`: the call's planner table (ExecConfig::table; nullptr = the default).
ForwardOut gpu_forward(const HostCase& hc, const DeviceCase& dc, cudaStream_t stream = test_stream(),
                       const PlannerTable* table = nullptr);
void expect_forward_matches(const HostCase& hc, const ForwardOut& out, const RefForward& ref);
/// Bitwise repeatability: y, mean and rstd of two identical calls are the same bytes.
void expect_same_bits(const ForwardOut& a, const ForwardOut& b, const std::string& what);
/// gpu_forward + expect_forward_matches, under the built-in table and under forward_packed_table(true
/// and false): every RMSNorm forward case checks both walks of a cached row; under
/// forward_short_rows_table: every forward of short vectorised rows checks both of their walks; and
/// under forward_block_rows_table: every forward of rows a block can hold checks that walk and the other;
/// under forward_packed_block_rows_table: the blocks with a packed instance check both instances.
void check_forward(const HostCase& hc, const DeviceCase& dc, const RefForward& ref,
                   cudaStream_t stream = test_stream());
/// A planner table under which the forward takes the one-row-a-block walk (RowShape::block_rows) on
/// every row it can (true: any M) or on none (false).
const PlannerTable& forward_block_rows_table(bool block_rows);
/// forward_block_rows_table(true) with the one-row-a-block blocks that have a packed instance
/// (block_rows_packed_instance) taking it at any M (true) or never (false).
const PlannerTable& forward_packed_block_rows_table(bool packed);
/// A planner table under which the RMSNorm forward packs every row it can (true) or none (false), and
/// no row takes the short-row or the one-row-a-block walk.
const PlannerTable& forward_packed_table(bool packed);
/// A planner table under which the forward takes the short-row walk (RowShape::short_rows) on every
/// row it can (true: any M, rows up to kShortRowMaxVectors vectors) or on none (false).
const PlannerTable& forward_short_rows_table(bool short_rows);

/// Builds `spec` fresh, then forward vs the reference and backward with every strategy (full mask
/// and gamma/beta-only mask) vs the reference.
void check_forward_and_backward(const Spec& spec, double floor = 1e-30);

/// While one is alive, the CUDA calls of gpu_forward / gpu_backward set
/// ExecConfig::caller_checked_pointers (the PyTorch binding's setting: no pointer queries).
class CallerCheckedPointers {
 public:
  CallerCheckedPointers();
  ~CallerCheckedPointers();
  CallerCheckedPointers(const CallerCheckedPointers&) = delete;
  CallerCheckedPointers& operator=(const CallerCheckedPointers&) = delete;

 private:
  bool previous_;
};

/// A HostCase holding only the given rows of `hc` (packed), with their mean/rstd: the reference of
/// a sample of rows of a case too large to check whole.
std::unique_ptr<HostCase> take_rows(const HostCase& hc, const std::vector<std::int64_t>& rows);
/// Recomputes hc.mean/hc.rstd with the CPU forward in F32 (after changing hc.spec.rms or eps).
void compute_stats(HostCase& hc);

const std::vector<Strategy>& all_strategies();  ///< Simple, Tiled, TwoPass, Fused, Auto
std::string strategy_id(Strategy s);              ///< identifier-safe name: simple, tiled, two_pass, fused, auto
std::string mask_id(Mask m);                      ///< e.g. dx_dw_db, dw, db
std::string dtype_id(DType t);                    ///< f32, f16, bf16, f64

}  // namespace normkit::gputest
