// normkit-bench: buffers with rotation, byte floors, and one measurement.
#include "harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace nkbench {

using normkit::DType;
using normkit::Strategy;

const char* op_kind_name(OpKind op) {
  switch (op) {
    case OpKind::LnFwd: return "ln_fwd";
    case OpKind::LnBwd: return "ln_bwd";
    case OpKind::LnGb: return "ln_gb";
    case OpKind::RmsFwd: return "rms_fwd";
    case OpKind::RmsBwd: return "rms_bwd";
    case OpKind::RmsGb: return "rms_gb";
  }
  return "?";
}

const std::vector<OpKind>& all_op_kinds() {
  static const std::vector<OpKind> all = {OpKind::LnFwd,  OpKind::LnBwd,  OpKind::LnGb,
                                          OpKind::RmsFwd, OpKind::RmsBwd, OpKind::RmsGb};
  return all;
}

OpKind parse_op_kind(const std::string& name) {
  for (OpKind op : all_op_kinds())
    if (name == op_kind_name(op)) return op;
  throw std::invalid_argument("unknown op '" + name + "' (expected ln_fwd, ln_bwd, ln_gb, rms_fwd, rms_bwd, rms_gb)");
}

normkit::Op planner_op(OpKind op) {
  switch (op) {
    case OpKind::LnFwd: return normkit::Op::LayerNormForward;
    case OpKind::LnBwd:
    case OpKind::LnGb: return normkit::Op::LayerNormBackward;
    case OpKind::RmsFwd: return normkit::Op::RmsNormForward;
    case OpKind::RmsBwd:
    case OpKind::RmsGb: return normkit::Op::RmsNormBackward;
  }
  return normkit::Op::LayerNormBackward;
}

normkit::Mask op_mask(OpKind op) {
  switch (op) {
    case OpKind::LnBwd: return {true, true, true};
    case OpKind::LnGb: return {false, true, true};
    case OpKind::RmsBwd: return {true, true, false};
    case OpKind::RmsGb: return {false, true, false};
    default: return {false, false, false};
  }
}

DType parse_dtype(const std::string& name) {
  if (name == "f32" || name == "fp32" || name == "float32" || name == "float") return DType::F32;
  if (name == "f16" || name == "fp16" || name == "float16" || name == "half") return DType::F16;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  if (name == "f64" || name == "fp64" || name == "float64" || name == "double") return DType::F64;
  throw std::invalid_argument("unknown dtype '" + name + "' (expected f32, f16, bf16, f64)");
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::F64: return "float64";
  }
  return "?";
}

const char* short_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
  }
  return "?";
}

const std::vector<Strategy>& forced_strategies() {
  static const std::vector<Strategy> all = {Strategy::Simple, Strategy::Tiled, Strategy::TwoPass, Strategy::Fused};
  return all;
}

double floor_bytes(OpKind op, std::int64_t rows, std::int64_t cols, DType dtype, DType wdtype) {
  const double m = double(rows), n = double(cols);
  const double e = double(normkit::dtype_size(dtype)), ew = double(normkit::dtype_size(wdtype));
  const double s = dtype == DType::F64 ? 8.0 : 4.0;  // per-row statistic
  switch (op) {
    case OpKind::LnFwd: return 2 * m * n * e + 2 * s * m + 2 * n * ew;
    case OpKind::LnBwd: return 3 * m * n * e + 2 * s * m + 3 * n * ew;
    case OpKind::LnGb: return 2 * m * n * e + 2 * s * m + 2 * n * ew;
    case OpKind::RmsFwd: return 2 * m * n * e + s * m + n * ew;
    case OpKind::RmsBwd: return 3 * m * n * e + s * m + 2 * n * ew;
    case OpKind::RmsGb: return 2 * m * n * e + s * m + n * ew;
  }
  return 0;
}

const char* timing_mode_name(TimingMode mode) {
  return mode == TimingMode::Events ? "events (stream launches, CUDA events around back-to-back calls)"
                                    : "graph (CUDA-graph replay, events around the replay)";
}

// ---------------------------------------------------------------------------------------------
namespace {
std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }
constexpr std::size_t kAlign = 256;
}  // namespace

