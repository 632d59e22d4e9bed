// Randomized validation fuzz of the public C++ API on Device::Cpu, meant to be run under
// AddressSanitizer + UBSan as well as plainly. validation_test.cpp breaks one argument of a few fixed
// calls; this file draws thousands of calls of every op from a fixed seed (random dtypes T/W, M, N,
// strides with poisoned gaps, optional tensors, output masks, null data for empty tensors, ExecConfig
// settings) and runs each through every entry point of its op (the call, the call with a caller-owned
// workspace, *_workspace_size, plan_*).
//
// Most calls are malformed in exactly ONE way, chosen among what validation promises (normkit.h,
// types.h, src/core/problem.cpp):
//   - x defines M, N and T: rows, cols >= 0, N > 0 when M > 0, a known dtype code;
//   - every activation (x, y, dy, dx) has dtype T, shape [M, N], row_stride -1 (packed) or >= N,
//     M * row_stride * element size within int64, and non-null data when it has elements;
//   - weight/bias/dweight/dbias have N elements; the first present one (in validation order) is T or
//     f32 and the others equal it;
//   - mean/rstd have M elements of f32 (f64 for f64 activations), non-null data when non-empty;
//   - eps (forward) is finite and >= 0;
//   - outputs share no byte with an input or another output (in-place is rejected), while views that
//     only interleave in one buffer are accepted;
//   - ExecConfig: forward accepts only Strategy::Auto ("a forced one is meaningless and rejected"),
//     a forced backward strategy must be one the planner serves, and (types.h) every argument error
//     is a normkit::Error naming the argument -- the enum fields included, as DType codes are.
// For every malformed call: (a) normkit::Error is thrown (no crash, no other exception), (b) its
// message names the offending argument as the API spells it, (c) no byte of any buffer changed
// (outputs are poisoned before the call, inputs' row gaps too).
// The rest are well-formed controls from the same generator (every legal weight dtype combination,
// weight absent with dweight requested, every output mask, M = 0, strided rows, inputs aliasing each
// other, outputs interleaved into an input's row gaps): the call must succeed, write every output
// element and no other byte, and match a float64 computation written here (sampled rows/columns);
// the queries must succeed and write nothing.
//
// Failures are aggregated per (op, entry point, defect kind) and reported once each with a full
// reproducer (shapes, strides, dtypes, where each pointer points, the defect), so a bug does not
// drown the log.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

#include "core/half.h"
#include "cpu_helpers.h"
#include "normkit/normkit.h"

