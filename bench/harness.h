// normkit-bench: what is timed (ops, shapes, dtypes), the buffers it runs on (with rotation so data
// larger than nothing but smaller than the cache is not read from L2), byte floors, and one
// measurement = (op, strategy, timing mode).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend.h"
#include "normkit/normkit.h"

namespace nkbench {

enum class OpKind { LnFwd, LnBwd, LnGb, RmsFwd, RmsBwd, RmsGb };

/// "ln_fwd", "ln_bwd", "ln_gb", "rms_fwd", "rms_bwd", "rms_gb".
const char* op_kind_name(OpKind op);
OpKind parse_op_kind(const std::string& name);  // throws std::invalid_argument
const std::vector<OpKind>& all_op_kinds();
inline bool op_is_rms(OpKind op) { return op == OpKind::RmsFwd || op == OpKind::RmsBwd || op == OpKind::RmsGb; }
inline bool op_is_forward(OpKind op) { return op == OpKind::LnFwd || op == OpKind::RmsFwd; }
/// "layer_norm" / "rms_norm" (the seed's Op column).
inline const char* op_family_name(OpKind op) { return op_is_rms(op) ? "rms_norm" : "layer_norm"; }
/// The planner's view (Op + mask) of a benchmarked op.
normkit::Op planner_op(OpKind op);
normkit::Mask op_mask(OpKind op);

/// Accepts f32/fp32/float32/float, f16/fp16/float16/half, bf16/bfloat16, f64/fp64/float64/double.
normkit::DType parse_dtype(const std::string& name);
/// "float16", "bfloat16", "float32", "float64" (the seed's dtype column).
const char* torch_dtype_name(normkit::DType dtype);
/// "f16", "bf16", "f32", "f64".
const char* short_dtype_name(normkit::DType dtype);

/// Strategies a backward op can be forced to, in table order.
const std::vector<normkit::Strategy>& forced_strategies();

/// Bytes that must move (each input read once, each output written once): /work/shared/norm-math.md.
/// RMSNorm gamma-only (not in that sheet): 2*M*N*e + 4*M + N*e_w (read x, dy, rstd; write dw).
double floor_bytes(OpKind op, std::int64_t rows, std::int64_t cols, normkit::DType dtype, normkit::DType wdtype);

enum class TimingMode { Events, Graph };
const char* timing_mode_name(TimingMode mode);

struct TimingParams {
  int warmup = 20;
  int iters = 100;
  int runs = 3;
  /// Measurements whose first call predicts more than this many seconds for the whole
  /// measurement get fewer iterations (never fewer than 1); 0 = no limit.
  double budget_s = 0;
  /// measure_variants / measure_strategies: the variants' runs take turns (true), or each is measured
  /// whole, one after another (false, --sequential: how every result before NOTES entry 96 was measured).
  bool interleave = true;
};

struct RotationPolicy {
  double l2_factor = 3.0;         ///< rotate sets until total bytes > l2_factor * L2
  int max_sets = 1024;            ///< cap on buffer sets
  double memory_fraction = 0.6;   ///< at most this fraction of free memory for one setup
};

/// A strided slab: `count` equally spaced buffers in one allocation.
struct Slab {
  char* base = nullptr;
  std::size_t stride = 0;
  void* at(std::int64_t set) const { return base + std::size_t(set) * stride; }
};

/// Buffers for one (family, M, N, dtype, weight dtype): `sets` copies of every M*N and per-row
/// tensor (x, dy, out = y or dx, mean, rstd), one weight/bias/dweight/dbias, one workspace.
class Setup {
 public:
  /// Returns nullptr and *why when the buffers do not fit.
  static std::unique_ptr<Setup> create(Backend& backend, bool rms, std::int64_t rows, std::int64_t cols,
                                       normkit::DType dtype, normkit::DType wdtype, const RotationPolicy& rotation,
                                       std::string* why);
  ~Setup();
  Setup(const Setup&) = delete;
  Setup& operator=(const Setup&) = delete;

  bool rms() const { return rms_; }
  std::int64_t rows() const { return rows_; }
  std::int64_t cols() const { return cols_; }
  normkit::DType dtype() const { return dtype_; }
  normkit::DType wdtype() const { return wdtype_; }
  int sets() const { return sets_; }
  std::size_t set_bytes() const { return set_bytes_; }