std::unique_ptr<Setup> Setup::create(Backend& backend, bool rms, std::int64_t rows, std::int64_t cols, DType dtype,
                                     DType wdtype, const RotationPolicy& rotation, std::string* why) {
  std::unique_ptr<Setup> s(new Setup(backend));
  s->rms_ = rms;
  s->rows_ = rows;
  s->cols_ = cols;
  s->dtype_ = dtype;
  s->wdtype_ = wdtype;
  const std::size_t e = normkit::dtype_size(dtype);
  const std::size_t ew = normkit::dtype_size(wdtype);
  const std::size_t stat = dtype == DType::F64 ? 8 : 4;
  const std::size_t mat = align_up(std::size_t(rows) * std::size_t(cols) * e, kAlign);
  const std::size_t row = align_up(std::size_t(rows) * stat, kAlign);
  const std::size_t vec = align_up(std::size_t(cols) * ew, kAlign);
  s->set_bytes_ = 3 * mat + (rms ? 1 : 2) * row;               // allocated per set (x, dy, y/dx, stats)
  const std::size_t input_bytes = 2 * mat + (rms ? 1 : 2) * row;  // what a call reads: rotation counts these
  const double budget = double(backend.free_memory()) * rotation.memory_fraction;
  const double fixed = 4.0 * double(vec);
  if (backend.free_memory() > 0 && double(s->set_bytes_) + fixed > budget) {
    if (why) {
      *why = "needs " + std::to_string((double(s->set_bytes_) + fixed) / double(1ULL << 30)) + " GiB, budget " +
             std::to_string(budget / double(1ULL << 30)) + " GiB";
    }
    return nullptr;
  }
  std::int64_t sets = 1;
  if (backend.l2_bytes() > 0) {
    const double want = std::ceil(rotation.l2_factor * double(backend.l2_bytes()) / double(input_bytes));
    sets = std::max<std::int64_t>(1, std::min<std::int64_t>(std::int64_t(want), rotation.max_sets));
    if (backend.free_memory() > 0) {
      const std::int64_t fit = std::int64_t((budget - fixed) / double(s->set_bytes_));
      sets = std::max<std::int64_t>(1, std::min(sets, fit));
    }
  }
  s->sets_ = int(sets);

  auto slab = [&](std::size_t stride) {
    Slab sl;
    sl.stride = stride;
    sl.base = static_cast<char*>(backend.alloc(stride * std::size_t(sets)));
    s->allocations_.push_back(sl.base);
    return sl;
  };
  auto single = [&](std::size_t bytes) {
    void* p = backend.alloc(bytes);
    s->allocations_.push_back(p);
    return p;
  };
  s->x_ = slab(mat);
  s->dy_ = slab(mat);
  s->out_ = slab(mat);
  if (!rms) s->mean_ = slab(row);
  s->rstd_ = slab(row);
  s->weight_ = single(vec);
  s->dweight_ = single(vec);
  if (!rms) {
    s->bias_ = single(vec);
    s->dbias_ = single(vec);
  }
  // Inputs: standard normal; distinct streams per tensor (the slab is filled as one array, so
  // every set holds different values).
  backend.fill_normal(s->x_.base, dtype, std::int64_t(mat / e) * sets, 0x1001);
  backend.fill_normal(s->dy_.base, dtype, std::int64_t(mat / e) * sets, 0x2002);
  backend.fill_normal(s->weight_, wdtype, cols, 0x3003);
  if (!rms) backend.fill_normal(s->bias_, wdtype, cols, 0x4004);
  // Per-row statistics exactly as training produces them: the forward of each set.
  const normkit::ExecConfig cfg = s->config(Strategy::Auto);
  for (std::int64_t i = 0; i < sets; ++i) {
    if (rms)
      normkit::rms_norm_forward(s->rms_fwd_args(i), cfg);
    else
      normkit::layer_norm_forward(s->ln_fwd_args(i), cfg);
  }
  backend.synchronize();
  return s;
}

Setup::~Setup() {
  try {
    backend_.synchronize();
    for (void* p : allocations_) backend_.release(p);
    if (workspace_) backend_.release(workspace_);
  } catch (...) {
    // A failed device cannot free; the process reports the original error.
  }
}