namespace normkit::test {
namespace {

using Rng = std::mt19937_64;
constexpr std::int64_t kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kI64Min = std::numeric_limits<std::int64_t>::min();
/// 0xFF bytes decode to NaN in every dtype: an unwritten output element is never finite.
constexpr unsigned char kPoison = 0xFF;
const std::vector<DType> kKnownDTypes = {DType::F32, DType::F16, DType::BF16, DType::F64};

std::int64_t uniform(Rng& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}
double uniform_real(Rng& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }
bool chance(Rng& rng, double p) { return uniform_real(rng, 0.0, 1.0) < p; }
template <class T>
T pick(Rng& rng, const std::vector<T>& v) {
  return v[std::size_t(uniform(rng, 0, std::int64_t(v.size()) - 1))];
}

bool known(DType t) { return static_cast<int>(t) < 4; }
std::int64_t esize(DType t) { return std::int64_t(dtype_size(t)); }
std::string dtype_str(DType t) {
  return known(t) ? std::string(dtype_name(t)) : "DType(" + std::to_string(static_cast<int>(t)) + ")";
}
std::string num(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

double load(const void* base, DType t, std::int64_t i) {
  const auto* p = static_cast<const unsigned char*>(base);
  switch (t) {
    case DType::F32: { float v; std::memcpy(&v, p + i * 4, 4); return v; }
    case DType::F64: { double v; std::memcpy(&v, p + i * 8, 8); return v; }
    case DType::F16: { std::uint16_t v; std::memcpy(&v, p + i * 2, 2); return detail::half_to_float(v); }
    case DType::BF16: { std::uint16_t v; std::memcpy(&v, p + i * 2, 2); return detail::bf16_to_float(v); }
  }
  return std::nan("");
}
void store(void* base, DType t, std::int64_t i, double x) {
  auto* p = static_cast<unsigned char*>(base);
  switch (t) {
    case DType::F32: { const float v = float(x); std::memcpy(p + i * 4, &v, 4); return; }
    case DType::F64: { std::memcpy(p + i * 8, &x, 8); return; }
    case DType::F16: { const std::uint16_t v = detail::float_to_half(float(x)); std::memcpy(p + i * 2, &v, 2); return; }
    case DType::BF16: { const std::uint16_t v = detail::float_to_bf16(float(x)); std::memcpy(p + i * 2, &v, 2); return; }
  }
}

// ---------------------------------------------------------------------------------------------
// A generated call: the views of its op (in validation order) over buffers owned by the case.
// ---------------------------------------------------------------------------------------------

enum class OpKind { LnFwd, RmsFwd, LnBwd, RmsBwd };
const OpKind kOps[] = {OpKind::LnFwd, OpKind::RmsFwd, OpKind::LnBwd, OpKind::RmsBwd};
bool is_bwd(OpKind op) { return op == OpKind::LnBwd || op == OpKind::RmsBwd; }
const char* op_label(OpKind op) {  // as normkit::op_name spells them (the messages' prefix)
  switch (op) {
    case OpKind::LnFwd: return "layer_norm_forward";
    case OpKind::RmsFwd: return "rms_norm_forward";
    case OpKind::LnBwd: return "layer_norm_backward";
    case OpKind::RmsBwd: return "rms_norm_backward";
  }
  return "?";
}
Op public_op(OpKind op) {
  switch (op) {
    case OpKind::LnFwd: return Op::LayerNormForward;
    case OpKind::RmsFwd: return Op::RmsNormForward;
    case OpKind::LnBwd: return Op::LayerNormBackward;
    case OpKind::RmsBwd: return Op::RmsNormBackward;
  }
  return Op::LayerNormForward;
}

struct Role {
  const char* name;
  bool matrix, output, optional, weight_class;  // weight_class: weight/bias/dweight/dbias (dtype W, N elements)
};
/// The arguments of each op in the order validation checks them (it decides which weight-class
/// tensor fixes W).
std::vector<Role> roles_of(OpKind op) {
  switch (op) {
    case OpKind::LnFwd:
      return {{"x", true, false, false, false},     {"weight", false, false, true, true},
              {"bias", false, false, true, true},   {"y", true, true, false, false},
              {"mean", false, true, false, false},  {"rstd", false, true, false, false}};
    case OpKind::RmsFwd:
      return {{"x", true, false, false, false}, {"weight", false, false, true, true},
              {"y", true, true, false, false},  {"rstd", false, true, false, false}};
    case OpKind::LnBwd:
      return {{"dy", true, false, false, false},    {"x", true, false, false, false},
              {"mean", false, false, false, false}, {"rstd", false, false, false, false},
              {"weight", false, false, true, true}, {"dx", true, true, true, false},
              {"dweight", false, true, true, true}, {"dbias", false, true, true, true}};
    case OpKind::RmsBwd:
      return {{"dy", true, false, false, false},    {"x", true, false, false, false},
              {"rstd", false, false, false, false}, {"weight", false, false, true, true},
              {"dx", true, true, true, false},      {"dweight", false, true, true, true}};
  }
  return {};
}

struct View {
  std::string name;
  bool matrix = false, output = false, weight_class = false, present = false;
  void* data = nullptr;
  DType dtype = DType::F32;
  std::int64_t rows = 0, cols = 0, row_stride = -1;  // matrix views
  std::int64_t size = 0;                             // vector views
  std::int64_t stride() const { return row_stride < 0 ? cols : row_stride; }
  std::int64_t nrows() const { return matrix ? rows : 1; }
  std::int64_t ncols() const { return matrix ? cols : size; }
  bool has_elements() const { return nrows() > 0 && ncols() > 0; }
  std::int64_t index(std::int64_t r, std::int64_t c) const { return matrix ? r * stride() + c : c; }
  double get(std::int64_t r, std::int64_t c) const { return load(data, dtype, index(r, c)); }
};

struct Case {
  OpKind op = OpKind::LnFwd;
  DType t = DType::F32, w = DType::F32;
  std::int64_t m = 0, n = 0;
  double eps = 1e-5;
  ExecConfig config{Device::Cpu};
  std::vector<View> views;
  std::vector<std::vector<unsigned char>> buffers;  // each view's storage (moves keep data pointers)

  View& v(const std::string& name) {
    for (View& x : views)
      if (x.name == name) return x;
    throw std::logic_error("no view " + name);
  }
  const View& v(const std::string& name) const { return const_cast<Case*>(this)->v(name); }
  bool has(const std::string& name) const {
    for (const View& x : views)
      if (x.name == name) return x.present;
    return false;
  }
  void* allocate(std::int64_t bytes) {
    buffers.emplace_back(std::size_t(bytes), kPoison);
    return buffers.back().data();
  }
  /// (buffer index, byte offset) of a pointer into one of the case's buffers.
  std::optional<std::pair<std::size_t, std::int64_t>> locate(const void* p) const {
    const auto u = reinterpret_cast<std::uintptr_t>(p);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto b = reinterpret_cast<std::uintptr_t>(buffers[i].data());
      if (!buffers[i].empty() && u >= b && u < b + buffers[i].size()) return std::make_pair(i, std::int64_t(u - b));
    }
    return std::nullopt;
  }
};

DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

std::string where(const Case& c, const void* p) {
  if (p == nullptr) return "null";
  if (const auto loc = c.locate(p))
    return "buffer#" + std::to_string(loc->first) + "+" + std::to_string(loc->second) + "B";
  return "outside every buffer";
}

std::string describe(const Case& c) {
  std::ostringstream os;
  os << op_label(c.op) << "  T=" << dtype_str(c.t) << " W=" << dtype_str(c.w) << " M=" << c.m << " N=" << c.n;
  if (!is_bwd(c.op)) os << " eps=" << num(c.eps);
  os << "  ExecConfig{device=" << int(c.config.device) << ", strategy=" << int(c.config.strategy)
     << ", caller_checked_pointers=" << c.config.caller_checked_pointers
     << ", stream=" << (c.config.stream ? "junk (ignored on CPU)" : "null") << "}";
  for (const View& v : c.views) {
    os << "\n      " << v.name << ": ";
    if (!v.present) {
      os << "absent";
      continue;
    }
    os << "data=" << where(c, v.data) << " dtype=" << dtype_str(v.dtype);
    if (v.matrix) os << " rows=" << v.rows << " cols=" << v.cols << " row_stride=" << v.row_stride;
    else os << " size=" << v.size;
  }
  os << "\n      buffers:";
  for (std::size_t i = 0; i < c.buffers.size(); ++i) os << " #" << i << "=" << c.buffers[i].size() << "B";
  return os.str();
}

// ---- the public argument structs from the views ----

ConstRows crows(const View& v) { return {v.data, v.dtype, v.rows, v.cols, v.row_stride}; }
Rows mrows(const View& v) { return {v.data, v.dtype, v.rows, v.cols, v.row_stride}; }
ConstVec cvec(const View& v) { return {v.data, v.dtype, v.size}; }
Vec mvec(const View& v) { return {v.data, v.dtype, v.size}; }

LayerNormForwardArgs ln_fwd_args(const Case& c) {
  LayerNormForwardArgs a;
  a.x = crows(c.v("x"));
  if (c.has("weight")) a.weight = cvec(c.v("weight"));
  if (c.has("bias")) a.bias = cvec(c.v("bias"));
  a.eps = c.eps;
  a.y = mrows(c.v("y"));
  a.mean = mvec(c.v("mean"));
  a.rstd = mvec(c.v("rstd"));
  return a;
}
RmsNormForwardArgs rms_fwd_args(const Case& c) {
  RmsNormForwardArgs a;
  a.x = crows(c.v("x"));
  if (c.has("weight")) a.weight = cvec(c.v("weight"));
  a.eps = c.eps;
  a.y = mrows(c.v("y"));
  a.rstd = mvec(c.v("rstd"));
  return a;
}
LayerNormBackwardArgs ln_bwd_args(const Case& c) {
  LayerNormBackwardArgs a;
  a.dy = crows(c.v("dy"));
  a.x = crows(c.v("x"));
  a.mean = cvec(c.v("mean"));
  a.rstd = cvec(c.v("rstd"));
  if (c.has("weight")) a.weight = cvec(c.v("weight"));
  if (c.has("dx")) a.dx = mrows(c.v("dx"));
  if (c.has("dweight")) a.dweight = mvec(c.v("dweight"));
  if (c.has("dbias")) a.dbias = mvec(c.v("dbias"));
  return a;
}
RmsNormBackwardArgs rms_bwd_args(const Case& c) {
  RmsNormBackwardArgs a;
  a.dy = crows(c.v("dy"));
  a.x = crows(c.v("x"));
  a.rstd = cvec(c.v("rstd"));
  if (c.has("weight")) a.weight = cvec(c.v("weight"));
  if (c.has("dx")) a.dx = mrows(c.v("dx"));
  if (c.has("dweight")) a.dweight = mvec(c.v("dweight"));
  return a;
}

// ---- generation of a well-formed call ----

/// Fixes what the dtype sweep enumerates; everything else stays random.
struct Forced {
  DType t, w;
  unsigned optional_mask;  // bit i: the i-th optional role (in roles_of order) is present
};

Case make_case(OpKind op, Rng& rng, const Forced* forced = nullptr) {
  Case c;
  c.op = op;
  c.buffers.reserve(24);
  c.t = forced ? forced->t : pick(rng, kKnownDTypes);
  c.w = forced ? forced->w : chance(rng, 0.5) ? c.t : DType::F32;
  const std::int64_t size_class = uniform(rng, 0, 99);
  if (forced) c.m = uniform(rng, 1, 16);
  else c.m = size_class < 5 ? 0 : size_class < 10 ? uniform(rng, 65, 200) : uniform(rng, 1, 64);
  if (c.m == 0 && chance(rng, 0.3)) c.n = 0;  // the empty [0, 0] call is legal too
  else c.n = !forced && chance(rng, 0.08) ? uniform(rng, 65, 300) : uniform(rng, 1, 64);
  if (!is_bwd(op)) {
    // -0.0 is not negative: validation accepts it. eps = 0 (or tiny) only where the row's second
    // moment is surely non-zero, so the expected values stay finite.
    std::vector<double> eps = {1e-5, 1e-6, 1e-2, 0.5};
    if (c.n >= 8) {
      eps.push_back(0.0);
      eps.push_back(-0.0);
      eps.push_back(std::numeric_limits<double>::denorm_min());
    }
    c.eps = pick(rng, eps);
  }
  unsigned optional_index = 0;
  for (const Role& r : roles_of(op)) {
    View v;
    v.name = r.name;
    v.matrix = r.matrix;
    v.output = r.output;
    v.weight_class = r.weight_class;
    if (r.optional) v.present = forced ? ((forced->optional_mask >> optional_index++) & 1u) != 0 : chance(rng, r.output ? 0.7 : 0.6);
    else v.present = true;
    v.dtype = v.matrix ? c.t : v.weight_class ? c.w : stats_dtype(c.t);
    if (v.matrix) {
      v.rows = c.m;
      v.cols = c.n;
      const std::int64_t layout = uniform(rng, 0, 2);
      // packed, explicit, or gaps (some at least N wide, room for another [M, N] view in between)
      const std::int64_t gap = chance(rng, 0.3) ? c.n + uniform(rng, 0, 8) : uniform(rng, 1, c.n + 3);
      v.row_stride = layout == 0 ? -1 : layout == 1 ? c.n : c.n + gap;
    } else {
      v.size = v.weight_class ? c.n : c.m;
    }
    if (v.present) {
      const std::int64_t bytes = (v.matrix ? v.rows * v.stride() : v.size) * esize(v.dtype);
      // Empty tensors may carry null data (as PyTorch's do) or a pointer to a few bytes.
      v.data = bytes > 0 ? c.allocate(bytes) : chance(rng, 0.5) ? nullptr : c.allocate(16);
    }
    c.views.push_back(v);
  }
  // Inputs: random values (an offset centre for the activations); gaps stay poisoned, so a read of a
  // gap would show up as NaN in the outputs.
  const double centre = chance(rng, 0.5) ? 0.0 : uniform_real(rng, -3.0, 3.0);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (View& v : c.views) {
    if (!v.present || v.output) continue;
    for (std::int64_t r = 0; r < v.nrows(); ++r)
      for (std::int64_t col = 0; col < v.ncols(); ++col) {
        double value = normal(rng);
        if (v.matrix) value += centre;
        else if (v.name == "rstd") value = uniform_real(rng, 0.5, 2.0);
        store(v.data, v.dtype, v.index(r, col), value);
      }
  }
  c.config.device = Device::Cpu;
  c.config.caller_checked_pointers = chance(rng, 0.5);
  // ExecConfig::stream is documented as ignored on CPU: a junk value must never be touched.
  if (chance(rng, 0.3)) c.config.stream = reinterpret_cast<CUstream_st*>(std::uintptr_t(0x1000 + 16 * uniform(rng, 0, 999)));
  if (is_bwd(op))
    c.config.strategy = pick(rng, std::vector<Strategy>{Strategy::Auto, Strategy::Auto, Strategy::Simple,
                                                        Strategy::Tiled, Strategy::TwoPass});
  return c;
}

// ---------------------------------------------------------------------------------------------
// Defects: each breaks exactly one thing of a well-formed case and says what the error must name.
// ---------------------------------------------------------------------------------------------

struct Expect {
  std::string kind = "control";
  bool valid = true;           // a well-formed call
  bool maybe_valid = false;    // either outcome is legal (a forced fused strategy the planner may refuse)
  std::string detail;          // what was changed, for the reproducer
  /// The message must contain, for each group, at least one of its strings.
  std::vector<std::vector<std::string>> message_has;
};

Expect argument_error(const std::string& kind, const Case& c, const std::string& argument, const std::string& detail,
                      const std::string& also = "") {
  Expect e;
  e.kind = kind;
  e.valid = false;
  e.detail = detail;
  e.message_has.push_back({std::string("normkit.") + op_label(c.op) + ": argument '" + argument + "'"});
  if (!also.empty()) e.message_has.push_back({also});
  return e;
}

std::vector<View*> views_where(Case& c, const std::function<bool(const View&)>& pred) {
  std::vector<View*> out;
  for (View& v : c.views)
    if (v.present && pred(v)) out.push_back(&v);
  return out;
}

std::vector<DType> known_except(std::initializer_list<DType> excluded) {
  std::vector<DType> out;
  for (DType t : kKnownDTypes)
    if (std::find(excluded.begin(), excluded.end(), t) == excluded.end()) out.push_back(t);
  return out;
}

/// A value != `good` for a count (rows, cols, size): near misses, negatives, the int64 extremes.
std::int64_t wrong_count(Rng& rng, std::int64_t good) {
  std::vector<std::int64_t> options = {-1, kI64Min, kI64Max, -uniform(rng, 2, 1 << 20)};
  for (std::int64_t d = -3; d <= 3; ++d)
    if (d != 0 && good + d >= -1) options.push_back(good + d);
  if (good != 0) options.push_back(0);
  std::int64_t v;
  do v = pick(rng, options);
  while (v == good);
  return v;
}

/// Bytes of `v`'s elements inside buffer `b` of the case (offset, length) runs.
template <class F>
void for_each_element_run(const Case& c, const View& v, std::size_t b, F f) {
  if (!v.present || !v.has_elements()) return;
  const auto loc = c.locate(v.data);
  if (!loc || loc->first != b) return;
  const std::int64_t e = esize(v.dtype);
  for (std::int64_t r = 0; r < v.nrows(); ++r) f(loc->second + v.index(r, 0) * e, v.ncols() * e);
}

/// Points output `o` into the buffer of another argument `p` (where it fits, so a missed rejection
/// writes inside the allocation rather than crashing), then finds by brute force which arguments it
/// shares a byte with. Sharing: an in-place call, which must be rejected naming both. Sharing none
/// (interleaved into p's row gaps): a legal call, which must succeed.
std::optional<Expect> alias_output(Case& c, Rng& rng) {
  std::vector<View*> outs = views_where(c, [](const View& v) { return v.output && v.has_elements(); });
  if (outs.empty()) return std::nullopt;
  View& o = *pick(rng, outs);
  std::vector<View*> targets = views_where(c, [&](const View& v) { return &v != &o && v.has_elements(); });
  // Half the time only matrices with row gaps, where interleaved (legal) placements exist.
  std::vector<View*> gapped;
  for (View* t : targets)
    if (t->matrix && t->stride() > t->cols) gapped.push_back(t);
  if (!gapped.empty() && chance(rng, 0.5)) targets = gapped;
  if (targets.empty()) return std::nullopt;
  View& p = *pick(rng, targets);
  const auto loc = c.locate(p.data);
  if (!loc) return std::nullopt;
  std::vector<unsigned char>& buffer = c.buffers[loc->first];
  const auto buffer_bytes = std::int64_t(buffer.size());
  // Same stride for two matrices: the case the validator decides exactly (different strides whose
  // spans meet are refused conservatively, see problem.cpp overlap()).
  const std::int64_t o_stride = o.matrix && p.matrix ? p.stride() : o.stride();
  const std::int64_t e = esize(o.dtype);
  const std::int64_t span = o.matrix ? ((o.rows - 1) * o_stride + o.cols) * e : o.size * e;
  if (span > buffer_bytes) return std::nullopt;
  if (o.matrix) o.row_stride = o_stride;
  const std::int64_t max_offset = (buffer_bytes - span) / e;  // in elements of o
  std::int64_t offset = uniform(rng, 0, max_offset) * e;
  if (chance(rng, 0.3) && loc->second % e == 0 && loc->second <= max_offset * e) {
    offset = loc->second;  // same start: the plain in-place call
  } else if (chance(rng, 0.7) && p.matrix && p.stride() > p.cols) {
    // start in the gap after one of p's rows (o may still run into the next row: brute force decides)
    const std::int64_t ep = esize(p.dtype);
    const std::int64_t at = loc->second + ((o.matrix ? 0 : uniform(rng, 0, p.rows - 1)) * p.stride() + p.cols) * ep;
    const std::int64_t aligned = (at + e - 1) / e * e;
    if (aligned <= max_offset * e) offset = aligned;
  }
  o.data = buffer.data() + offset;

  std::vector<unsigned char> mine(buffer.size(), 0);
  for_each_element_run(c, o, loc->first, [&](std::int64_t at, std::int64_t len) {
    std::fill(mine.begin() + at, mine.begin() + at + len, 1);
  });
  std::vector<std::string> shared;
  for (const View& q : c.views) {
    if (&q == &o) continue;
    bool hit = false;
    for_each_element_run(c, q, loc->first, [&](std::int64_t at, std::int64_t len) {
      hit = hit || std::any_of(mine.begin() + at, mine.begin() + at + len, [](unsigned char b) { return b != 0; });
    });
    if (hit) shared.push_back(q.name);
  }
  Expect ex;
  ex.detail = "'" + o.name + "' moved to byte " + std::to_string(offset) + " of the buffer of '" + p.name + "'" +
              (o.matrix && p.matrix ? " with its row_stride" : "");
  if (shared.empty()) {
    ex.kind = "control:output_interleaved";
    ex.detail += ", sharing no byte with any argument";
    return ex;
  }
  ex.kind = "alias_output";
  ex.valid = false;
  ex.detail += ", sharing bytes with";
  std::vector<std::string> named = {"argument '" + o.name + "'"}, others;
  for (const std::string& s : shared) {
    ex.detail += " '" + s + "'";
    named.push_back("argument '" + s + "'");
    others.push_back("'" + s + "'");
  }
  // "argument 'A' overlaps 'B'": one of the pair is the argument, o and one it shares bytes with appear.
  ex.message_has = {{std::string("normkit.") + op_label(c.op) + ": "}, named, {"'" + o.name + "'"}, others, {"overlaps"}};
  return ex;
}

/// Inputs may alias each other (only outputs must not): a legal variant of a control.
bool alias_inputs(Case& c, Rng& rng, std::string& detail) {
  std::vector<std::function<bool()>> options;
  if (is_bwd(c.op))
    options.push_back([&] {
      View &dy = c.v("dy"), &x = c.v("x");
      if (!x.has_elements()) return false;
      dy.data = x.data;
      dy.row_stride = x.row_stride;
      detail = "dy aliases x";
      return true;
    });
  if (c.op == OpKind::LnBwd)
    options.push_back([&] {
      if (!c.v("mean").has_elements()) return false;
      c.v("rstd").data = c.v("mean").data;
      detail = "rstd aliases mean";
      return true;
    });
  if (c.op == OpKind::LnFwd)
    options.push_back([&] {
      if (!c.has("weight") || !c.has("bias") || !c.v("weight").has_elements()) return false;
      c.v("bias").data = c.v("weight").data;
      detail = "bias aliases weight";
      return true;
    });
  return !options.empty() && pick(rng, options)();
}

struct DefectKind {
  const char* name;
  int weight;
  std::function<std::optional<Expect>(Case&, Rng&)> apply;  // nullopt: not applicable to this case
};

std::vector<DefectKind> defect_kinds() {
  auto any_view = [](Case& c, Rng& rng, const std::function<bool(const View&)>& pred) -> View* {
    std::vector<View*> v = views_where(c, pred);
    return v.empty() ? nullptr : pick(rng, v);
  };
  std::vector<DefectKind> k;
  k.push_back({"null_data", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 View* v = any_view(c, rng, [](const View& v) { return v.has_elements(); });
                 if (!v) return std::nullopt;
                 v->data = nullptr;
                 return argument_error("null_data", c, v->name, v->name + ".data = nullptr", "null");
               }});
  k.push_back({"dtype_other_known", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 // x is left out: a different x dtype changes T, and validation then blames whichever
                 // argument it checks next (that is correct, but not a single named argument).
                 View* v = any_view(c, rng, [](const View& v) { return v.name != "x"; });
                 if (!v) return std::nullopt;
                 DType bad;
                 if (v->matrix) bad = pick(rng, known_except({c.t}));
                 else if (!v->weight_class) bad = pick(rng, known_except({stats_dtype(c.t)}));
                 else {
                   const bool first = views_where(c, [](const View& x) { return x.weight_class; }).front() == v;
                   bad = first ? pick(rng, known_except({c.t, DType::F32})) : pick(rng, known_except({c.w}));
                 }
                 v->dtype = bad;
                 return argument_error("dtype_other_known", c, v->name, v->name + ".dtype = " + dtype_str(bad),
                                       dtype_str(bad));
               }});
  k.push_back({"dtype_unknown_code", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 View* v = any_view(c, rng, [](const View&) { return true; });
                 v->dtype = static_cast<DType>(uniform(rng, 4, 255));
                 return argument_error("dtype_unknown_code", c, v->name, v->name + ".dtype = " + dtype_str(v->dtype),
                                       "unknown");
               }});
  k.push_back({"rows_mismatch", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 View* v = any_view(c, rng, [](const View& v) { return v.matrix && v.name != "x"; });
                 v->rows = wrong_count(rng, c.m);
                 return argument_error("rows_mismatch", c, v->name, v->name + ".rows = " + std::to_string(v->rows),
                                       std::to_string(v->rows));
               }});
  k.push_back({"cols_mismatch", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 View* v = any_view(c, rng, [](const View& v) { return v.matrix && v.name != "x"; });
                 v->cols = wrong_count(rng, c.n);
                 return argument_error("cols_mismatch", c, v->name, v->name + ".cols = " + std::to_string(v->cols),
                                       std::to_string(v->cols));
               }});
  k.push_back({"x_rows_negative", 4, [](Case& c, Rng& rng) -> std::optional<Expect> {
                 c.v("x").rows = chance(rng, 0.2) ? kI64Min : -uniform(rng, 1, kI64Max);
                 return argument_error("x_rows_negative", c, "x", "x.rows = " + std::to_string(c.v("x").rows),
                                       std::to_string(c.v("x").rows));
               }});
  k.push_back({"x_cols_negative", 4, [](Case& c, Rng& rng) -> std::optional<Expect> {
                 c.v("x").cols = chance(rng, 0.2) ? kI64Min : -uniform(rng, 1, kI64Max);
                 return argument_error("x_cols_negative", c, "x", "x.cols = " + std::to_string(c.v("x").cols),
                                       std::to_string(c.v("x").cols));
               }});
  k.push_back({"x_cols_zero_with_rows", 4, [](Case& c, Rng&) -> std::optional<Expect> {
                 if (c.m == 0) return std::nullopt;
                 c.v("x").cols = 0;
                 return argument_error("x_cols_zero_with_rows", c, "x", "x.cols = 0 with M > 0", "N = 0");
               }});
  k.push_back({"stride_below_minus_one", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 View* v = any_view(c, rng, [](const View& v) { return v.matrix; });
                 v->row_stride = pick(rng, std::vector<std::int64_t>{-2, -uniform(rng, 3, 1 << 20), kI64Min});
                 return argument_error("stride_below_minus_one", c, v->name,
                                       v->name + ".row_stride = " + std::to_string(v->row_stride),
                                       std::to_string(v->row_stride));
               }});
  k.push_back({"stride_below_n", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 if (c.n == 0) return std::nullopt;
                 View* v = any_view(c, rng, [](const View& v) { return v.matrix; });
                 v->row_stride = uniform(rng, 0, c.n - 1);
                 return argument_error("stride_below_n", c, v->name,
                                       v->name + ".row_stride = " + std::to_string(v->row_stride),
                                       "row_stride = " + std::to_string(v->row_stride));
               }});
  k.push_back({"stride_overflows_int64", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 if (c.m == 0) return std::nullopt;
                 View* v = any_view(c, rng, [](const View& v) { return v.matrix; });
                 // the smallest strides whose M * stride * element size exceeds int64, and a few above
                 v->row_stride = kI64Max / (c.m * esize(v->dtype)) + 1 + uniform(rng, 0, 1000);
                 return argument_error("stride_overflows_int64", c, v->name,
                                       v->name + ".row_stride = " + std::to_string(v->row_stride), "overflow");
               }});
  k.push_back({"huge_m_stride_overflows_int64", 6, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 // 64-bit M: every activation has M = 2^33 + k rows (and mean/rstd as many elements, over
                 // tiny buffers: validation must reject before anything is read), one of them a stride
                 // whose M * stride * element size just overflows.
                 if (c.m == 0 || c.n == 0) return std::nullopt;
                 const std::int64_t huge_m = (std::int64_t(1) << 33) + uniform(rng, 0, 1000);
                 for (View& v : c.views) {
                   if (v.matrix) v.rows = huge_m;
                   else if (!v.weight_class) v.size = huge_m;
                 }
                 View* v = any_view(c, rng, [](const View& v) { return v.matrix; });
                 v->row_stride = kI64Max / (huge_m * esize(v->dtype)) + 1 + uniform(rng, 0, 1000);
                 return argument_error("huge_m_stride_overflows_int64", c, v->name,
                                       "M = " + std::to_string(huge_m) + " everywhere, " + v->name +
                                           ".row_stride = " + std::to_string(v->row_stride),
                                       "overflow");
               }});
  k.push_back({"size_mismatch", 10, [=](Case& c, Rng& rng) -> std::optional<Expect> {
                 View* v = any_view(c, rng, [](const View& v) { return !v.matrix; });
                 if (!v) return std::nullopt;
                 v->size = wrong_count(rng, v->weight_class ? c.n : c.m);
                 return argument_error("size_mismatch", c, v->name, v->name + ".size = " + std::to_string(v->size),
                                       std::to_string(v->size));
               }});
  k.push_back({"eps_invalid", 8, [](Case& c, Rng& rng) -> std::optional<Expect> {
                 if (is_bwd(c.op)) return std::nullopt;
                 const double inf = std::numeric_limits<double>::infinity();
                 c.eps = pick(rng, std::vector<double>{-1e-5, -1.0, -std::numeric_limits<double>::min(),
                                                       -std::numeric_limits<double>::denorm_min(),
                                                       -std::numeric_limits<double>::max(), std::nan(""),
                                                       -std::nan(""), inf, -inf});
                 return argument_error("eps_invalid", c, "eps", "eps = " + num(c.eps));
               }});
  k.push_back({"alias_output", 20, alias_output});
  k.push_back({"config_forward_strategy", 3, [](Case& c, Rng& rng) -> std::optional<Expect> {
                 if (is_bwd(c.op)) return std::nullopt;
                 c.config.strategy = pick(rng, std::vector<Strategy>{Strategy::Simple, Strategy::Tiled,
                                                                     Strategy::TwoPass, Strategy::Fused});
                 Expect e;
                 e.kind = "config_forward_strategy";
                 e.valid = false;
                 e.detail = std::string("config.strategy = ") + strategy_name(c.config.strategy);
                 e.message_has = {{"argument 'strategy'"}};
                 return e;
               }});
  k.push_back({"config_unknown_strategy_code", 3, [](Case& c, Rng& rng) -> std::optional<Expect> {
                 if (!is_bwd(c.op)) return std::nullopt;  // forward: covered by config_forward_strategy
                 c.config.strategy = static_cast<Strategy>(uniform(rng, 5, 255));
                 Expect e;
                 e.kind = "config_unknown_strategy_code";
                 e.valid = false;
                 e.detail = "config.strategy = Strategy(" + std::to_string(int(c.config.strategy)) + ")";
                 e.message_has = {{"argument 'strategy'"}};
                 return e;
               }});
  k.push_back({"config_unknown_device_code", 3, [](Case& c, Rng& rng) -> std::optional<Expect> {
                 c.config.device = static_cast<Device>(uniform(rng, 2, 255));
                 Expect e;
                 e.kind = "config_unknown_device_code";
                 e.valid = false;
                 e.detail = "config.device = Device(" + std::to_string(int(c.config.device)) + ")";
                 e.message_has = {{"argument 'device'"}};
                 return e;
               }});
  k.push_back({"forced_fused_backward", 3, [](Case& c, Rng&) -> std::optional<Expect> {
                 if (!is_bwd(c.op)) return std::nullopt;
                 c.config.strategy = Strategy::Fused;
                 Expect e;
                 e.kind = "forced_fused_backward";
                 e.valid = false;
                 e.maybe_valid = true;  // served (correct results) or refused naming the strategy
                 e.detail = "config.strategy = fused";
                 e.message_has = {{"strategy"}};
                 return e;
               }});
  return k;
}