  /// `table` plans the call (nullptr: the library's default, which NORMKIT_PLANNER_TABLE may name); the
  /// caller keeps it alive. --tune times plans that the default table would not choose with it.
  normkit::ExecConfig config(normkit::Strategy strategy, const normkit::PlannerTable* table = nullptr) const;
  /// Runs `op` on buffer set `set` (workspace must have been ensured for backward ops); `table` as in config().
  void run(OpKind op, normkit::Strategy strategy, std::int64_t set, const normkit::PlannerTable* table = nullptr);
  /// Workspace query (throws normkit::Error when the strategy cannot serve the op) and growth.
  std::size_t ensure_workspace(OpKind op, normkit::Strategy strategy, const normkit::PlannerTable* table = nullptr);
  /// The plan the library would run (backward: plan_*_backward; forward: normkit::plan).
  normkit::Plan plan(OpKind op, normkit::Strategy strategy, const normkit::PlannerTable* table = nullptr) const;
  /// normkit::plan() for the backward op with a custom table (e.g. fused disabled).
  normkit::Plan plan_with_table(OpKind op, normkit::Strategy strategy, const normkit::PlannerTable& table) const;
  normkit::Problem problem(OpKind op) const;

 private:
  Setup(Backend& backend) : backend_(backend) {}
  normkit::LayerNormForwardArgs ln_fwd_args(std::int64_t set) const;
  normkit::RmsNormForwardArgs rms_fwd_args(std::int64_t set) const;
  normkit::LayerNormBackwardArgs ln_bwd_args(std::int64_t set, bool dx) const;
  normkit::RmsNormBackwardArgs rms_bwd_args(std::int64_t set, bool dx) const;

  Backend& backend_;
  bool rms_ = false;
  std::int64_t rows_ = 0, cols_ = 0;
  normkit::DType dtype_ = normkit::DType::F16, wdtype_ = normkit::DType::F16;
  int sets_ = 1;
  std::size_t set_bytes_ = 0;
  Slab x_, dy_, out_, mean_, rstd_;
  void* weight_ = nullptr;
  void* bias_ = nullptr;
  void* dweight_ = nullptr;
  void* dbias_ = nullptr;
  void* workspace_ = nullptr;
  std::size_t workspace_bytes_ = 0;
  std::vector<void*> allocations_;
};

/// One measurement's outcome.
struct Timing {
  bool ok = false;
  bool unsupported = false;  ///< normkit::Error: the strategy cannot serve this op/shape
  std::string error;         ///< why not ok
  std::vector<double> runs_us;
  double mean_us = 0, min_us = 0, median_us = 0;
  int warmup = 0, iters = 0, runs = 0;
  int calls_per_graph = 0;   ///< graph mode: calls captured in the graph
  std::string plan;          ///< Plan::describe() of what ran
  /// Unix time (ms) around the timed calls, warm-up included: for setting a measurement beside the GPU's
  /// clocks sampled meanwhile (bench/clock_spread.py).
  std::int64_t wall_start_ms = 0, wall_end_ms = 0;
};

/// Times `op` forced to `strategy` (Auto = the planner's choice) in `mode`.
Timing measure(Backend& backend, Setup& setup, OpKind op, normkit::Strategy strategy, TimingMode mode,
               const TimingParams& params);

/// What one measurement of measure_variants runs: a strategy, planned under `table` (nullptr: the
/// library's default).
struct Variant {
  normkit::Strategy strategy;
  const normkit::PlannerTable* table = nullptr;
};

/// Times `op` under each variant (one Timing each, in their order). With params.interleave, every
/// variant is made ready first (warm-up, graph), then run r times each of them once, in the order
/// round_turn gives: a drift of the GPU's clock or power over a cell then falls on all of them
/// alike instead of on whichever was measured last, and the ratios drawn between them (auto / best
/// forced, a tuned table against the default) compare times taken side by side. Without it,
/// each variant is measured whole, one after another.
std::vector<Timing> measure_variants(Backend& backend, Setup& setup, OpKind op, const std::vector<Variant>& variants,
                                     TimingMode mode, const TimingParams& params);
/// The variant timed j-th in round r of count variants: from variant r mod count, up the list in even
/// rounds (r, r + 1, ...) and down it in odd rounds (r, r - 1, ...), wrapping around.
inline std::size_t round_turn(int r, std::size_t j, std::size_t count) {
  const std::size_t first = std::size_t(r) % count;
  return r % 2 == 0 ? (first + j) % count : (first + count - j % count) % count;
}
/// measure_variants of `strategies` under the default table.
std::vector<Timing> measure_strategies(Backend& backend, Setup& setup, OpKind op,
                                       const std::vector<normkit::Strategy>& strategies, TimingMode mode,
                                       const TimingParams& params);

}  // namespace nkbench