normkit::ExecConfig Setup::config(Strategy strategy, const normkit::PlannerTable* table) const {
  normkit::ExecConfig c;
  c.device = backend_.device();
  c.stream = backend_.stream();
  c.strategy = strategy;
  c.table = table;
  return c;
}

namespace {
DType stat_dtype(DType dtype) { return dtype == DType::F64 ? DType::F64 : DType::F32; }
}  // namespace

normkit::LayerNormForwardArgs Setup::ln_fwd_args(std::int64_t set) const {
  normkit::LayerNormForwardArgs a;
  a.x = normkit::ConstRows{x_.at(set), dtype_, rows_, cols_, -1};
  a.weight = normkit::ConstVec{weight_, wdtype_, cols_};
  a.bias = normkit::ConstVec{bias_, wdtype_, cols_};
  a.eps = 1e-5;
  a.y = normkit::Rows{out_.at(set), dtype_, rows_, cols_, -1};
  a.mean = normkit::Vec{mean_.at(set), stat_dtype(dtype_), rows_};
  a.rstd = normkit::Vec{rstd_.at(set), stat_dtype(dtype_), rows_};
  return a;
}

normkit::RmsNormForwardArgs Setup::rms_fwd_args(std::int64_t set) const {
  normkit::RmsNormForwardArgs a;
  a.x = normkit::ConstRows{x_.at(set), dtype_, rows_, cols_, -1};
  a.weight = normkit::ConstVec{weight_, wdtype_, cols_};
  a.eps = 1e-6;
  a.y = normkit::Rows{out_.at(set), dtype_, rows_, cols_, -1};
  a.rstd = normkit::Vec{rstd_.at(set), stat_dtype(dtype_), rows_};
  return a;
}

normkit::LayerNormBackwardArgs Setup::ln_bwd_args(std::int64_t set, bool dx) const {
  normkit::LayerNormBackwardArgs a;
  a.dy = normkit::ConstRows{dy_.at(set), dtype_, rows_, cols_, -1};
  a.x = normkit::ConstRows{x_.at(set), dtype_, rows_, cols_, -1};
  a.mean = normkit::ConstVec{mean_.at(set), stat_dtype(dtype_), rows_};
  a.rstd = normkit::ConstVec{rstd_.at(set), stat_dtype(dtype_), rows_};
  a.weight = normkit::ConstVec{weight_, wdtype_, cols_};
  if (dx) a.dx = normkit::Rows{out_.at(set), dtype_, rows_, cols_, -1};
  a.dweight = normkit::Vec{dweight_, wdtype_, cols_};
  a.dbias = normkit::Vec{dbias_, wdtype_, cols_};
  return a;
}

normkit::RmsNormBackwardArgs Setup::rms_bwd_args(std::int64_t set, bool dx) const {
  normkit::RmsNormBackwardArgs a;
  a.dy = normkit::ConstRows{dy_.at(set), dtype_, rows_, cols_, -1};
  a.x = normkit::ConstRows{x_.at(set), dtype_, rows_, cols_, -1};
  a.rstd = normkit::ConstVec{rstd_.at(set), stat_dtype(dtype_), rows_};
  a.weight = normkit::ConstVec{weight_, wdtype_, cols_};
  if (dx) a.dx = normkit::Rows{out_.at(set), dtype_, rows_, cols_, -1};
  a.dweight = normkit::Vec{dweight_, wdtype_, cols_};
  return a;
}

void Setup::run(OpKind op, Strategy strategy, std::int64_t set, const normkit::PlannerTable* table) {
  const normkit::Workspace ws{workspace_, workspace_bytes_};
  const normkit::ExecConfig cfg = config(op_is_forward(op) ? Strategy::Auto : strategy, table);
  switch (op) {
    case OpKind::LnFwd: normkit::layer_norm_forward(ln_fwd_args(set), cfg); break;
    case OpKind::RmsFwd: normkit::rms_norm_forward(rms_fwd_args(set), cfg); break;
    case OpKind::LnBwd: normkit::layer_norm_backward(ln_bwd_args(set, true), cfg, ws); break;
    case OpKind::LnGb: normkit::layer_norm_backward(ln_bwd_args(set, false), cfg, ws); break;
    case OpKind::RmsBwd: normkit::rms_norm_backward(rms_bwd_args(set, true), cfg, ws); break;
    case OpKind::RmsGb: normkit::rms_norm_backward(rms_bwd_args(set, false), cfg, ws); break;
  }
}