// ---------------------------------------------------------------------------------------------
// Running a case through every entry point and checking it.
// ---------------------------------------------------------------------------------------------

enum class Entry { Call, CallWithWorkspace, WorkspaceSize, Plan };
const char* entry_name(Entry e) {
  switch (e) {
    case Entry::Call: return "call";
    case Entry::CallWithWorkspace: return "call(workspace)";
    case Entry::WorkspaceSize: return "workspace_size";
    case Entry::Plan: return "plan";
  }
  return "?";
}
std::vector<Entry> entries_of(OpKind op) {
  if (is_bwd(op)) return {Entry::Call, Entry::CallWithWorkspace, Entry::WorkspaceSize, Entry::Plan};
  return {Entry::Call, Entry::Plan};
}

struct Outcome {
  bool threw = false;
  std::string type, what;
  std::optional<Plan> plan;
  std::size_t workspace = 0;
};

Outcome invoke(const Case& c, Entry e) {
  Outcome o;
  try {
    switch (c.op) {
      case OpKind::LnFwd:
        if (e == Entry::Call) layer_norm_forward(ln_fwd_args(c), c.config);
        else o.plan = plan_layer_norm_forward(ln_fwd_args(c), c.config);
        break;
      case OpKind::RmsFwd:
        if (e == Entry::Call) rms_norm_forward(rms_fwd_args(c), c.config);
        else o.plan = plan_rms_norm_forward(rms_fwd_args(c), c.config);
        break;
      case OpKind::LnBwd: {
        const LayerNormBackwardArgs a = ln_bwd_args(c);
        switch (e) {
          case Entry::Call: layer_norm_backward(a, c.config); break;
          case Entry::CallWithWorkspace: layer_norm_backward(a, c.config, Workspace{}); break;
          case Entry::WorkspaceSize: o.workspace = layer_norm_backward_workspace_size(a, c.config); break;
          case Entry::Plan: o.plan = plan_layer_norm_backward(a, c.config); break;
        }
        break;
      }
      case OpKind::RmsBwd: {
        const RmsNormBackwardArgs a = rms_bwd_args(c);
        switch (e) {
          case Entry::Call: rms_norm_backward(a, c.config); break;
          case Entry::CallWithWorkspace: rms_norm_backward(a, c.config, Workspace{}); break;
          case Entry::WorkspaceSize: o.workspace = rms_norm_backward_workspace_size(a, c.config); break;
          case Entry::Plan: o.plan = plan_rms_norm_backward(a, c.config); break;
        }
        break;
      }
    }
  } catch (const Error& ex) {
    o = {true, "normkit::Error", ex.what(), std::nullopt, 0};
  } catch (const CudaError& ex) {
    o = {true, "normkit::CudaError", ex.what(), std::nullopt, 0};
  } catch (const std::bad_alloc& ex) {
    o = {true, "std::bad_alloc", ex.what(), std::nullopt, 0};
  } catch (const std::exception& ex) {
    o = {true, std::string("std::exception of type ") + typeid(ex).name(), ex.what(), std::nullopt, 0};
  } catch (...) {
    o = {true, "a non-std exception", "", std::nullopt, 0};
  }
  return o;
}

