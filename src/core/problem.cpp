// Public argument structs -> one internal problem; validation of every argument before any output
// is touched; the planner's view of a validated problem.
#include "core/problem.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

#include "cuda/dispatch.h"

namespace normkit::detail {

// ---------------------------------------------------------------------------------------------
// to_problem
// ---------------------------------------------------------------------------------------------

ForwardProblem to_problem(const LayerNormForwardArgs& a) {
  ForwardProblem p;
  p.rms = false;
  p.x = a.x;
  p.weight = a.weight;
  p.bias = a.bias;
  p.eps = a.eps;
  p.y = a.y;
  p.mean = a.mean;
  p.rstd = a.rstd;
  return p;
}

ForwardProblem to_problem(const RmsNormForwardArgs& a) {
  ForwardProblem p;
  p.rms = true;
  p.x = a.x;
  p.weight = a.weight;
  p.eps = a.eps;
  p.y = a.y;
  p.rstd = a.rstd;
  return p;
}

BackwardProblem to_problem(const LayerNormBackwardArgs& a) {
  BackwardProblem p;
  p.rms = false;
  p.dy = a.dy;
  p.x = a.x;
  p.mean = a.mean;
  p.rstd = a.rstd;
  p.weight = a.weight;
  p.dx = a.dx;
  p.dweight = a.dweight;
  p.dbias = a.dbias;
  return p;
}

BackwardProblem to_problem(const RmsNormBackwardArgs& a) {
  BackwardProblem p;
  p.rms = true;
  p.dy = a.dy;
  p.x = a.x;
  p.rstd = a.rstd;
  p.weight = a.weight;
  p.dx = a.dx;
  p.dweight = a.dweight;
  return p;
}

DType BackwardProblem::weight_dtype() const {
  if (weight) return weight->dtype;
  if (dweight) return dweight->dtype;
  if (dbias) return dbias->dtype;
  return x.dtype;
}

// ---------------------------------------------------------------------------------------------
// validation
// ---------------------------------------------------------------------------------------------

namespace {

bool dtype_known(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}

std::string dtype_label(DType t) {
  if (dtype_known(t)) return dtype_name(t);
  return "unknown (code " + std::to_string(static_cast<int>(t)) + ")";
}

std::string format_double(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

/// Validates the arguments of one call. Every message reads
/// "normkit.<op>: argument '<name>' <what is wrong, actual vs expected>".
class Validator {
 public:
  Validator(Op op, Device device, PointerQuery pointers) : op_(op), device_(device), pointers_(pointers) {}

  [[noreturn]] void fail(const char* argument, const std::string& problem) const {
    throw Error(std::string("normkit.") + op_name(op_) + ": argument '" + argument + "' " + problem);
  }

  /// Shape and dtype of the activation `x`, which define M, N and T for every other argument.
  void check_defining_activation(const char* name, const ConstRows& x) const {
    if (x.rows < 0) fail(name, "has rows = " + std::to_string(x.rows) + ", expected >= 0");
    if (x.cols < 0) fail(name, "has cols = " + std::to_string(x.cols) + ", expected >= 0");
    if (x.rows > 0 && x.cols == 0)
      fail(name, "has N = 0 columns but M = " + std::to_string(x.rows) +
                     " rows; a normalized row needs at least one element");
    if (!dtype_known(x.dtype)) fail(name, "has dtype " + dtype_label(x.dtype));
    if (device_ == Device::Cuda && x.dtype == DType::F64)
      fail(name, "has dtype f64, which only the CPU path supports (CUDA supports f32, f16, bf16)");
    // The kernels index within a row with 32-bit ints (rows with 64-bit offsets); the margin keeps
    // a streamed row's look-ahead index from overflowing.
    if (device_ == Device::Cuda && x.cols > kMaxCudaRowLength)
      fail(name, "has N = " + std::to_string(x.cols) + " elements per row, more than the CUDA path's " +
                     std::to_string(kMaxCudaRowLength));
  }

  /// Any activation view (x, y, dy, dx): dtype T, shape [M, N], row_stride >= N, addressable,
  /// non-null when non-empty, and on the call's device.
  void check_activation(const char* name, const void* data, DType dtype, std::int64_t rows,
                        std::int64_t cols, std::int64_t row_stride, DType t, std::int64_t m,
                        std::int64_t n) const {
    if (!dtype_known(dtype)) fail(name, "has dtype " + dtype_label(dtype));
    if (dtype != t)
      fail(name, "has dtype " + dtype_label(dtype) + ", expected " + dtype_name(t) + " (the dtype of 'x')");
    if (rows != m) fail(name, "has " + std::to_string(rows) + " rows, expected M = " + std::to_string(m));
    if (cols != n) fail(name, "has " + std::to_string(cols) + " cols, expected N = " + std::to_string(n));
    // -1 is the documented "packed" marker; any other negative stride is a caller bug.
    if (row_stride < -1)
      fail(name, "has row_stride = " + std::to_string(row_stride) + ", expected -1 (packed) or >= N = " +
                     std::to_string(n));
    const std::int64_t stride = row_stride < 0 ? cols : row_stride;
    if (stride < n)
      fail(name, "has row_stride = " + std::to_string(stride) + " < N = " + std::to_string(n) +
                     " (rows would overlap)");
    // A row's bytes must be addressable whatever M (the overlap and alignment checks compute them even
    // for an empty call; an M = 0 view with a row_stride of 2^62 overflowed there).
    std::int64_t row_bytes = 0;
    if (__builtin_mul_overflow(stride, static_cast<std::int64_t>(dtype_size(dtype)), &row_bytes))
      fail(name, "has row_stride = " + std::to_string(stride) + " elements of " + std::to_string(dtype_size(dtype)) +
                     " bytes, whose byte size overflows int64");
    std::int64_t elements = 0, bytes = 0;
    if (__builtin_mul_overflow(m, stride, &elements) ||
        __builtin_mul_overflow(elements, static_cast<std::int64_t>(dtype_size(dtype)), &bytes))
      fail(name, "spans M * row_stride = " + std::to_string(m) + " * " + std::to_string(stride) +
                     " elements of " + std::to_string(dtype_size(dtype)) + " bytes, which overflows int64");
    check_pointer(name, data, m > 0 && n > 0);
  }

  void check_activation(const char* name, const ConstRows& v, DType t, std::int64_t m, std::int64_t n) const {
    check_activation(name, v.data, v.dtype, v.rows, v.cols, v.row_stride, t, m, n);
  }
  void check_activation(const char* name, const Rows& v, DType t, std::int64_t m, std::int64_t n) const {
    check_activation(name, v.data, v.dtype, v.rows, v.cols, v.row_stride, t, m, n);
  }

  /// A contiguous vector of `expected_size` elements; `size_label` says what that size is ("N", "M").
  void check_vector(const char* name, const ConstVec& v, std::int64_t expected_size, const char* size_label) const {
    if (!dtype_known(v.dtype)) fail(name, "has dtype " + dtype_label(v.dtype));
    if (v.size != expected_size)
      fail(name, "has " + std::to_string(v.size) + " elements, expected " + size_label + " = " +
                     std::to_string(expected_size));
    // expected_size is M or N, each already bounded by the activation checks only when the other
    // is non-zero; an N-element weight of an M = 0 call still has to be addressable.
    std::int64_t bytes = 0;
    if (__builtin_mul_overflow(v.size, static_cast<std::int64_t>(dtype_size(v.dtype)), &bytes))
      fail(name, "has " + std::to_string(v.size) + " elements, whose byte size overflows int64");
    check_pointer(name, v.data, v.size > 0);
  }

  /// weight/bias/dweight/dbias: the first present one fixes W, which must be T or f32; the others
  /// must match it.
  void check_weight_dtype(const char* name, DType dtype, DType t) {
    if (!weight_dtype_owner_) {
      if (dtype != t && dtype != DType::F32) {
        const std::string allowed = t == DType::F32 ? std::string("f32 (the activation dtype)")
                                                    : std::string("the activation dtype ") + dtype_name(t) + " or f32";
        fail(name, "has dtype " + dtype_label(dtype) + ", expected " + allowed);
      }
      weight_dtype_owner_ = name;
      weight_dtype_ = dtype;
      return;
    }
    if (dtype != weight_dtype_)
      fail(name, "has dtype " + dtype_label(dtype) + ", expected " + dtype_name(weight_dtype_) +
                     " (the dtype of '" + weight_dtype_owner_ + "')");
  }

  /// mean/rstd: f32 per row, f64 when the activations are f64.
  void check_stats_dtype(const char* name, DType dtype, DType t) const {
    const DType expected = t == DType::F64 ? DType::F64 : DType::F32;
    if (dtype != expected)
      fail(name, "has dtype " + dtype_label(dtype) + ", expected " + dtype_name(expected) + " for " +
                     dtype_name(t) + " activations");
  }

 private:
  void check_pointer(const char* name, const void* data, bool has_elements) const {
    if (data == nullptr) {
      // Empty tensors carry no storage (PyTorch gives them null data); anything else must have it.
      if (has_elements) fail(name, "has null data but is not empty");
      return;
    }
    if (pointers_ == PointerQuery::Skip) return;
    const PointerClass where = classify_pointer(data);
    if (device_ == Device::Cpu && (where.kind == PointerKind::Device || where.kind == PointerKind::OtherDevice))
      fail(name, "is a CUDA device pointer but the call runs on the CPU");
    if (device_ == Device::Cuda && where.kind == PointerKind::Host)
      fail(name, "is a pageable host pointer but the call runs on CUDA (use device, managed or registered memory)");
    if (device_ == Device::Cuda && where.kind == PointerKind::OtherDevice)
      fail(name, "is memory of CUDA device " + std::to_string(where.device) + " but the call runs on device " +
                     std::to_string(where.current_device) + " (the current device: cudaSetDevice selects it)");
  }

  Op op_;
  Device device_;
  PointerQuery pointers_;
  const char* weight_dtype_owner_ = nullptr;
  DType weight_dtype_ = DType::F32;
};

/// The bytes one argument occupies, for the overlap check: `rows` runs of `row_bytes` bytes, `stride`
/// bytes apart (a vector is one run). Empty when the argument has no elements.
struct Extent {
  const char* name = nullptr;
  std::uintptr_t base = 0;
  std::int64_t rows = 0, row_bytes = 0, stride = 0;

  bool empty() const { return base == 0 || rows <= 0 || row_bytes <= 0; }
  std::uintptr_t end() const { return base + std::uintptr_t((rows - 1) * stride + row_bytes); }
};

Extent extent_of(const char* name, const void* data, DType dtype, std::int64_t rows, std::int64_t cols,
                 std::int64_t stride) {
  const auto elem = static_cast<std::int64_t>(dtype_size(dtype));
  return {name, reinterpret_cast<std::uintptr_t>(data), rows, cols * elem, stride * elem};
}
Extent extent_of(const char* name, const ConstRows& v) {
  return extent_of(name, v.data, v.dtype, v.rows, v.cols, v.stride());
}
Extent extent_of(const char* name, const ConstVec& v) { return extent_of(name, v.data, v.dtype, 1, v.size, v.size); }

std::int64_t floor_div(std::int64_t a, std::int64_t b) {  // b > 0
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/// Whether one run of bytes [p, p + length) meets a row of `rows`: the first row ending after p starts
/// before p + length.
bool run_meets_rows(std::uintptr_t p, std::int64_t length, const Extent& rows) {
  const auto offset = static_cast<std::int64_t>(p - rows.base);  // within one allocation when spans meet
  const std::int64_t first = std::max<std::int64_t>(0, floor_div(offset - rows.row_bytes, rows.stride) + 1);
  return first < rows.rows && first * rows.stride < offset + length;
}

/// Whether two arguments share a byte. Strided rows may interleave with another argument in one buffer
/// (e.g. [x | y] in each row) without sharing a byte, so rows are compared as rows: a single run against
/// the rows it could meet, and rows of one stride by the distance of their bases (rows i of `a` and j of
/// `b` meet iff |d + (j - i) stride| is below the row length; only the two row distances around
/// -d / stride can be). Rows of different strides whose spans meet count as overlapping (conservative).
bool overlap(const Extent& a, const Extent& b) {
  if (a.empty() || b.empty() || a.end() <= b.base || b.end() <= a.base) return false;
  if (a.rows == 1) return run_meets_rows(a.base, a.row_bytes, b);
  if (b.rows == 1) return run_meets_rows(b.base, b.row_bytes, a);
  if (a.stride != b.stride || a.row_bytes != b.row_bytes) return true;
  const auto d = static_cast<std::int64_t>(b.base - a.base);
  const std::int64_t k0 = floor_div(-d, a.stride);  // k = j - i in [-(a.rows - 1), b.rows - 1]
  for (std::int64_t k : {k0, k0 + 1}) {
    if (k < -(a.rows - 1) || k > b.rows - 1) continue;
    const std::int64_t gap = d + k * a.stride;
    if (gap > -a.row_bytes && gap < a.row_bytes) return true;
  }
  return false;
}

/// The present arguments of one side of a call (at most five: no allocation on the call's path).
struct Extents {
  std::array<Extent, 5> items;
  std::size_t count = 0;
  void add(const Extent& e) { items[count++] = e; }
  template <typename View>
  void add(const char* name, const std::optional<View>& v) {
    if (v) add(extent_of(name, *v));
  }
  const Extent* begin() const { return items.data(); }
  const Extent* end() const { return items.data() + count; }
};

/// Outputs must not share memory with the inputs or with each other. The kernels are not written for it:
/// simple, tiled and two-pass read x and dy after (programmatic launch: while) the dX kernel writes dx, and
/// the one-launch kernel's strips read them while its dX blocks write -- dx over dy or x would be silently
/// wrong there, so no call is allowed to alias.
void check_no_overlap(const Validator& v, const Extents& outputs, const Extents& inputs) {
  for (const Extent* out = outputs.begin(); out != outputs.end(); ++out) {
    for (const Extent* other = outputs.begin(); other != out; ++other)
      if (overlap(*other, *out))
        v.fail(out->name, std::string("overlaps '") + other->name + "' in memory; outputs must not alias");
    for (const Extent& in : inputs)
      if (overlap(*out, in))
        v.fail(out->name, std::string("overlaps '") + in.name +
                              "' in memory; outputs must not alias the inputs (in-place calls are not supported)");
  }
}

bool aligned16(const void* data) { return reinterpret_cast<std::uintptr_t>(data) % 16 == 0; }

/// Whether every row of the view starts on a 16-byte boundary and a row is a whole number of
/// 16-byte vectors (the condition for vectorised row access).
bool rows_aligned(const void* data, DType dtype, std::int64_t stride, std::int64_t cols) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(dtype));
  return aligned16(data) && (stride * elem) % 16 == 0 && (cols * elem) % 16 == 0;
}

}  // namespace

void validate(const ForwardProblem& p, Device device, PointerQuery pointers) {
  Validator v(p.rms ? Op::RmsNormForward : Op::LayerNormForward, device, pointers);
  v.check_defining_activation("x", p.x);
  const DType t = p.x.dtype;
  const std::int64_t m = p.rows(), n = p.cols();
  v.check_activation("x", p.x, t, m, n);
  if (p.weight) {
    v.check_weight_dtype("weight", p.weight->dtype, t);
    v.check_vector("weight", *p.weight, n, "N");
  }
  if (p.bias) {
    if (p.rms) v.fail("bias", "is given, but RMSNorm has no bias");
    v.check_weight_dtype("bias", p.bias->dtype, t);
    v.check_vector("bias", *p.bias, n, "N");
  }
  if (!std::isfinite(p.eps) || p.eps < 0)
    v.fail("eps", "is " + format_double(p.eps) + ", expected a finite value >= 0");
  v.check_activation("y", p.y, t, m, n);
  if (p.mean) {
    if (p.rms) v.fail("mean", "is given, but RMSNorm has no mean");
    v.check_stats_dtype("mean", p.mean->dtype, t);
    v.check_vector("mean", *p.mean, m, "M");
  } else if (!p.rms) {
    v.fail("mean", "is missing; LayerNorm forward writes it");
  }
  v.check_stats_dtype("rstd", p.rstd.dtype, t);
  v.check_vector("rstd", p.rstd, m, "M");
  Extents outputs, inputs;
  outputs.add(extent_of("y", p.y));
  outputs.add(extent_of("rstd", p.rstd));
  outputs.add("mean", p.mean);
  inputs.add(extent_of("x", p.x));
  inputs.add("weight", p.weight);
  inputs.add("bias", p.bias);
  check_no_overlap(v, outputs, inputs);
}

void validate(const BackwardProblem& p, Device device, PointerQuery pointers) {
  Validator v(p.rms ? Op::RmsNormBackward : Op::LayerNormBackward, device, pointers);
  v.check_defining_activation("x", p.x);
  const DType t = p.x.dtype;
  const std::int64_t m = p.rows(), n = p.cols();
  v.check_activation("dy", p.dy, t, m, n);
  v.check_activation("x", p.x, t, m, n);
  if (p.mean) {
    if (p.rms) v.fail("mean", "is given, but RMSNorm has no mean");
    v.check_stats_dtype("mean", p.mean->dtype, t);
    v.check_vector("mean", *p.mean, m, "M");
  } else if (!p.rms) {
    v.fail("mean", "is missing; LayerNorm backward needs the forward's mean");
  }
  v.check_stats_dtype("rstd", p.rstd.dtype, t);
  v.check_vector("rstd", p.rstd, m, "M");
  if (p.weight) {
    v.check_weight_dtype("weight", p.weight->dtype, t);
    v.check_vector("weight", *p.weight, n, "N");
  }
  if (p.dx) v.check_activation("dx", *p.dx, t, m, n);
  if (p.dweight) {
    v.check_weight_dtype("dweight", p.dweight->dtype, t);
    v.check_vector("dweight", *p.dweight, n, "N");
  }
  if (p.dbias) {
    if (p.rms) v.fail("dbias", "is requested, but RMSNorm has no bias");
    v.check_weight_dtype("dbias", p.dbias->dtype, t);
    v.check_vector("dbias", *p.dbias, n, "N");
  }
  Extents outputs, inputs;
  outputs.add("dx", p.dx);
  outputs.add("dweight", p.dweight);
  outputs.add("dbias", p.dbias);
  inputs.add(extent_of("dy", p.dy));
  inputs.add(extent_of("x", p.x));
  inputs.add(extent_of("rstd", p.rstd));
  inputs.add("mean", p.mean);
  inputs.add("weight", p.weight);
  check_no_overlap(v, outputs, inputs);
}

// ---------------------------------------------------------------------------------------------
// planner view
// ---------------------------------------------------------------------------------------------

Problem planner_problem(const ForwardProblem& p) {
  Problem q;
  q.op = p.rms ? Op::RmsNormForward : Op::LayerNormForward;
  q.rows = p.rows();
  q.cols = p.cols();
  q.dtype = p.x.dtype;
  q.weight_dtype = p.weight ? p.weight->dtype : p.bias ? p.bias->dtype : p.x.dtype;
  q.mask = {};
  // The vectorised kernels also read weight and bias in 16-byte loads.
  q.rows_vector_aligned = rows_aligned(p.x.data, p.x.dtype, p.x.stride(), p.cols()) &&
                          rows_aligned(p.y.data, p.y.dtype, p.y.stride(), p.cols()) &&
                          (!p.weight || aligned16(p.weight->data)) && (!p.bias || aligned16(p.bias->data));
  return q;
}

Problem planner_problem(const BackwardProblem& p) {
  Problem q;
  q.op = p.rms ? Op::RmsNormBackward : Op::LayerNormBackward;
  q.rows = p.rows();
  q.cols = p.cols();
  q.dtype = p.x.dtype;
  q.weight_dtype = p.weight_dtype();
  q.mask = p.mask();
  q.rows_vector_aligned = rows_aligned(p.dy.data, p.dy.dtype, p.dy.stride(), p.cols()) &&
                          rows_aligned(p.x.data, p.x.dtype, p.x.stride(), p.cols()) &&
                          (!p.dx || rows_aligned(p.dx->data, p.dx->dtype, p.dx->stride(), p.cols())) &&
                          (!p.weight || aligned16(p.weight->data));
  return q;
}

}  // namespace normkit::detail