std::size_t Setup::ensure_workspace(OpKind op, Strategy strategy, const normkit::PlannerTable* table) {
  std::size_t need = 0;
  switch (op) {
    case OpKind::LnFwd:
    case OpKind::RmsFwd: return 0;
    case OpKind::LnBwd:
    case OpKind::LnGb:
      need = normkit::layer_norm_backward_workspace_size(ln_bwd_args(0, op == OpKind::LnBwd), config(strategy, table));
      break;
    case OpKind::RmsBwd:
    case OpKind::RmsGb:
      need = normkit::rms_norm_backward_workspace_size(rms_bwd_args(0, op == OpKind::RmsBwd), config(strategy, table));
      break;
  }
  if (need > workspace_bytes_) {
    if (workspace_) {
      backend_.synchronize();
      backend_.release(workspace_);
      workspace_ = nullptr;
      workspace_bytes_ = 0;
    }
    workspace_ = backend_.alloc(need);
    workspace_bytes_ = need;
  }
  return need;
}

normkit::Problem Setup::problem(OpKind op) const {
  normkit::Problem p;
  p.op = planner_op(op);
  p.rows = rows_;
  p.cols = cols_;
  p.dtype = dtype_;
  p.weight_dtype = wdtype_;
  p.mask = op_mask(op);
  // the buffers are separate allocations (aligned) of contiguous rows: 16-byte rows where N allows
  p.rows_vector_aligned = cols_ * std::int64_t(normkit::dtype_size(dtype_)) % 16 == 0;
  return p;
}

normkit::Plan Setup::plan(OpKind op, Strategy strategy, const normkit::PlannerTable* table) const {
  const normkit::ExecConfig cfg = config(strategy, table);
  switch (op) {
    case OpKind::LnBwd:
    case OpKind::LnGb: return normkit::plan_layer_norm_backward(ln_bwd_args(0, op == OpKind::LnBwd), cfg);
    case OpKind::RmsBwd:
    case OpKind::RmsGb: return normkit::plan_rms_norm_backward(rms_bwd_args(0, op == OpKind::RmsBwd), cfg);
    // the forward plans from its arguments too (before session 48 from problem(), which called every row
    // 16-byte aligned: odd-N forward rows were reported as vectorised plans)
    case OpKind::LnFwd: return normkit::plan_layer_norm_forward(ln_fwd_args(0), cfg);
    case OpKind::RmsFwd: return normkit::plan_rms_norm_forward(rms_fwd_args(0), cfg);
  }
  throw std::logic_error("Setup::plan: unknown op");
}

normkit::Plan Setup::plan_with_table(OpKind op, Strategy strategy, const normkit::PlannerTable& table) const {
  return normkit::plan(problem(op), backend_.planner_facts(), strategy, table);
}