using Problems = std::vector<std::string>;

/// Every buffer byte-equal to the snapshot; names the views over a changed buffer.
void expect_unchanged(const Case& c, const std::vector<std::vector<unsigned char>>& before, Problems& problems,
                      const std::vector<std::vector<unsigned char>>* allowed = nullptr) {
  for (std::size_t b = 0; b < c.buffers.size(); ++b) {
    for (std::size_t i = 0; i < c.buffers[b].size(); ++i) {
      if (c.buffers[b][i] == before[b][i] || (allowed && (*allowed)[b][i])) continue;
      std::string owners;
      for (const View& v : c.views)
        if (v.present && c.locate(v.data) && c.locate(v.data)->first == b) owners += " '" + v.name + "'";
      problems.push_back("byte " + std::to_string(i) + " of buffer#" + std::to_string(b) + " (of" + owners +
                         ") changed from " + std::to_string(before[b][i]) + " to " + std::to_string(c.buffers[b][i]) +
                         (allowed ? " though no output element lies there" : ""));
      break;
    }
  }
}

void check_rejected(const Case& c, const Expect& ex, const Outcome& o,
                    const std::vector<std::vector<unsigned char>>& before, Problems& problems) {
  if (!o.threw) problems.push_back("no exception: the call was accepted");
  else if (o.type != "normkit::Error") problems.push_back("threw " + o.type + " (" + o.what + "), not normkit::Error");
  else
    for (const std::vector<std::string>& group : ex.message_has) {
      const bool found = std::any_of(group.begin(), group.end(),
                                     [&](const std::string& s) { return o.what.find(s) != std::string::npos; });
      if (!found) {
        std::string wanted;
        for (const std::string& s : group) wanted += (wanted.empty() ? "\"" : " or \"") + s + "\"";
        problems.push_back("message lacks " + wanted + ": \"" + o.what + "\"");
      }
    }
  expect_unchanged(c, before, problems);
}

/// actual must be `expected` (computed here in float64) rounded once to `t`; `scale` bounds the sum of
/// magnitudes the value came from (float64 evaluation-order differences are ~1e-16 of it).
void compare(Problems& problems, const std::string& what, double actual, double expected, double scale, DType t) {
  // half an ulp (rounding once is within it) and half the smallest subnormal (the error near zero)
  const double bound = std::ldexp(1.0, -significand_bits(t)) * std::fabs(expected) + 1e-12 * scale +
                      half_min_subnormal(t);
  if (!(std::fabs(actual - expected) <= bound) && problems.size() < 8)
    problems.push_back(what + " = " + num(actual) + ", expected " + num(expected) + " (bound " + num(bound) + ")");
}

/// Up to `count` distinct indices of [0, n): both ends and random ones.
std::vector<std::int64_t> sample(Rng& rng, std::int64_t n, int count) {
  std::vector<std::int64_t> out;
  if (n <= 0) return out;
  out.push_back(0);
  if (n > 1) out.push_back(n - 1);
  for (int i = 0; i < count; ++i) out.push_back(uniform(rng, 0, n - 1));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The forward and backward formulas (shared/norm-math.md) evaluated in float64 on sampled rows
/// (and, for dweight/dbias, sampled columns over every row), read through the views.
void check_values(const Case& c, Rng& rng, Problems& problems) {
  const std::int64_t m = c.m, n = c.n;
  const bool rms = c.op == OpKind::RmsFwd || c.op == OpKind::RmsBwd;
  auto weight = [&](std::int64_t col) { return c.has("weight") ? c.v("weight").get(0, col) : 1.0; };
  if (!is_bwd(c.op)) {
    const View &x = c.v("x"), &y = c.v("y"), &rstd_out = c.v("rstd");
    for (std::int64_t r : sample(rng, m, 4)) {
      double sum = 0, abs_sum = 0;
      for (std::int64_t col = 0; col < n; ++col) sum += x.get(r, col), abs_sum += std::fabs(x.get(r, col));
      const double mean = rms ? 0.0 : sum / double(n);
      double second = 0;
      for (std::int64_t col = 0; col < n; ++col) second += (x.get(r, col) - mean) * (x.get(r, col) - mean);
      const double rstd = 1.0 / std::sqrt(second / double(n) + c.eps);
      const std::string row = "[" + std::to_string(r) + "]";
      if (!rms) compare(problems, "mean" + row, c.v("mean").get(0, r), mean, abs_sum / double(n), c.v("mean").dtype);
      compare(problems, "rstd" + row, rstd_out.get(0, r), rstd, rstd, rstd_out.dtype);
      for (std::int64_t col = 0; col < n; ++col) {
        const double b = c.has("bias") ? c.v("bias").get(0, col) : 0.0;
        const double expected = (x.get(r, col) - mean) * rstd * weight(col) + b;
        const double scale = (std::fabs(x.get(r, col)) + std::fabs(mean)) * rstd * std::fabs(weight(col)) + std::fabs(b);
        compare(problems, "y" + row + "[" + std::to_string(col) + "]", y.get(r, col), expected, scale, y.dtype);
      }
    }
    return;
  }
  const View &dy = c.v("dy"), &x = c.v("x"), &rstd = c.v("rstd");
  auto mu = [&](std::int64_t r) { return rms ? 0.0 : c.v("mean").get(0, r); };
  if (c.has("dx")) {
    const View& dx = c.v("dx");
    for (std::int64_t r : sample(rng, m, 4)) {
      const double s = rstd.get(0, r);
      double mean_g = 0, mean_g_xhat = 0, mean_abs_g = 0, mean_abs_g_xhat = 0;
      for (std::int64_t col = 0; col < n; ++col) {
        const double g = dy.get(r, col) * weight(col), xhat = (x.get(r, col) - mu(r)) * s;
        mean_g += g / double(n);
        mean_g_xhat += g * xhat / double(n);
        mean_abs_g += std::fabs(g) / double(n);
        mean_abs_g_xhat += std::fabs(g * xhat) / double(n);
      }
      if (rms) mean_g = 0, mean_abs_g = 0;
      for (std::int64_t col = 0; col < n; ++col) {
        const double g = dy.get(r, col) * weight(col), xhat = (x.get(r, col) - mu(r)) * s;
        const double expected = s * (g - mean_g - xhat * mean_g_xhat);
        const double scale = std::fabs(s) * (std::fabs(g) + mean_abs_g + std::fabs(xhat) * mean_abs_g_xhat) +
                             std::fabs(s) * (std::fabs(x.get(r, col)) + std::fabs(mu(r))) * std::fabs(s) * mean_abs_g_xhat;
        compare(problems, "dx[" + std::to_string(r) + "][" + std::to_string(col) + "]", dx.get(r, col), expected, scale,
                dx.dtype);
      }
    }
  }
  for (std::int64_t col : sample(rng, n, 4)) {
    double dw = 0, dw_scale = 0, db = 0, db_scale = 0;
    for (std::int64_t r = 0; r < m; ++r) {
      const double xhat = (x.get(r, col) - mu(r)) * rstd.get(0, r);
      dw += dy.get(r, col) * xhat;
      dw_scale += std::fabs(dy.get(r, col)) * (std::fabs(x.get(r, col)) + std::fabs(mu(r))) * std::fabs(rstd.get(0, r));
      db += dy.get(r, col);
      db_scale += std::fabs(dy.get(r, col));
    }
    const std::string at = "[" + std::to_string(col) + "]";
    if (c.has("dweight")) compare(problems, "dweight" + at, c.v("dweight").get(0, col), dw, dw_scale, c.v("dweight").dtype);
    if (c.has("dbias")) compare(problems, "dbias" + at, c.v("dbias").get(0, col), db, db_scale, c.v("dbias").dtype);
  }
}

/// Poisons every output element (so that "written" is observable), leaving every other byte alone.
void poison_outputs(Case& c) {
  for (const View& v : c.views) {
    if (!v.output || !v.present || !v.has_elements()) continue;
    const std::int64_t e = esize(v.dtype);
    for (std::int64_t r = 0; r < v.nrows(); ++r)
      std::memset(static_cast<unsigned char*>(v.data) + v.index(r, 0) * e, kPoison, std::size_t(v.ncols() * e));
  }
}

/// A well-formed call: success, every output element written (finite: the poison is NaN), no byte
/// outside the output elements changed, values right; repeat calls give the same bytes.
void check_accepted(Case& c, Rng& rng, Entry entry, const Outcome& o, const std::vector<std::vector<unsigned char>>& before,
                    const std::vector<std::vector<unsigned char>>* first_call_bytes, Problems& problems) {
  if (o.threw) {
    problems.push_back("threw " + o.type + ": \"" + o.what + "\"");
    expect_unchanged(c, before, problems);
    return;
  }
  if (entry == Entry::Plan || entry == Entry::WorkspaceSize) {
    // Queries validate and plan; they never write.
    expect_unchanged(c, before, problems);
    if (entry == Entry::WorkspaceSize && o.workspace != 0)
      problems.push_back("workspace size on the CPU is " + std::to_string(o.workspace) + ", documented as 0");
    if (entry == Entry::Plan) {
      if (o.plan->op != public_op(c.op)) problems.push_back("plan of another op");
      if (is_bwd(c.op) && c.config.strategy != Strategy::Auto && o.plan->strategy != c.config.strategy)
        problems.push_back(std::string("forced strategy ") + strategy_name(c.config.strategy) + " planned as " +
                           strategy_name(o.plan->strategy));
    }
    return;
  }
  std::vector<std::vector<unsigned char>> is_output(c.buffers.size());
  for (std::size_t b = 0; b < c.buffers.size(); ++b) is_output[b].assign(c.buffers[b].size(), 0);
  for (const View& v : c.views) {
    if (!v.output || !v.present) continue;
    const auto loc = c.locate(v.data);
    if (!loc) continue;
    for_each_element_run(c, v, loc->first, [&](std::int64_t at, std::int64_t len) {
      std::fill(is_output[loc->first].begin() + at, is_output[loc->first].begin() + at + len, 1);
    });
    for (std::int64_t r = 0; r < v.nrows(); ++r)
      for (std::int64_t col = 0; col < v.ncols(); ++col)
        if (!std::isfinite(v.get(r, col))) {
          problems.push_back(v.name + "[" + std::to_string(r) + "][" + std::to_string(col) + "] = " + num(v.get(r, col)) +
                             " (poison left or not finite)");
          r = v.nrows();
          break;
        }
  }
  expect_unchanged(c, before, problems, &is_output);
  check_values(c, rng, problems);
  if (first_call_bytes && *first_call_bytes != c.buffers)
    problems.push_back("the call with a workspace wrote other bytes than the allocating call");
}

struct Tally {
  std::map<std::string, long> cases;                               // op/kind
  std::map<std::string, std::pair<long, std::string>> failures;    // op/entry/kind -> count, first reproducer
  long calls = 0;

  void fail(const std::string& key, const std::string& reproducer) {
    auto& f = failures[key];
    if (f.first++ == 0) f.second = reproducer;
  }
  void report() const {
    for (const auto& [key, f] : failures)
      ADD_FAILURE() << key << ": " << f.first << " failing call(s); first one:\n" << f.second;
  }
};

/// Runs `c` through every entry point of its op and checks each against `ex`.
void run_case(Case& c, const Expect& ex, Rng& rng, Tally& tally) {
  tally.cases[std::string(op_label(c.op)) + "/" + ex.kind]++;
  const std::string description = describe(c);
  std::optional<std::vector<std::vector<unsigned char>>> first_call;
  bool maybe_valid_decided = false, maybe_valid_accepted = false;
  for (Entry entry : entries_of(c.op)) {
    if (ex.valid) poison_outputs(c);
    const std::vector<std::vector<unsigned char>> before = c.buffers;
    const Outcome o = invoke(c, entry);
    ++tally.calls;
    Problems problems;
    bool valid = ex.valid;
    // Either outcome is legal, but the call decides it and every other entry point (the queries
    // validate "as by the call itself") must agree with it.
    if (ex.maybe_valid) {
      if (!maybe_valid_decided) {
        maybe_valid_accepted = !(o.threw && o.type == "normkit::Error");
        tally.cases[std::string(op_label(c.op)) + "/" + ex.kind + (maybe_valid_accepted ? " (served)" : " (refused)")]++;
      }
      maybe_valid_decided = true;
      valid = maybe_valid_accepted;
    }
    if (valid) {
      check_accepted(c, rng, entry, o, before, entry == Entry::CallWithWorkspace && first_call ? &*first_call : nullptr,
                     problems);
      if (entry == Entry::Call) first_call = c.buffers;
    } else {
      check_rejected(c, ex, o, before, problems);
    }
    if (!problems.empty()) {
      std::string reproducer = "    call: " + description + "\n    defect: " + ex.kind + (ex.detail.empty() ? "" : " (" + ex.detail + ")") +
                               "\n    entry point: " + entry_name(entry);
      for (std::size_t i = 0; i < problems.size() && i < 4; ++i) reproducer += "\n    problem: " + problems[i];
      tally.fail(std::string(op_label(c.op)) + " / " + entry_name(entry) + " / " + ex.kind, reproducer);
    }
  }
}

// ---------------------------------------------------------------------------------------------

constexpr int kCasesPerOp = 3000;
constexpr double kDefectShare = 0.8;

TEST(ValidationFuzz, RandomCallsOnCpuAreValidatedAndControlsAreExact) {
  Rng rng(0x6e6f726d6b6974ULL);  // fixed seed: a failure reproduces from the printed case
  const std::vector<DefectKind> kinds = defect_kinds();
  int total_weight = 0;
  for (const DefectKind& k : kinds) total_weight += k.weight;
  Tally tally;
  for (OpKind op : kOps) {
    for (int i = 0; i < kCasesPerOp; ++i) {
      Case c = make_case(op, rng);
      Expect ex;
      if (chance(rng, kDefectShare)) {
        for (;;) {  // a weighted draw among the kinds that apply to this case
          std::int64_t draw = uniform(rng, 0, total_weight - 1);
          const DefectKind* k = &kinds.front();
          for (const DefectKind& kind : kinds)
            if ((draw -= kind.weight) < 0) {
              k = &kind;
              break;
            }
          if (std::optional<Expect> applied = k->apply(c, rng)) {
            ex = *applied;
            break;
          }
        }
      } else if (chance(rng, 0.15)) {
        if (alias_inputs(c, rng, ex.detail)) ex.kind = "control:inputs_alias";
      }
      run_case(c, ex, rng, tally);
    }
  }
  tally.report();

  // Coverage: the generator must keep producing every defect kind and control (a generator that
  // silently stopped would make this test vacuous).
  std::cout << "[validation fuzz] " << tally.calls << " calls; cases per op/kind:\n";
  for (const auto& [key, count] : tally.cases) std::printf("  %-60s %6ld\n", key.c_str(), count);
  for (OpKind op : kOps) {
    const std::string prefix = std::string(op_label(op)) + "/";
    auto count = [&](const std::string& kind) {
      const auto it = tally.cases.find(prefix + kind);
      return it == tally.cases.end() ? 0L : it->second;
    };
    EXPECT_GE(count("control"), 300) << op_label(op);
    EXPECT_GE(count("control:output_interleaved"), 10) << op_label(op);
    for (const DefectKind& k : kinds) {
      const bool applies = std::string(k.name) == "eps_invalid" || std::string(k.name) == "config_forward_strategy"
                               ? !is_bwd(op)
                           : std::string(k.name) == "config_unknown_strategy_code" ||
                                   std::string(k.name) == "forced_fused_backward"
                               ? is_bwd(op)
                               : true;
      if (applies) {
        EXPECT_GE(count(k.name), 20) << prefix << k.name;
      }
    }
  }
  EXPECT_GE(tally.cases["layer_norm_backward/control:inputs_alias"], 10);
}

// Every legal weight dtype combination (W = T or f32 for each T, with every presence pattern of the
// optional weight-class tensors and outputs -- weight absent with dweight requested included) is
// accepted and computed exactly, through every entry point.
TEST(ValidationFuzz, EveryLegalWeightDtypeCombinationIsAccepted) {
  Rng rng(0x7765696768747300ULL);
  Tally tally;
  for (OpKind op : kOps) {
    unsigned optional_roles = 0;
    for (const Role& r : roles_of(op)) optional_roles += r.optional ? 1u : 0u;
    for (DType t : kKnownDTypes)
      for (DType w : t == DType::F32 ? std::vector<DType>{t} : std::vector<DType>{t, DType::F32}) {
        for (unsigned mask = 0; mask < (1u << optional_roles); ++mask)
          for (int rep = 0; rep < 3; ++rep) {
            const Forced forced{t, w, mask};
            Case c = make_case(op, rng, &forced);
            run_case(c, Expect{}, rng, tally);
          }
      }
  }
  tally.report();
  EXPECT_GT(tally.calls, 0);
}

// M = 0 is an empty call (normkit.h): it must succeed and write nothing, whatever N. Two shapes probe
// the validation arithmetic and the CPU path with extreme empty views: a row_stride whose byte size
// overflows int64 is refused even with no rows (the overlap and alignment checks compute a row's bytes:
// signed overflow there, UBSan, before validation bounded it), a width of 2^61 bf16 is served (the CPU
// reference allocated N doubles before its row loop: std::length_error).
TEST(ValidationFuzz, EmptyCallsWithExtremeWidthOrStrideSucceedWithoutWriting) {
  std::vector<unsigned char> sentinel(64, kPoison);  // stands for an output that must stay untouched
  auto expect_success = [&](const char* label, const std::function<void()>& call) {
    try {
      call();
    } catch (const std::exception& e) {
      ADD_FAILURE() << label << ": threw " << typeid(e).name() << ": " << e.what();
    }
    EXPECT_TRUE(std::all_of(sentinel.begin(), sentinel.end(), [](unsigned char b) { return b == kPoison; })) << label;
  };
  const ExecConfig cpu{Device::Cpu};

  // 1. An empty x whose row_stride is 2^62 f32 elements: 2^64 bytes a row.
  {
    LayerNormForwardArgs a;
    a.x = {sentinel.data(), DType::F32, 0, 4, kI64Max / 2 + 1};
    a.y = {sentinel.data() + 32, DType::F32, 0, 4, -1};
    a.mean = {nullptr, DType::F32, 0};
    a.rstd = {nullptr, DType::F32, 0};
    auto expect_refused = [&](const char* label, const std::function<void()>& call) {
      try {
        call();
        ADD_FAILURE() << label << ": accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("argument 'x' has row_stride"), std::string::npos) << label << ": " << e.what();
      }
      EXPECT_TRUE(std::all_of(sentinel.begin(), sentinel.end(), [](unsigned char b) { return b == kPoison; })) << label;
    };
    expect_refused("LN forward, M = 0, N = 4, x.row_stride = 2^62", [&] { layer_norm_forward(a, cpu); });
    expect_refused("plan of LN forward, M = 0, N = 4, x.row_stride = 2^62", [&] { plan_layer_norm_forward(a, cpu); });
  }
  // 2. An empty [0, 2^61] bf16 call (2^62 bytes a row: every byte count fits int64).
  {
    const std::int64_t n = std::int64_t(1) << 61;
    RmsNormBackwardArgs a;
    a.dy = {nullptr, DType::BF16, 0, n, -1};
    a.x = {nullptr, DType::BF16, 0, n, -1};
    a.rstd = {nullptr, DType::F32, 0};
    a.dx = Rows{sentinel.data(), DType::BF16, 0, n, -1};
    expect_success("RMS backward, M = 0, N = 2^61, dx only", [&] { rms_norm_backward(a, cpu); });
    expect_success("plan of RMS backward, M = 0, N = 2^61, dx only", [&] { plan_rms_norm_backward(a, cpu); });
    LayerNormForwardArgs f;
    f.x = {nullptr, DType::F16, 0, n, -1};
    f.y = {sentinel.data(), DType::F16, 0, n, -1};
    f.mean = {nullptr, DType::F32, 0};
    f.rstd = {nullptr, DType::F32, 0};
    expect_success("LN forward, M = 0, N = 2^61", [&] { layer_norm_forward(f, cpu); });
    expect_success("plan of LN forward, M = 0, N = 2^61", [&] { plan_layer_norm_forward(f, cpu); });
  }
}

}  // namespace
}  // namespace normkit::test