// ---------------------------------------------------------------------------------------------
namespace {
std::int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void summarize(Timing& t) {
  if (t.runs_us.empty()) return;
  std::vector<double> v = t.runs_us;
  std::sort(v.begin(), v.end());
  t.min_us = v.front();
  t.median_us = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  t.mean_us = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

/// Calls captured in one graph: at least `iters`, and a whole number of rotations so that every
/// set is re-used only after all the others, also across replays.
int graph_calls(int iters, int sets) {
  if (sets <= 1) return std::max(iters, 1);
  const int cycles = (std::max(iters, sets) + sets - 1) / sets;
  return cycles * sets;
}
}  // namespace

namespace {
bool failed(const Timing& t) { return t.unsupported || !t.error.empty(); }

/// Runs `step`; a normkit::Error marks the strategy unsupported, any other exception an error.
template <typename Step>
void guarded(Timing& t, const Step& step) {
  try {
    step();
  } catch (const normkit::Error& e) {
    t.unsupported = true;
    t.error = e.what();
  } catch (const std::exception& e) {
    t.error = e.what();
  }
}
}  // namespace

Timing measure(Backend& backend, Setup& setup, OpKind op, Strategy strategy, TimingMode mode,
               const TimingParams& params) {
  return measure_variants(backend, setup, op, {Variant{strategy}}, mode, params).front();
}

std::vector<Timing> measure_strategies(Backend& backend, Setup& setup, OpKind op,
                                       const std::vector<Strategy>& strategies, TimingMode mode,
                                       const TimingParams& params) {
  std::vector<Variant> variants;
  for (Strategy s : strategies) variants.push_back({s});
  return measure_variants(backend, setup, op, variants, mode, params);
}

std::vector<Timing> measure_variants(Backend& backend, Setup& setup, OpKind op, const std::vector<Variant>& variants,
                                     TimingMode mode, const TimingParams& params) {
  if (!params.interleave && variants.size() > 1) {
    std::vector<Timing> out;
    for (const Variant& v : variants) out.push_back(measure_variants(backend, setup, op, {v}, mode, params).front());
    return out;
  }
  const std::size_t count = variants.size();
  std::vector<Timing> out(count);
  for (std::size_t k = 0; k < count; ++k) {
    Timing& t = out[k];
    t.warmup = params.warmup;
    t.iters = params.iters;
    t.runs = std::max(params.runs, 1);
    const Variant& v = variants[k];
    if (op_is_forward(op) && v.strategy != Strategy::Auto) {
      t.unsupported = true;
      t.error = "forward ops have no gamma/beta strategy";
    } else if (mode == TimingMode::Graph && !backend.graphs_supported()) {
      t.error = "graph mode needs a CUDA device";
    } else {
      // Every variant's workspace before any graph is captured: a graph keeps the workspace's
      // address, which a later variant's larger need would free.
      guarded(t, [&] {
        setup.ensure_workspace(op, v.strategy, v.table);
        t.plan = setup.plan(op, v.strategy, v.table).describe();
      });
    }
  }

  const int sets = setup.sets();
  std::vector<std::unique_ptr<TimedRuns>> ready(count);
  for (std::size_t k = 0; k < count; ++k) {
    Timing& t = out[k];
    if (failed(t)) continue;
    const Variant v = variants[k];
    const Call call = [&setup, op, v, sets](std::int64_t i) { setup.run(op, v.strategy, i % sets, v.table); };
    guarded(t, [&] {
      call(0);
      backend.synchronize();
      if (params.budget_s > 0) {
        const double one_us = backend.time_once(call, sets > 1 ? 1 : 0);
        const double calls = mode == TimingMode::Events
                                 ? double(t.warmup + t.iters * t.runs)
                                 : double(t.warmup + graph_calls(t.iters, sets) * (t.runs + 1));
        const double predicted_s = one_us * 1e-6 * calls;
        if (predicted_s > params.budget_s) {
          const double f = params.budget_s / predicted_s;
          t.iters = std::max(1, int(double(t.iters) * f));
          t.warmup = std::max(1, int(double(t.warmup) * f));
        }
      }
      t.wall_start_ms = unix_ms();
      if (mode == TimingMode::Events) {
        ready[k] = backend.prepare_stream(call, t.warmup, t.iters);
      } else {
        t.calls_per_graph = graph_calls(t.iters, sets);
        ready[k] = backend.prepare_graph(call, t.warmup, t.calls_per_graph);
      }
    });
  }

  // Rounds: in round r the variants take turns from variant r mod count, so the one timed first after the
  // host's wait changes from round to round; even rounds go up the list and odd rounds down it, so a
  // variant follows its upper neighbour in some rounds and its lower one in others: one that leaves the GPU
  // hot or cold (a power-capped kernel, NOTES entry 76) does not always do so to the same one.
  const int runs = std::max(params.runs, 1);
  for (int r = 0; r < runs; ++r) {
    for (std::size_t j = 0; j < count; ++j) {
      const std::size_t k = round_turn(r, j, count);
      if (!ready[k]) continue;
      guarded(out[k], [&] {
        out[k].runs_us.push_back(ready[k]->run());
        out[k].wall_end_ms = unix_ms();
      });
      if (failed(out[k])) ready[k].reset();
    }
  }
  for (std::size_t k = 0; k < count; ++k) {
    if (!ready[k]) continue;
    ready[k].reset();
    summarize(out[k]);
    out[k].ok = true;
  }
  return out;
}

}  // namespace nkbench
