// normkit-bench: times normkit's LayerNorm/RMSNorm kernels the way the seed did (CUDA events around
// back-to-back stream launches) and as kernel time (CUDA-graph replay), against byte floors from a
// copy bandwidth measured in the same process. Modes: --suite seed | llm, --sweep, --tune FILE, or a
// single --shape. bench/README.md describes every mode and the method.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backend.h"
#include "cli.h"
#include "harness.h"
#include "normkit/normkit.h"
#include "report.h"

namespace nkbench {
namespace {

using normkit::DType;
using normkit::Strategy;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---------------------------------------------------------------------------------------------
// Run-wide context
struct Context {
  Backend* backend = nullptr;
  std::string why_cpu;  // non-empty on the CPU path
  double copy_bw = 0;   // bytes/s, read + write
  std::size_t copy_bytes = 0;
  std::string commit, date;
  TimingParams params;
  std::vector<TimingMode> modes;
  RotationPolicy rotation;
  std::optional<DType> wdtype;  // weight dtype override (default: the activation dtype)
  double tie = 0.05;
  std::int64_t cpu_max_elements = 1 << 22;
  int errors = 0;  // measurements that failed for a reason other than an unsupported strategy

  bool cpu() const { return backend->device() == normkit::Device::Cpu; }
  DType weight_dtype(DType dtype) const { return wdtype ? *wdtype : dtype; }
};

std::string modes_name(const std::vector<TimingMode>& modes) {
  std::string s;
  for (auto m : modes) s += std::string(s.empty() ? "" : "+") + (m == TimingMode::Events ? "events" : "graph");
  return s;
}

Record meta_record(const Context& ctx, const std::string& what) {
  Record m = {{"tool", "normkit-bench"},
              {"what", what},
              {"commit", ctx.commit},
              {"date", ctx.date},
              {"device", ctx.backend->device_name()},
              {"device_description", ctx.backend->description()},
              {"backend", ctx.cpu() ? "cpu" : "cuda"},
              {"normkit_built_with_cuda", normkit::built_with_cuda()},
              {"copy_bandwidth_GBps", ctx.copy_bw / 1e9},
              {"copy_bytes", ctx.copy_bytes},
              {"l2_bytes", ctx.backend->l2_bytes()},
              {"modes", modes_name(ctx.modes)},
              {"warmup", ctx.params.warmup},
              {"iters", ctx.params.iters},
              {"runs", ctx.params.runs},
              {"budget_s_per_measurement", ctx.params.budget_s},
              {"rotation_l2_factor", ctx.rotation.l2_factor},
              {"rotation_max_sets", ctx.rotation.max_sets}};
  if (!ctx.why_cpu.empty()) m.push_back({"note", ctx.why_cpu});
  return m;
}

std::string header_lines(const Context& ctx, const std::string& title, TimingMode mode) {
  std::ostringstream os;
  os << "## " << title << "\n\n";
  os << "- commit: " << ctx.commit << "\n";
  os << "- date: " << ctx.date << "\n";
  os << "- GPU: " << ctx.backend->description() << "\n";
  if (!ctx.why_cpu.empty()) {
    os << "- note: " << ctx.why_cpu << "\n";
    os << "- note: normkit's CPU path is its float64 reference: a forced strategy is validated but computes the "
          "same thing, so strategy columns differ only by noise; the planner columns show what the H200 defaults "
          "would choose\n";
  }
  os << "- mode: " << (ctx.cpu() ? "host clock around back-to-back calls (CPU reference path)" : timing_mode_name(mode))
     << "\n";
  os << "- copy bandwidth: " << fmt(ctx.copy_bw / 1e12, 3) << " TB/s (" << (ctx.cpu() ? "memcpy" : "cudaMemcpyAsync D2D")
     << " of " << fmt_bytes(double(ctx.copy_bytes)) << ", bytes read + written, best of several)\n";
  os << "- warm-up " << ctx.params.warmup << " | iters " << ctx.params.iters << " | runs averaged " << ctx.params.runs;
  if (mode == TimingMode::Graph) os << " | graph: the iters calls (rounded up to whole rotations) captured once, one untimed replay, each run = one timed replay";
  os << " | inputs rotate over buffer sets until > " << fmt(ctx.rotation.l2_factor, 0) << "x L2\n\n";
  return os.str();
}

/// µs (NaN when the measurement did not succeed).
double us(const Timing& t) { return t.ok ? t.mean_us : kNaN; }
std::string cell(const Timing& t) {
  if (t.ok) return fmt(t.mean_us);
  return t.unsupported ? "n/a" : "error";
}

Record timing_record(const Context& ctx, const std::string& suite, const std::string& name, const Setup& s, OpKind op,
                     Strategy strategy, TimingMode mode, const Timing& t) {
  const double bytes = floor_bytes(op, s.rows(), s.cols(), s.dtype(), s.wdtype());
  const double floor_us = bytes / ctx.copy_bw * 1e6;
  Record r = {{"suite", suite},
              {"case", name},
              {"op", op_kind_name(op)},
              {"M", s.rows()},
              {"N", s.cols()},
              {"dtype", short_dtype_name(s.dtype())},
              {"wdtype", short_dtype_name(s.wdtype())},
              {"strategy", normkit::strategy_name(strategy)},
              {"mode", mode == TimingMode::Events ? (ctx.cpu() ? "host" : "events") : "graph"},
              {"ok", t.ok},
              {"unsupported", t.unsupported},
              {"time_us", t.ok ? Value(t.mean_us) : Value::null()},
              {"median_us", t.ok ? Value(t.median_us) : Value::null()},
              {"min_us", t.ok ? Value(t.min_us) : Value::null()},
              {"warmup", t.warmup},
              {"iters", t.iters},
              {"runs", t.runs},
              {"calls_per_graph", t.calls_per_graph},
              {"sets", s.sets()},
              {"plan", t.plan},
              {"wall_start_ms", t.ok ? Value(t.wall_start_ms) : Value::null()},
              {"wall_end_ms", t.ok ? Value(t.wall_end_ms) : Value::null()},
              {"floor_bytes", bytes},
              {"floor_us", floor_us},
              {"GBps", t.ok ? Value(bytes / (t.mean_us * 1e-6) / 1e9) : Value::null()},
              {"pct_floor", t.ok ? Value(100.0 * floor_us / t.mean_us) : Value::null()}};
  if (!t.ok) r.push_back({"error", t.error});
  return r;
}

void note_failure(Context& ctx, const std::string& what, const Timing& t) {
  if (t.ok || t.unsupported) return;
  ++ctx.errors;
  std::cerr << "normkit-bench: " << what << ": " << t.error << "\n";
}

/// `weight` overrides the weight dtype (a suite case's own; else --wdtype or the activation dtype).
std::unique_ptr<Setup> make_setup(Context& ctx, bool rms, std::int64_t m, std::int64_t n, DType dtype, std::string* why,
                                  std::optional<DType> weight = std::nullopt) {
  try {
    return Setup::create(*ctx.backend, rms, m, n, dtype, weight ? *weight : ctx.weight_dtype(dtype), ctx.rotation, why);
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
}

bool cpu_too_big(const Context& ctx, std::int64_t m, std::int64_t n, std::string* why) {
  if (!ctx.cpu() || m * n <= ctx.cpu_max_elements) return false;
  *why = "skipped on the CPU path: M*N = " + std::to_string(m * n) + " > --cpu-max-elements " +
         std::to_string(ctx.cpu_max_elements);
  return true;
}

struct Outputs {
  std::string json, csv, md;
};

void write_outputs(const Outputs& out, const Record& meta, const std::vector<Record>& records,
                   const std::vector<std::pair<std::string, std::vector<Record>>>& tables, const std::string& md) {
  if (!out.json.empty()) {
    std::vector<std::pair<std::string, std::vector<Record>>> arrays = {{"records", records}};
    for (const auto& t : tables) arrays.push_back(t);
    write_file(out.json, json_document(meta, arrays));
    std::cerr << "normkit-bench: wrote " << out.json << "\n";
  }
  if (!out.csv.empty()) {
    write_file(out.csv, csv_document(records));
    std::cerr << "normkit-bench: wrote " << out.csv << "\n";
  }
  if (!out.md.empty()) {
    write_file(out.md, md);
    std::cerr << "normkit-bench: wrote " << out.md << "\n";
  }
}

std::vector<Record> table_records(const Table& t) {
  std::vector<Record> out;
  for (const auto& row : t.rows) {
    Record r;
    for (std::size_t i = 0; i < row.size() && i < t.header.size(); ++i) r.push_back({t.header[i], row[i]});
    out.push_back(r);
  }
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

// ---------------------------------------------------------------------------------------------
// --suite seed

struct SeedCase {
  const char* name;
  bool rms;
  std::vector<std::int64_t> dims;  // as printed in the seed
  DType dtype;
  const char* seed_branch;         // the seed's Branch column (its label, kept for comparison)
  std::int64_t rows() const {
    std::int64_t m = 1;
    for (std::size_t i = 0; i + 1 < dims.size(); ++i) m *= dims[i];
    return m;
  }
  std::int64_t cols() const { return dims.back(); }
};

const std::vector<SeedCase>& seed_cases() {
  static const std::vector<SeedCase> cases = {
      {"tile8_small", false, {32, 512}, DType::F16, "Tile-8"},
      {"tile64_medium", false, {96, 768}, DType::F16, "Tile-64"},
      {"tile128_medium", false, {192, 1024}, DType::BF16, "Tile-128"},
      {"tile256_large", false, {4096, 1024}, DType::F16, "Tile-256"},
      {"tile256_bert", false, {1024, 768}, DType::F16, "Tile-256 BERT"},
      {"tile256_large_bf16", false, {4096, 1024}, DType::BF16, "Tile-256"},
      {"tile256_large_fp32", false, {4096, 1024}, DType::F32, "Tile-256"},
      {"two_pass_huge_M", false, {131072, 64}, DType::F16, "Two-pass M-parallel"},
      {"llm_hidden_4096", false, {32, 4096, 4096}, DType::BF16, "Tile-256 LLM"},
      {"gpt2_style", false, {8, 1024, 768}, DType::F16, "Tile-256 GPT2"},
      {"rms_tile256", true, {4096, 1024}, DType::F16, "Tile-256 rms"},
      {"rms_llm", true, {32, 4096, 4096}, DType::BF16, "Tile-256 rms LLM"},
      {"rms_two_pass", true, {131072, 64}, DType::F16, "Two-pass rms"},
  };
  return cases;
}

int run_seed(Context& ctx, const Outputs& out) {
  normkit::PlannerTable no_fused = normkit::default_planner_table();
  no_fused.fused_enabled = false;

  std::vector<Record> records;
  std::map<TimingMode, Table> gb_tables, other_tables;
  for (auto mode : ctx.modes) {
    gb_tables[mode].header = {"Benchmark", "Op", "Shape", "dtype", "Seed branch", "Branch (auto plan)",
                              "Tiled only", "Tiled+Two pass", "Δ (µs)", "Speedup", "Winner", "Mixed pick",
                              "two_pass forced", "fused", "auto", "bytes moved", "auto GB/s", "auto % of floor",
                              "fastest"};
    other_tables[mode].header = {"Benchmark", "Op", "Shape", "dtype", "full bwd auto (µs)", "full bwd plan",
                                 "full bwd fused", "full bwd best unfused", "full bwd % of floor",
                                 "fwd auto (µs)", "fwd % of floor"};
  }

  for (const SeedCase& c : seed_cases()) {
    const std::int64_t m = c.rows(), n = c.cols();
    const OpKind gb = c.rms ? OpKind::RmsGb : OpKind::LnGb;
    const OpKind full = c.rms ? OpKind::RmsBwd : OpKind::LnBwd;
    const OpKind fwd = c.rms ? OpKind::RmsFwd : OpKind::LnFwd;
    std::string why;
    std::unique_ptr<Setup> setup;
    if (!cpu_too_big(ctx, m, n, &why)) setup = make_setup(ctx, c.rms, m, n, c.dtype, &why);
    if (!setup) {
      std::cerr << "normkit-bench: " << c.name << ": " << why << "\n";
      for (auto mode : ctx.modes) {
        gb_tables[mode].rows.push_back({c.name, op_family_name(gb), shape_text(c.dims), torch_dtype_name(c.dtype),
                                        c.seed_branch, "skipped: " + why, "", "", "", "", "", "", "", "", "", "", "",
                                        "", ""});
      }
      continue;
    }
    std::cerr << "normkit-bench: seed case " << c.name << " (M " << m << ", N " << n << ", " << setup->sets()
              << " buffer set" << (setup->sets() > 1 ? "s" : "") << ")\n";

    std::string auto_plan, mixed_text;
    Strategy mixed = Strategy::Tiled;
    try {
      auto_plan = setup->plan(gb, Strategy::Auto).describe();
      const normkit::Plan p = setup->plan_with_table(gb, Strategy::Auto, no_fused);
      mixed = p.strategy;
      mixed_text = p.describe();
    } catch (const std::exception& e) {
      auto_plan = std::string("plan failed: ") + e.what();
      mixed_text = "?";
    }

    for (auto mode : ctx.modes) {
      std::map<Strategy, Timing> t;
      std::vector<Strategy> strategies = {Strategy::Tiled, Strategy::TwoPass, Strategy::Fused, Strategy::Auto};
      if (std::find(strategies.begin(), strategies.end(), mixed) == strategies.end()) strategies.push_back(mixed);
      for (Strategy st : strategies) {
        t[st] = measure(*ctx.backend, *setup, gb, st, mode, ctx.params);
        note_failure(ctx, std::string(c.name) + " " + op_kind_name(gb) + " " + normkit::strategy_name(st), t[st]);
        records.push_back(timing_record(ctx, "seed", c.name, *setup, gb, st, mode, t[st]));
      }
      const double tiled = us(t[Strategy::Tiled]), mix = us(t[mixed]);
      const double delta = tiled - mix, speedup = tiled / mix;
      std::string winner = "n/a";
      if (std::isfinite(speedup)) {
        if (speedup >= 1.0 + ctx.tie) winner = mixed == Strategy::TwoPass ? "Two pass" : normkit::strategy_name(mixed);
        else if (speedup <= 1.0 - ctx.tie) winner = "Tiled";
        else winner = "~tie";
      }
      const double bytes = floor_bytes(gb, m, n, setup->dtype(), setup->wdtype());
      const double a = us(t[Strategy::Auto]);
      std::string fastest = "n/a";
      double best = kNaN;
      for (Strategy st : {Strategy::Tiled, Strategy::TwoPass, Strategy::Fused}) {
        const double v = us(t[st]);
        if (std::isfinite(v) && !(v >= best)) {
          best = v;
          fastest = normkit::strategy_name(st);
        }
      }
      gb_tables[mode].rows.push_back(
          {c.name, op_family_name(gb), shape_text(c.dims), torch_dtype_name(c.dtype), c.seed_branch, auto_plan,
           cell(t[Strategy::Tiled]), cell(t[mixed]), fmt(delta), std::isfinite(speedup) ? fmt(speedup) + "×" : "n/a",
           winner, mixed_text, cell(t[Strategy::TwoPass]), cell(t[Strategy::Fused]), cell(t[Strategy::Auto]),
           fmt_bytes(bytes), fmt(bytes / (a * 1e-6) / 1e9, 1), fmt(100.0 * bytes / ctx.copy_bw * 1e6 / a, 1) + "%",
           fastest});

      // Second table: full backward (auto, fused, best unfused) and forward.
      std::map<Strategy, Timing> f;
      for (Strategy st : {Strategy::Auto, Strategy::Fused, Strategy::Tiled, Strategy::TwoPass}) {
        f[st] = measure(*ctx.backend, *setup, full, st, mode, ctx.params);
        note_failure(ctx, std::string(c.name) + " " + op_kind_name(full) + " " + normkit::strategy_name(st), f[st]);
        records.push_back(timing_record(ctx, "seed", c.name, *setup, full, st, mode, f[st]));
      }
      const Timing fw = measure(*ctx.backend, *setup, fwd, Strategy::Auto, mode, ctx.params);
      note_failure(ctx, std::string(c.name) + " " + op_kind_name(fwd), fw);
      records.push_back(timing_record(ctx, "seed", c.name, *setup, fwd, Strategy::Auto, mode, fw));
      const double full_bytes = floor_bytes(full, m, n, setup->dtype(), setup->wdtype());
      const double fwd_bytes = floor_bytes(fwd, m, n, setup->dtype(), setup->wdtype());
      const double unfused = std::fmin(us(f[Strategy::Tiled]), us(f[Strategy::TwoPass]));
      other_tables[mode].rows.push_back(
          {c.name, op_family_name(full), shape_text(c.dims), torch_dtype_name(c.dtype), cell(f[Strategy::Auto]),
           f[Strategy::Auto].plan, cell(f[Strategy::Fused]), fmt(unfused),
           fmt(100.0 * full_bytes / ctx.copy_bw * 1e6 / us(f[Strategy::Auto]), 1) + "%", cell(fw),
           fmt(100.0 * fwd_bytes / ctx.copy_bw * 1e6 / us(fw), 1) + "%"});
    }
  }

  std::string md = "# normkit-bench --suite seed\n\n";
  std::vector<std::pair<std::string, std::vector<Record>>> tables;
  for (auto mode : ctx.modes) {
    const std::string mname = mode == TimingMode::Events ? (ctx.cpu() ? "host" : "events") : "graph";
    md += header_lines(ctx, "Layer Norm Backward Benchmark (gamma/beta only): Tiled only vs Tiled+Two pass — " + mname,
                       mode);
    md += "Summary (avg µs over " + std::to_string(ctx.params.runs) + " runs)\n\n";
    md += gb_tables[mode].markdown();
    md += "\nΔ = Tiled only − Tiled+Two pass (positive = the mixed choice is faster). Speedup = Tiled only / "
          "Tiled+Two pass; Winner: ~tie within ±" + fmt(100 * ctx.tie, 0) + "%.\n"
          "Tiled+Two pass = the strategy normkit's planner picks with the fused path disabled (Mixed pick), timed "
          "forced; Tiled only = Strategy::Tiled forced. bytes moved = byte floor of the op "
          "(/work/shared/norm-math.md); % of floor = floor time at the copy bandwidth / measured time.\n\n";
    md += "### Full backward (dx + dweight [+ dbias]) and forward — " + mname + "\n\n";
    md += other_tables[mode].markdown() + "\n";
    tables.push_back({"seed_gamma_beta_" + mname, table_records(gb_tables[mode])});
    tables.push_back({"seed_full_and_forward_" + mname, table_records(other_tables[mode])});
  }
  std::cout << md;
  write_outputs(out, meta_record(ctx, "suite seed"), records, tables, md);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Generic per-(op, shape, dtype) table: the llm suite and a single --shape.

struct ShapeCase {
  std::string name;
  std::int64_t rows, cols;
  /// fp32 weights on 16-bit rows (torch.autocast's case: bf16 activations, the module's fp32 weights); the
  /// case is left out for fp32 rows (the plain case already) and where --wdtype sets the weights for all.
  std::optional<DType> weight = std::nullopt;
};

std::vector<Strategy> strategies_for(OpKind op, const std::vector<Strategy>& requested) {
  if (op_is_forward(op)) return {Strategy::Auto};
  return requested;
}

int run_shapes(Context& ctx, const Outputs& out, const std::string& suite, const std::vector<ShapeCase>& shapes,
               const std::vector<DType>& dtypes, const std::vector<OpKind>& ops,
               const std::vector<Strategy>& strategies) {
  std::vector<Record> records;
  std::map<TimingMode, Table> tables;
  std::vector<std::string> header = {"case", "op", "M", "N", "dtype"};
  std::vector<Strategy> forced;
  for (Strategy s : strategies)
    if (s != Strategy::Auto) forced.push_back(s);
  for (Strategy s : forced) header.push_back(normkit::strategy_name(s));
  header.insert(header.end(), {"auto", "auto plan", "auto / best forced", "bytes moved", "auto GB/s", "auto % of floor"});
  for (auto mode : ctx.modes) tables[mode].header = header;

  for (DType dtype : dtypes) {
    for (bool rms : {false, true}) {
      std::vector<OpKind> family_ops;
      for (OpKind op : ops)
        if (op_is_rms(op) == rms) family_ops.push_back(op);
      if (family_ops.empty()) continue;
      for (const ShapeCase& sc : shapes) {
        if (sc.weight && (dtype == *sc.weight || ctx.wdtype)) continue;
        std::string why;
        std::unique_ptr<Setup> setup;
        if (!cpu_too_big(ctx, sc.rows, sc.cols, &why))
          setup = make_setup(ctx, rms, sc.rows, sc.cols, dtype, &why, sc.weight);
        if (!setup) {
          std::cerr << "normkit-bench: " << sc.name << " " << short_dtype_name(dtype) << ": " << why << "\n";
          continue;
        }
        std::cerr << "normkit-bench: " << suite << " " << sc.name << " " << (rms ? "rms" : "ln") << " "
                  << short_dtype_name(dtype) << " (" << setup->sets() << " buffer set" << (setup->sets() > 1 ? "s" : "")
                  << ")\n";
        for (OpKind op : family_ops) {
          for (auto mode : ctx.modes) {
            std::map<Strategy, Timing> t;
            const auto op_strategies = strategies_for(op, strategies);
            for (Strategy st : op_strategies) {
              t[st] = measure(*ctx.backend, *setup, op, st, mode, ctx.params);
              note_failure(ctx, sc.name + " " + op_kind_name(op) + " " + normkit::strategy_name(st), t[st]);
              records.push_back(timing_record(ctx, suite, sc.name, *setup, op, st, mode, t[st]));
            }
            std::vector<std::string> row = {sc.name, op_kind_name(op), std::to_string(sc.rows), std::to_string(sc.cols),
                                            torch_dtype_name(dtype) +
                                                (setup->wdtype() != dtype
                                                     ? std::string(" / w ") + torch_dtype_name(setup->wdtype())
                                                     : std::string())};
            double best = kNaN;
            for (Strategy s : forced) {
              if (op_is_forward(op)) {
                row.push_back("-");
                continue;
              }
              row.push_back(t.count(s) ? cell(t[s]) : "-");
              if (t.count(s) && t[s].ok && !(t[s].mean_us >= best)) best = t[s].mean_us;
            }
            const bool has_auto = t.count(Strategy::Auto) != 0;
            const double a = has_auto ? us(t[Strategy::Auto]) : kNaN;
            const double bytes = floor_bytes(op, sc.rows, sc.cols, setup->dtype(), setup->wdtype());
            row.push_back(has_auto ? cell(t[Strategy::Auto]) : "-");
            row.push_back(has_auto ? t[Strategy::Auto].plan : "-");
            row.push_back(std::isfinite(a / best) ? fmt(a / best, 3) : "-");
            row.push_back(fmt_bytes(bytes));
            row.push_back(fmt(bytes / (a * 1e-6) / 1e9, 1));
            row.push_back(std::isfinite(a) ? fmt(100.0 * bytes / ctx.copy_bw * 1e6 / a, 1) + "%" : "-");
            tables[mode].rows.push_back(row);
          }
        }
      }
    }
  }

  std::string md = "# normkit-bench " + suite + "\n\n";
  std::vector<std::pair<std::string, std::vector<Record>>> json_tables;
  for (auto mode : ctx.modes) {
    const std::string mname = mode == TimingMode::Events ? (ctx.cpu() ? "host" : "events") : "graph";
    md += header_lines(ctx, suite + " — " + mname, mode);
    md += "Times in µs (mean of runs). Strategy columns force the gamma/beta strategy; n/a = the strategy cannot "
          "serve the shape (normkit::Error). Forward ops have only auto.\n\n";
    md += tables[mode].markdown() + "\n";
    json_tables.push_back({suite + "_" + mname, table_records(tables[mode])});
  }
  std::cout << md;
  write_outputs(out, meta_record(ctx, suite), records, json_tables, md);
  return 0;
}

const std::vector<ShapeCase>& llm_shapes() {
  static const std::vector<ShapeCase> shapes = {
      {"llm_131072x4096", 131072, 4096}, {"llama_16384x8192", 16384, 8192}, {"wide_2048x65536", 2048, 65536},
      {"gpt2_8192x768", 8192, 768},      {"odd_8192x1000", 8192, 1000},     {"huge_m_131072x64", 131072, 64},
      {"wide_4096x262144", 4096, 262144},
      // autocast: fp32 weights on the 16-bit rows (docs/NOTES.md entry 84: the wide rows' 32-byte weight
      // slots at 54-58 % of the floor)
      {"autocast_131072x4096_w32", 131072, 4096, DType::F32},
      {"autocast_16384x8192_w32", 16384, 8192, DType::F32},
      {"autocast_wide_4096x262144_w32", 4096, 262144, DType::F32},
  };
  return shapes;
}

// ---------------------------------------------------------------------------------------------
// --sweep

/// Powers of two from 2^lo to 2^hi, with the odd neighbours 2^k - 1 and 2^k + 1 of every other power.
std::vector<std::int64_t> pow2_grid(int hi) {
  std::vector<std::int64_t> v;
  const std::int64_t limit = std::int64_t(1) << hi;
  for (int k = 0; k <= hi; ++k) {
    const std::int64_t p = std::int64_t(1) << k;
    if (k >= 2 && k % 2 == 0) v.push_back(p - 1);
    v.push_back(p);
    if (k >= 2 && k % 2 == 0 && p + 1 <= limit) v.push_back(p + 1);
  }
  return v;
}

int run_sweep(Context& ctx, const Outputs& out, const std::vector<std::int64_t>& ms, const std::vector<std::int64_t>& ns,
              const std::vector<DType>& dtypes, const std::vector<OpKind>& ops, const std::vector<Strategy>& strategies,
              double max_cell_bytes) {
  struct Cell {
    DType dtype;
    bool rms;
    std::int64_t m, n;
  };
  std::vector<Cell> cells;
  std::int64_t skipped = 0;
  for (DType dtype : dtypes)
    for (bool rms : {false, true}) {
      bool any = false;
      for (OpKind op : ops) any = any || op_is_rms(op) == rms;
      if (!any) continue;
      for (std::int64_t m : ms)
        for (std::int64_t n : ns) {
          double bytes = 0;
          for (OpKind op : ops)
            if (op_is_rms(op) == rms) bytes = std::max(bytes, floor_bytes(op, m, n, dtype, ctx.weight_dtype(dtype)));
          std::string why;
          if (bytes > max_cell_bytes || cpu_too_big(ctx, m, n, &why)) {
            ++skipped;
            continue;
          }
          cells.push_back({dtype, rms, m, n});
        }
    }
  std::cerr << "normkit-bench: sweep of " << cells.size() << " cells (" << skipped << " skipped above "
            << fmt_bytes(max_cell_bytes) << " per cell), ops";
  for (OpKind op : ops) std::cerr << " " << op_kind_name(op);
  std::cerr << ", modes " << modes_name(ctx.modes) << "\n";

  std::vector<Record> records;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const Cell& c = cells[i];
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double eta = i ? elapsed / double(i) * double(cells.size() - i) : 0;
    std::fprintf(stderr, "\r[sweep] %zu/%zu %s %s M=%lld N=%lld  elapsed %.0fs  eta %.0fs      ", i + 1, cells.size(),
                 c.rms ? "rms" : "ln", short_dtype_name(c.dtype), (long long)c.m, (long long)c.n, elapsed, eta);
    std::fflush(stderr);
    std::string why;
    auto setup = make_setup(ctx, c.rms, c.m, c.n, c.dtype, &why);
    if (!setup) {
      std::fprintf(stderr, "\nnormkit-bench: M=%lld N=%lld: %s\n", (long long)c.m, (long long)c.n, why.c_str());
      continue;
    }
    for (OpKind op : ops) {
      if (op_is_rms(op) != c.rms) continue;
      for (auto mode : ctx.modes) {
        for (Strategy st : strategies_for(op, strategies)) {
          const Timing t = measure(*ctx.backend, *setup, op, st, mode, ctx.params);
          if (!t.ok && !t.unsupported) {
            ++ctx.errors;
            std::fprintf(stderr, "\nnormkit-bench: %s M=%lld N=%lld %s: %s\n", op_kind_name(op), (long long)c.m,
                         (long long)c.n, normkit::strategy_name(st), t.error.c_str());
          }
          Record r = timing_record(ctx, "sweep", "", *setup, op, st, mode, t);
          if (st == Strategy::Auto && t.ok) {
            try {
              r.push_back({"auto_choice", normkit::strategy_name(setup->plan(op, Strategy::Auto).strategy)});
            } catch (const std::exception&) {
            }
          }
          records.push_back(std::move(r));
        }
      }
    }
  }
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "\n[sweep] done: %zu cells, %zu measurements in %.1f s\n", cells.size(), records.size(), total);

  // Summary: per (op, dtype, mode) how often auto is within the tie band of the best forced strategy.
  struct Agg {
    int cells = 0, within = 0;
    double worst = 0;
    std::string worst_cell;
  };
  std::map<std::string, Agg> agg;
  std::map<std::string, std::map<std::string, double>> best_forced, auto_time;  // key -> cell -> µs
  for (const Record& r : records) {
    std::map<std::string, const Value*> f;
    for (const auto& kv : r) f[kv.first] = &kv.second;
    if (!f["ok"]->b) continue;
    const std::string key = f["op"]->s + " " + f["dtype"]->s + " " + f["mode"]->s;
    const std::string cellname = std::to_string(f["M"]->i) + "x" + std::to_string(f["N"]->i);
    const double v = f["time_us"]->d;
    if (f["strategy"]->s == "auto") {
      auto_time[key][cellname] = v;
    } else {
      auto& b = best_forced[key][cellname];
      if (b == 0 || v < b) b = v;
    }
  }
  Table summary;
  summary.header = {"op dtype mode", "cells", "auto within " + fmt(100 * ctx.tie, 0) + "% of best forced", "worst auto/best",
                    "worst cell"};
  for (const auto& [key, cellmap] : auto_time) {
    Agg a;
    for (const auto& [cellname, at] : cellmap) {
      const auto it = best_forced[key].find(cellname);
      if (it == best_forced[key].end()) continue;
      const double ratio = at / it->second;
      ++a.cells;
      if (ratio <= 1.0 + ctx.tie) ++a.within;
      if (ratio > a.worst) {
        a.worst = ratio;
        a.worst_cell = cellname;
      }
    }
    summary.rows.push_back({key, std::to_string(a.cells), std::to_string(a.within), fmt(a.worst, 3), a.worst_cell});
  }
  std::string md = "# normkit-bench --sweep\n\n" + header_lines(ctx, "sweep", ctx.modes.back()) + summary.markdown();
  std::cout << md;
  write_outputs(out, meta_record(ctx, "sweep"), records, {{"summary", table_records(summary)}}, md);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// --tune FILE

/// Step 5 of --tune: fused rows beyond a portable cluster of 2-item blocks
/// (PlannerTable::fused_cached_split_min_beyond_portable, docs/NOTES.md entry 91). Rows that need 9..16
/// 2-item blocks, full backward, LayerNorm and RMSNorm (16-bit rows with fp32 weights too: the key is one
/// for both weight types), timed fused as 2-item blocks over a cluster above the portable size and in the
/// wide layout; the cut (rows from this many blocks take the 2-item blocks; 17 = never, which is
/// fused_cached_split_max at the portable size) by the regret score of steps 1, 3 and 4. Only where the
/// device launches clusters above the portable size (both plans as named, else the row is not a point).
struct CachedSplitTune {
  struct Point {
    OpKind op;
    normkit::Problem problem;  // the full backward timed (M, N, dtypes)
    int blocks;
    double cached, wide;
  };
  static constexpr int kNever = normkit::kMaxFusedSplitBlocks + 1;
  std::vector<Point> points;
  double default_score = kNaN, tuned_score = kNaN;
  Table table;

  /// A table that takes rows beyond the portable cluster as 2-item blocks from `cut` blocks (kNever: none).
  static normkit::PlannerTable with_cut(normkit::PlannerTable t, int cut) {
    if (cut >= kNever) {
      t.fused_cached_split_max = normkit::kPortableClusterBlocks;
    } else {
      t.fused_cached_split_max = normkit::kMaxFusedSplitBlocks;
      t.fused_cached_split_min_beyond_portable = cut;
    }
    return t;
  }
  /// Whether `table` plans `p`'s fused rows as 2-item blocks (else the wide layout): the planner's answer.
  static bool takes_cached(const normkit::Problem& p, const normkit::DeviceFacts& facts, const normkit::PlannerTable& table) {
    return normkit::plan(p, facts, Strategy::Fused, table).row.items == normkit::kMaxFusedItems;
  }
  /// Geometric-mean regret of the layout `table` plans at each point.
  double score(const normkit::DeviceFacts& facts, const normkit::PlannerTable& table) const {
    double sum = 0;
    for (const Point& p : points)
      sum += std::log((takes_cached(p.problem, facts, table) ? p.cached : p.wide) / std::min(p.cached, p.wide));
    return points.empty() ? kNaN : std::exp(sum / double(points.size()));
  }

  template <typename Timed>
  void run(Context& ctx, DType dtype, double max_cell_bytes, normkit::PlannerTable& best_table, Timed&& timed) {
    const normkit::DeviceFacts facts = ctx.backend->planner_facts();
    const normkit::PlannerTable cached_all = with_cut(best_table, normkit::kPortableClusterBlocks + 1);
    const normkit::PlannerTable wide_all = with_cut(best_table, kNever);
    const std::int64_t vec = 16 / std::int64_t(normkit::dtype_size(dtype));
    std::vector<DType> weights{ctx.weight_dtype(dtype)};
    if (normkit::dtype_size(dtype) == 2 && weights[0] != DType::F32) weights.push_back(DType::F32);
    for (bool rms : {false, true}) {
      const OpKind op = rms ? OpKind::RmsBwd : OpKind::LnBwd;
      for (DType w : weights) {
        for (int blocks = normkit::kPortableClusterBlocks + 1; blocks <= normkit::kMaxFusedSplitBlocks; ++blocks) {
          const std::int64_t n = blocks * std::int64_t(normkit::kFusedBlockThreads) * normkit::kMaxFusedItems * vec;
          // the most rows of these that fit the cell limit (and the CPU path's)
          std::int64_t m = 0;
          std::string why;
          for (std::int64_t rows : {2048, 512, 64, 8, 1}) {
            if (floor_bytes(op, rows, n, dtype, w) <= max_cell_bytes && !cpu_too_big(ctx, rows, n, &why)) {
              m = rows;
              break;
            }
          }
          if (m == 0) continue;
          std::fprintf(stderr, "\r[tune] fused split rows %s M=%lld N=%lld        ", op_kind_name(op), (long long)m, (long long)n);
          std::fflush(stderr);
          auto setup = make_setup(ctx, rms, m, n, dtype, &why, w);
          if (!setup) continue;
          const normkit::Problem problem = setup->problem(op);
          try {
            const normkit::Plan cached_plan = setup->plan_with_table(op, Strategy::Fused, cached_all);
            if (!takes_cached(problem, facts, cached_all) || cached_plan.row.split <= normkit::kPortableClusterBlocks ||
                takes_cached(problem, facts, wide_all))
              continue;  // this device does not launch the cluster the 2-item row needs
          } catch (const normkit::Error&) {
            continue;
          }
          setup->set_table(&cached_all);
          const Timing cached = timed(*setup, op, Strategy::Fused, "cached_split");
          setup->set_table(&wide_all);
          const Timing wide = timed(*setup, op, Strategy::Fused, "wide_split");
          if (cached.ok && wide.ok) points.push_back({op, problem, blocks, cached.mean_us, wide.mean_us});
        }
      }
    }
    std::fprintf(stderr, "\n");
    default_score = tuned_score = score(facts, best_table);
    normkit::PlannerTable tuned = best_table;
    if (!points.empty()) {
      for (int cut = normkit::kPortableClusterBlocks + 1; cut <= kNever; ++cut) {
        const normkit::PlannerTable candidate = with_cut(best_table, cut);
        const double sc = score(facts, candidate);
        if (sc < tuned_score - 1e-6) {  // only a strictly better score moves the keys
          tuned_score = sc;
          tuned = candidate;
        }
      }
    }
    best_table = tuned;
    table.header = {"op", "weights", "M", "N", "blocks needed", "2-item (µs)", "wide (µs)", "2-item / wide", "tuned table picks"};
    for (const Point& p : points)
      table.rows.push_back({op_kind_name(p.op), normkit::dtype_name(p.problem.weight_dtype),
                            std::to_string(p.problem.rows), std::to_string(p.problem.cols), std::to_string(p.blocks),
                            fmt(p.cached), fmt(p.wide), fmt(p.cached / p.wide, 3),
                            takes_cached(p.problem, facts, best_table) ? "2-item" : "wide"});
  }
  /// The two keys of `t`, for the report.
  static std::string keys_of(const normkit::PlannerTable& t) {
    return "fused_cached_split_max = " + std::to_string(t.fused_cached_split_max) +
           ", fused_cached_split_min_beyond_portable = " + std::to_string(t.fused_cached_split_min_beyond_portable);
  }
};

/// Step 6 of --tune: the forward's wide split rows, 8 vectors a thread (kWideForwardSplitItems, half the
/// cluster) or kSplitItems (PlannerTable::forward_split_wide_items_min_vectors / _min_rows). Rows longer
/// than a portable cluster of the dX layout holds, up to what kSplitItems blocks of the largest cluster
/// hold (N = 98304 ... 262144 16-bit, 49152 ... 131072 fp32), at up to four row counts within
/// `--max-cell-bytes`, LayerNorm (16-bit rows: the only ones built with 8 vectors) and RMSNorm, 16-bit rows
/// with fp32 weights too; each timed under a table that takes 8 vectors wherever it can and one that never
/// does. The two keys by the regret score of steps 1 and 3-5. Why a step: the cut is the GPU's -- the H200
/// measured 8 vectors 1-5 % faster at 262144 columns (docs/NOTES.md entry 74), an H100 4 vectors over
/// clusters of 16 up to 12 % faster (entry 92).
struct ForwardSplitItemsTune {
  struct Point {
    OpKind op;
    normkit::Problem problem;  // the forward timed (M, N, dtypes)
    std::int64_t vectors;
    double more, fewer;  // 8 vectors a thread, kSplitItems
  };
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  std::vector<Point> points;
  double default_score = kNaN, tuned_score = kNaN;
  Table table;

  static normkit::PlannerTable with_keys(normkit::PlannerTable t, std::int64_t min_vectors, std::int64_t min_rows) {
    t.forward_split_wide_items_min_vectors = min_vectors;
    t.forward_split_wide_items_min_rows = min_rows;
    return t;
  }
  /// Whether `table` splits `p`'s rows as 8 vectors a thread: the planner's answer.
  static bool takes_more(const normkit::Problem& p, const normkit::DeviceFacts& facts, const normkit::PlannerTable& table) {
    const normkit::Plan plan = normkit::plan(p, facts, Strategy::Auto, table);
    return plan.row.split > 1 && plan.row.items == normkit::kWideForwardSplitItems;
  }
  double score(const normkit::DeviceFacts& facts, const normkit::PlannerTable& table) const {
    double sum = 0;
    for (const Point& p : points)
      sum += std::log((takes_more(p.problem, facts, table) ? p.more : p.fewer) / std::min(p.more, p.fewer));
    return points.empty() ? kNaN : std::exp(sum / double(points.size()));
  }

  template <typename Timed>
  void run(Context& ctx, DType dtype, double max_cell_bytes, normkit::PlannerTable& best_table, Timed&& timed) {
    const normkit::DeviceFacts facts = ctx.backend->planner_facts();
    const normkit::PlannerTable more_all = with_keys(best_table, 0, 1);
    const normkit::PlannerTable fewer_all = with_keys(best_table, kNever, kNever);
    const std::int64_t vec = 16 / std::int64_t(normkit::dtype_size(dtype));
    std::vector<DType> weights{ctx.weight_dtype(dtype)};
    if (normkit::dtype_size(dtype) == 2 && weights[0] != DType::F32) weights.push_back(DType::F32);
    // row lengths in 16-byte vectors: 1.5x, 2x, 3x and 4x what a portable cluster of the dX layout holds
    const std::int64_t portable_vectors =
        std::int64_t(normkit::kPortableClusterBlocks) * normkit::kSplitBlockThreads * normkit::kSplitItems;
    for (bool rms : {false, true}) {
      if (!normkit::forward_split_wide_items_built(rms, int(normkit::dtype_size(dtype)))) continue;
      const OpKind op = rms ? OpKind::RmsFwd : OpKind::LnFwd;
      for (DType w : weights) {
        for (std::int64_t vectors : {portable_vectors * 3 / 2, portable_vectors * 2, portable_vectors * 3, portable_vectors * 4}) {
          const std::int64_t n = vectors * vec;
          // rows about the key's 128 (entry 60) within the limits; one row where none fits (the CPU path's)
          std::vector<std::int64_t> ms;
          for (std::int64_t m : {32, 128, 512, 2048}) {
            std::string why;
            if (floor_bytes(op, m, n, dtype, w) <= max_cell_bytes && !cpu_too_big(ctx, m, n, &why)) ms.push_back(m);
          }
          std::string why;
          if (ms.empty() && floor_bytes(op, 1, n, dtype, w) <= max_cell_bytes && !cpu_too_big(ctx, 1, n, &why)) ms.push_back(1);
          for (std::int64_t m : ms) {
            std::fprintf(stderr, "\r[tune] forward split items %s M=%lld N=%lld        ", op_kind_name(op), (long long)m,
                         (long long)n);
            std::fflush(stderr);
            auto setup = make_setup(ctx, rms, m, n, dtype, &why, w);
            if (!setup) continue;
            const normkit::Problem problem = setup->problem(op);
            const normkit::Plan fewer_plan = setup->plan_with_table(op, Strategy::Auto, fewer_all);
            if (!takes_more(problem, facts, more_all) || fewer_plan.row.split <= 1 ||
                fewer_plan.row.items != normkit::kSplitItems)
              continue;  // one of the two layouts does not serve this row here (e.g. no cluster of 16)
            setup->set_table(&more_all);
            const Timing more = timed(*setup, op, Strategy::Auto, "split_8_vectors");
            setup->set_table(&fewer_all);
            const Timing fewer = timed(*setup, op, Strategy::Auto, "split_4_vectors");
            if (more.ok && fewer.ok) points.push_back({op, problem, vectors, more.mean_us, fewer.mean_us});
          }
        }
      }
    }
    std::fprintf(stderr, "\n");
    default_score = tuned_score = score(facts, best_table);
    normkit::PlannerTable tuned = best_table;
    std::vector<std::int64_t> vector_cuts{kNever}, row_cuts{1};
    for (const Point& p : points) {
      vector_cuts.push_back(p.vectors);
      row_cuts.push_back(p.problem.rows);
    }
    for (std::int64_t v : vector_cuts) {
      for (std::int64_t r : row_cuts) {
        const normkit::PlannerTable candidate = with_keys(best_table, v, r);
        const double sc = score(facts, candidate);
        if (sc < tuned_score - 1e-6) {  // only a strictly better score moves the keys
          tuned_score = sc;
          tuned = candidate;
        }
      }
    }
    best_table = tuned;
    table.header = {"op", "weights", "M", "N", "vectors", "8 vectors (µs)", "4 vectors (µs)", "8 / 4", "tuned table picks"};
    for (const Point& p : points)
      table.rows.push_back({op_kind_name(p.op), normkit::dtype_name(p.problem.weight_dtype), std::to_string(p.problem.rows),
                            std::to_string(p.problem.cols), std::to_string(p.vectors), fmt(p.more), fmt(p.fewer),
                            fmt(p.more / p.fewer, 3), takes_more(p.problem, facts, best_table) ? "8 vectors" : "4 vectors"});
  }
  static std::string keys_of(const normkit::PlannerTable& t) {
    const auto value = [](std::int64_t v) { return v == kNever ? std::string("never") : std::to_string(v); };
    return "forward_split_wide_items_min_vectors = " + value(t.forward_split_wide_items_min_vectors) +
           ", forward_split_wide_items_min_rows = " + value(t.forward_split_wide_items_min_rows);
  }
};

int run_tune(Context& ctx, const Outputs& out, const std::string& path, DType dtype,
             const std::vector<std::int64_t>& tune_n, double max_cell_bytes) {
  const TimingMode mode = ctx.modes.back();  // graph when available
  const normkit::DeviceFacts facts = ctx.backend->planner_facts();
  std::vector<Record> records;
  // One measurement of the tune under the table `setup` holds: timed, a failure noted, recorded as `label`.
  auto timed = [&](Setup& setup, OpKind op, Strategy st, const std::string& label) {
    const Timing t = measure(*ctx.backend, setup, op, st, mode, ctx.params);
    note_failure(ctx, "tune", t);
    records.push_back(timing_record(ctx, "tune", label, setup, op, st, mode, t));
    return t;
  };

  // 1) Gamma/beta crossovers (simple vs tiled vs two-pass) over M for a few N, LN and RMS.
  struct Point {
    OpKind op;
    std::int64_t m, n;
    std::map<Strategy, double> t;
  };
  std::vector<Point> points;
  std::vector<std::int64_t> ms;
  for (int k = 0; k <= 20; ++k) ms.push_back(std::int64_t(1) << k);
  for (bool rms : {false, true}) {
    const OpKind op = rms ? OpKind::RmsGb : OpKind::LnGb;
    for (std::int64_t n : tune_n) {
      for (std::int64_t m : ms) {
        std::string why;
        if (floor_bytes(op, m, n, dtype, ctx.weight_dtype(dtype)) > max_cell_bytes || cpu_too_big(ctx, m, n, &why))
          continue;
        std::fprintf(stderr, "\r[tune] gamma/beta %s M=%lld N=%lld        ", op_kind_name(op), (long long)m, (long long)n);
        std::fflush(stderr);
        auto setup = make_setup(ctx, rms, m, n, dtype, &why);
        if (!setup) continue;
        Point p{op, m, n, {}};
        for (Strategy st : {Strategy::Simple, Strategy::Tiled, Strategy::TwoPass}) {
          const Timing t = timed(*setup, op, st, "crossover");
          if (t.ok) p.t[st] = t.mean_us;
        }
        if (!p.t.empty()) points.push_back(p);
      }
    }
  }
  std::fprintf(stderr, "\n");

  // Score a table: geometric-mean regret of the strategy the planner (fused disabled) would pick,
  // against the fastest measured strategy at each point.
  auto score = [&](const normkit::PlannerTable& table, int* missing) {
    double sum = 0;
    int used = 0;
    *missing = 0;
    for (const Point& p : points) {
      double best = std::numeric_limits<double>::infinity();
      for (const auto& kv : p.t) best = std::min(best, kv.second);
      normkit::Problem prob;
      prob.op = planner_op(p.op);
      prob.rows = p.m;
      prob.cols = p.n;
      prob.dtype = dtype;
      prob.weight_dtype = ctx.weight_dtype(dtype);
      prob.mask = op_mask(p.op);
      const Strategy chosen = normkit::plan(prob, facts, Strategy::Auto, table).strategy;
      const auto it = p.t.find(chosen);
      if (it == p.t.end()) {
        ++*missing;
        continue;
      }
      sum += std::log(it->second / best);
      ++used;
    }
    return used ? std::exp(sum / used) : kNaN;
  };

  normkit::PlannerTable base = normkit::default_planner_table();
  base.fused_enabled = false;
  int missing = 0;
  const double default_score = score(base, &missing);
  normkit::PlannerTable best_table = base;
  double best_score = default_score;
  const std::vector<std::int64_t> simple_candidates = {0, 1, 2, 4, 8, 16, 32, 64};
  std::vector<std::int64_t> part_candidates;
  for (std::int64_t v = 8; v <= 16384; v *= 2) part_candidates.push_back(v);
  // The rows a narrowed (16-lane) tiled strip holds before two-pass takes over: it only changes which
  // of the strategies measured above is picked (the tiled shape is the table's own), so it is scored
  // on the same points; of the M = 2^k grid it decides only at M = 512 (from two_pass_min_rows, below
  // column_vec_two_pass_min_rows).
  const std::vector<std::int64_t> narrow_strip_candidates = {base.two_pass_min_rows_per_narrow_strip, 8, 12, 16, 32, 48};
  auto search = [&](const std::vector<std::int64_t>& parts) {
    best_table = base;
    best_score = default_score;
    for (std::int64_t s : simple_candidates) {
      for (std::int64_t pr : parts) {
        for (std::int64_t ns : narrow_strip_candidates) {
          normkit::PlannerTable cand = base;
          cand.simple_max_rows = s;
          cand.two_pass_min_rows_per_part = pr;
          cand.two_pass_min_rows_per_narrow_strip = ns;
          int miss = 0;
          const double sc = score(cand, &miss);
          if (miss == 0 && std::isfinite(sc) && sc < best_score - 1e-6) {
            best_score = sc;
            best_table = cand;
          }
        }
      }
    }
  };
  search(part_candidates);

  // 1b) The points above timed two-pass with the default split, but two_pass_min_rows_per_part also
  // sets the split (parts <= M / value), and the full backward runs that split beside dX. A tuned value
  // is kept only if the full backward's two-pass (LN and RMS, dX too) is not slower with it than with
  // the default split where the two give different plans (geometric mean); else step 1 is searched
  // again at the default split. (An H200 run at a5c9806 tuned 8 from the gamma/beta points, and with it
  // the full backward at 4096 x 512 bf16 took 12.8 against 9.5 us: docs/NOTES.md entry 69.)
  Table split_table;
  split_table.header = {"op", "M", "N", "default split (µs)", "tuned split (µs)", "tuned / default"};
  double split_log_sum = 0;
  int split_points = 0;
  const std::int64_t tuned_parts = best_table.two_pass_min_rows_per_part;
  if (tuned_parts != base.two_pass_min_rows_per_part) {
    for (bool rms : {false, true}) {
      const OpKind op = rms ? OpKind::RmsBwd : OpKind::LnBwd;
      for (std::int64_t n : tune_n) {
        for (std::int64_t m : {std::int64_t(1024), std::int64_t(4096), std::int64_t(16384), std::int64_t(65536)}) {
          std::string why;
          if (floor_bytes(op, m, n, dtype, ctx.weight_dtype(dtype)) > max_cell_bytes || cpu_too_big(ctx, m, n, &why))
            continue;
          auto setup = make_setup(ctx, rms, m, n, dtype, &why);
          if (!setup) continue;
          if (setup->plan_with_table(op, Strategy::TwoPass, base).describe() ==
              setup->plan_with_table(op, Strategy::TwoPass, best_table).describe())
            continue;
          std::fprintf(stderr, "\r[tune] two-pass split %s M=%lld N=%lld        ", op_kind_name(op), (long long)m, (long long)n);
          std::fflush(stderr);
          setup->set_table(&base);
          const Timing with_default = timed(*setup, op, Strategy::TwoPass, "default_split");
          setup->set_table(&best_table);
          const Timing with_tuned = timed(*setup, op, Strategy::TwoPass, "tuned_split");
          if (!with_default.ok || !with_tuned.ok) continue;
          split_log_sum += std::log(with_tuned.mean_us / with_default.mean_us);
          ++split_points;
          split_table.rows.push_back({op_kind_name(op), std::to_string(m), std::to_string(n), fmt(with_default.mean_us),
                                      fmt(with_tuned.mean_us), fmt(with_tuned.mean_us / with_default.mean_us, 3)});
        }
      }
    }
    std::fprintf(stderr, "\n");
  }
  const double split_geo = split_points ? std::exp(split_log_sum / split_points) : kNaN;
  const bool split_kept = !(split_geo > 1.0);
  if (!split_kept) search({base.two_pass_min_rows_per_part});

  // 2) fused_enabled: fused vs the best unfused strategy on large shapes (full backward and
  // gamma/beta only), geometric mean of the ratio.
  Table fused_table;
  fused_table.header = {"op", "M", "N", "fused (µs)", "best unfused (µs)", "fused / best unfused"};
  double log_sum = 0;
  int fused_points = 0;
  for (const ShapeCase& sc : llm_shapes()) {
    if (sc.weight) continue;  // the tuned table is per activation dtype, with weights of that dtype
    for (bool rms : {false, true}) {
      std::string why;
      if (floor_bytes(rms ? OpKind::RmsBwd : OpKind::LnBwd, sc.rows, sc.cols, dtype, ctx.weight_dtype(dtype)) >
              4 * max_cell_bytes ||
          cpu_too_big(ctx, sc.rows, sc.cols, &why))
        continue;
      std::fprintf(stderr, "\r[tune] fused %s %s        ", rms ? "rms" : "ln", sc.name.c_str());
      std::fflush(stderr);
      auto setup = make_setup(ctx, rms, sc.rows, sc.cols, dtype, &why);
      if (!setup) continue;
      for (OpKind op : rms ? std::vector<OpKind>{OpKind::RmsBwd, OpKind::RmsGb}
                           : std::vector<OpKind>{OpKind::LnBwd, OpKind::LnGb}) {
        const Timing fused = measure(*ctx.backend, *setup, op, Strategy::Fused, mode, ctx.params);
        records.push_back(timing_record(ctx, "tune", sc.name, *setup, op, Strategy::Fused, mode, fused));
        if (!fused.ok) continue;  // fused cannot serve this row width
        double unfused = kNaN;
        for (Strategy st : {Strategy::Tiled, Strategy::TwoPass}) {
          const Timing t = timed(*setup, op, st, sc.name);
          if (t.ok && !(t.mean_us >= unfused)) unfused = t.mean_us;
        }
        if (!std::isfinite(unfused)) continue;
        log_sum += std::log(fused.mean_us / unfused);
        ++fused_points;
        fused_table.rows.push_back({op_kind_name(op), std::to_string(sc.rows), std::to_string(sc.cols),
                                    fmt(fused.mean_us), fmt(unfused), fmt(fused.mean_us / unfused, 3)});
      }
    }
  }
  std::fprintf(stderr, "\n");
  const double fused_geo = fused_points ? std::exp(log_sum / fused_points) : kNaN;
  best_table.fused_enabled =
      fused_points ? fused_geo < 1.0 : normkit::default_planner_table().fused_enabled;

  // 3) The fused backward as one thread-block cluster (small full backwards, one launch) against the
  // best other plan -- tiled, two-pass, or fused reducing in a second launch -- on a grid of small
  // shapes; fused_cluster_max_elements / _cols chosen by the same regret score as step 1.
  struct ClusterPoint {
    OpKind op;
    std::int64_t m, n;
    double cluster, other;
  };
  std::vector<ClusterPoint> cluster_points;
  normkit::PlannerTable cluster_everywhere = normkit::default_planner_table(), no_cluster = cluster_everywhere;
  cluster_everywhere.fused_cluster_max_elements = std::numeric_limits<std::int64_t>::max() / 2;
  cluster_everywhere.fused_cluster_max_cols = std::numeric_limits<std::int64_t>::max() / 2;
  no_cluster.fused_cluster_max_elements = 0;
  const std::vector<std::int64_t> cluster_n = {64, 256, 512, 768, 1024, 2048};
  const std::vector<std::int64_t> cluster_m = {16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  if (facts.max_cluster_blocks >= 2) {
    for (bool rms : {false, true}) {
      const OpKind op = rms ? OpKind::RmsBwd : OpKind::LnBwd;
      for (std::int64_t n : cluster_n)
        for (std::int64_t m : cluster_m) {
          std::string why;
          if (cpu_too_big(ctx, m, n, &why)) continue;
          std::fprintf(stderr, "\r[tune] cluster %s M=%lld N=%lld        ", op_kind_name(op), (long long)m, (long long)n);
          std::fflush(stderr);
          auto setup = make_setup(ctx, rms, m, n, dtype, &why);
          if (!setup) continue;
          setup->set_table(&cluster_everywhere);
          try {
            if (setup->plan_with_table(op, Strategy::Fused, cluster_everywhere).cluster_blocks < 2) continue;
          } catch (const normkit::Error&) {
            continue;  // fused cannot serve this row (e.g. unaligned): nothing to compare
          }
          const Timing cluster = timed(*setup, op, Strategy::Fused, "cluster");
          setup->set_table(&no_cluster);
          double other = kNaN;
          for (Strategy st : {Strategy::Tiled, Strategy::TwoPass, Strategy::Fused}) {
            const Timing t = timed(*setup, op, st, "no_cluster");
            if (t.ok && !(t.mean_us >= other)) other = t.mean_us;
          }
          if (cluster.ok && std::isfinite(other)) cluster_points.push_back({op, m, n, cluster.mean_us, other});
        }
    }
  }
  std::fprintf(stderr, "\n");
  // Regret of a rule "cluster when M x N <= elements and N <= cols" (elements = 0: never).
  auto cluster_score = [&](std::int64_t elements, std::int64_t cols) {
    double sum = 0;
    for (const ClusterPoint& p : cluster_points) {
      const double chosen = p.m * p.n <= elements && p.n <= cols ? p.cluster : p.other;
      sum += std::log(chosen / std::min(p.cluster, p.other));
    }
    return cluster_points.empty() ? kNaN : std::exp(sum / double(cluster_points.size()));
  };
  const double cluster_default_score =
      cluster_score(best_table.fused_cluster_max_elements, best_table.fused_cluster_max_cols);
  double cluster_best_score = cluster_default_score;
  if (!cluster_points.empty()) {
    for (std::int64_t elements = 0; elements <= (std::int64_t(1) << 22); elements = elements ? elements * 2 : 4096)
      for (std::int64_t cols : cluster_n) {
        const double sc = cluster_score(elements, cols);
        if (sc < cluster_best_score - 1e-6) {
          cluster_best_score = sc;
          best_table.fused_cluster_max_elements = elements;
          best_table.fused_cluster_max_cols = cols;
        }
      }
  }
  Table cluster_table;
  cluster_table.header = {"op", "M", "N", "cluster (µs)", "best other (µs)", "cluster / other", "tuned rule picks"};
  for (const ClusterPoint& p : cluster_points)
    cluster_table.rows.push_back(
        {op_kind_name(p.op), std::to_string(p.m), std::to_string(p.n), fmt(p.cluster), fmt(p.other),
         fmt(p.cluster / p.other, 3),
         p.m * p.n <= best_table.fused_cluster_max_elements && p.n <= best_table.fused_cluster_max_cols ? "cluster"
                                                                                                         : "other"});

  // 4) Plans taken from a size of x, each cut tuned alone: the forward's lean walks -- RMSNorm's packed walk
  // (rms_forward_packed_min_bytes), LayerNorm's warp rows on the short-row walk
  // (ln_forward_warp_rows_min_bytes) and its rows of 16 vectors a lane there
  // (ln_forward_long_warp_rows_min_bytes) -- and the fused full backward of LayerNorm rows of 512-1536
  // bytes (ln_fused_mid_rows_min_bytes, docs/NOTES.md entry 68). Every vectorised shape of a small grid
  // the plan can serve is timed with it allowed everywhere and with it never taken (the staged or
  // streamed walk; two-pass or tiled), and the byte threshold is chosen by the same regret score as
  // steps 1 and 3.
  struct WalkPoint {
    std::int64_t m, n, bytes;
    double walk, other;
  };
  struct ByteCutTune {
    const char* title;       // the report's heading
    const char* walk_name;   // "packed": the records' labels are walk_name and "not_" walk_name (the plan tuned)
    const char* key_name;    // the table key tuned
    OpKind op;
    std::int64_t normkit::PlannerTable::*min_bytes;
    bool (*takes)(const normkit::Plan&);
    std::vector<std::int64_t> cols;  // N of the grid
    int max_bytes_log;               // x of 256 KiB .. 2^max_bytes_log bytes
    std::vector<WalkPoint> points;
    double default_score = kNaN, tuned_score = kNaN;
    Table table;
  };
  const std::vector<std::int64_t> walk_cols{768, 1024, 2048, 4096, 8192};
  const std::int64_t element_bytes = std::int64_t(normkit::dtype_size(dtype));
  std::vector<std::int64_t> mid_row_cols;  // LayerNorm rows of the mid-row band, 256 bytes apart (512, 768, ..., 1536)
  for (std::int64_t row_bytes = best_table.ln_fused_mid_rows_min_row_bytes; row_bytes <= best_table.ln_fused_mid_rows_max_row_bytes;
       row_bytes += 256)
    mid_row_cols.push_back(row_bytes / element_bytes);
  ByteCutTune walks[] = {
      {"RMSNorm forward, packed walk", "packed", "rms_forward_packed_min_bytes", OpKind::RmsFwd,
       &normkit::PlannerTable::rms_forward_packed_min_bytes, [](const normkit::Plan& p) { return p.row.packed; },
       walk_cols, 28, {}, kNaN, kNaN, {}},
      {"LayerNorm forward, warp rows on the short-row walk", "warp_rows", "ln_forward_warp_rows_min_bytes",
       OpKind::LnFwd, &normkit::PlannerTable::ln_forward_warp_rows_min_bytes,
       [](const normkit::Plan& p) { return p.row.short_rows && p.row.items < normkit::kShortRowMaxItems; }, walk_cols,
       28, {}, kNaN, kNaN, {}},
      // rows of 257 - 512 vectors (16 vectors a lane); its rule sits higher (512 MiB on the H200), so x
      // up to 1 GiB
      {"LayerNorm forward, rows of 16 vectors a lane on the short-row walk", "long_warp_rows",
       "ln_forward_long_warp_rows_min_bytes", OpKind::LnFwd, &normkit::PlannerTable::ln_forward_long_warp_rows_min_bytes,
       [](const normkit::Plan& p) { return p.row.short_rows && p.row.items == normkit::kShortRowMaxItems; },
       {1280, 2048, 2560, 3072, 4096}, 30, {}, kNaN, kNaN, {}},
      // fused with dX below the byte rule's 4 MiB only where the table says (never: two-pass or tiled);
      // x of 256 KiB - 16 MiB, of which fused_min_bytes (1.5 MiB) and up can take it
      {"LayerNorm full backward, fused on rows of 512-1536 bytes", "ln_mid_fused", "ln_fused_mid_rows_min_bytes",
       OpKind::LnBwd, &normkit::PlannerTable::ln_fused_mid_rows_min_bytes,
       [](const normkit::Plan& p) { return p.strategy == Strategy::Fused; }, mid_row_cols, 24, {}, kNaN, kNaN, {}},
  };
  for (ByteCutTune& w : walks) {
    normkit::PlannerTable everywhere = best_table, never = best_table;
    // the forward keys choose among the walks that the one-row-a-block walk (RowShape::block_rows) comes
    // before: it is off in both tables (its own keys are not re-measured here; the backward ignores it)
    everywhere.forward_block_rows_below_bytes = never.forward_block_rows_below_bytes = 0;
    everywhere.*w.min_bytes = 0;
    never.*w.min_bytes = std::numeric_limits<std::int64_t>::max();
    const bool rms = w.op == OpKind::RmsFwd;
    for (std::int64_t n : w.cols) {
      for (int bytes_log = 18; bytes_log <= w.max_bytes_log; ++bytes_log) {  // x of 256 KiB ..
        const std::int64_t m = (std::int64_t(1) << bytes_log) / (n * element_bytes);
        std::string why;
        if (m < 1 || floor_bytes(w.op, m, n, dtype, ctx.weight_dtype(dtype)) > max_cell_bytes || cpu_too_big(ctx, m, n, &why))
          continue;
        std::fprintf(stderr, "\r[tune] %s %s M=%lld N=%lld        ", w.walk_name, op_kind_name(w.op), (long long)m, (long long)n);
        std::fflush(stderr);
        auto setup = make_setup(ctx, rms, m, n, dtype, &why);
        if (!setup) continue;
        if (!w.takes(setup->plan_with_table(w.op, Strategy::Auto, everywhere))) continue;
        setup->set_table(&everywhere);
        const Timing walk = timed(*setup, w.op, Strategy::Auto, w.walk_name);
        setup->set_table(&never);
        const Timing other = timed(*setup, w.op, Strategy::Auto, std::string("not_") + w.walk_name);
        if (walk.ok && other.ok) w.points.push_back({m, n, m * n * element_bytes, walk.mean_us, other.mean_us});
      }
    }
    std::fprintf(stderr, "\n");
    // Regret of "the walk from this many bytes of x" (max: never).
    auto score = [&](std::int64_t min_bytes) {
      double sum = 0;
      for (const WalkPoint& p : w.points) sum += std::log((p.bytes >= min_bytes ? p.walk : p.other) / std::min(p.walk, p.other));
      return w.points.empty() ? kNaN : std::exp(sum / double(w.points.size()));
    };
    w.default_score = score(best_table.*w.min_bytes);
    w.tuned_score = w.default_score;
    if (!w.points.empty()) {
      std::vector<std::int64_t> candidates{std::numeric_limits<std::int64_t>::max()};
      for (const WalkPoint& p : w.points) candidates.push_back(p.bytes);  // each measured size a cut
      for (std::int64_t c : candidates) {
        const double sc = score(c);
        // only a strictly better score moves the key: on a tie the default stays
        if (sc < w.tuned_score - 1e-6) {
          w.tuned_score = sc;
          best_table.*w.min_bytes = c;
        }
      }
    }
    const std::string walk_label = std::string(w.walk_name);
    w.table.header = {"M", "N", "x bytes", walk_label + " (µs)", "not " + walk_label + " (µs)", walk_label + " / not",
                      "tuned rule picks"};
    for (const WalkPoint& p : w.points)
      w.table.rows.push_back({std::to_string(p.m), std::to_string(p.n), fmt_bytes(double(p.bytes)), fmt(p.walk),
                              fmt(p.other), fmt(p.walk / p.other, 3),
                              p.bytes >= best_table.*w.min_bytes ? walk_label : "not " + walk_label});
  }

  // 5) Fused rows beyond a portable cluster: 2-item blocks or the wide layout (CachedSplitTune).
  CachedSplitTune cached_split;
  cached_split.run(ctx, dtype, max_cell_bytes, best_table, timed);

  // 6) The forward's wide split rows: 8 or 4 vectors a thread (ForwardSplitItemsTune).
  ForwardSplitItemsTune split_items;
  split_items.run(ctx, dtype, max_cell_bytes, best_table, timed);

  write_file(path, normkit::format_planner_table(best_table));

  std::ostringstream md;
  md << "# normkit-bench --tune\n\n" << header_lines(ctx, "planner tuning (" + std::string(torch_dtype_name(dtype)) + ")", mode);
  md << "Gamma/beta crossover: " << points.size() << " (op, M, N) points, N in {";
  for (std::size_t i = 0; i < tune_n.size(); ++i) md << (i ? ", " : "") << tune_n[i];
  md << "}, M = 2^0..2^20 (cells above " << fmt_bytes(max_cell_bytes) << " skipped); simple, tiled and two_pass forced.\n";
  md << "Score = geometric mean over points of (time of the strategy the planner would pick with fused disabled) / "
        "(fastest measured).\n\n";
  md << "- default table: simple_max_rows = " << base.simple_max_rows << ", two_pass_min_rows_per_part = "
     << base.two_pass_min_rows_per_part << ", two_pass_min_rows_per_narrow_strip = "
     << base.two_pass_min_rows_per_narrow_strip << ", score " << fmt(default_score, 4) << "\n";
  md << "- tuned table:   simple_max_rows = " << best_table.simple_max_rows << ", two_pass_min_rows_per_part = "
     << best_table.two_pass_min_rows_per_part << ", two_pass_min_rows_per_narrow_strip = "
     << best_table.two_pass_min_rows_per_narrow_strip << ", score " << fmt(best_score, 4) << "\n";
  md << "- fused vs best unfused, geometric mean over " << fused_points << " large shapes: " << fmt(fused_geo, 3)
     << " -> fused_enabled = " << (best_table.fused_enabled ? 1 : 0) << "\n\n";
  md << fused_table.markdown() << "\n";
  if (tuned_parts != base.two_pass_min_rows_per_part)
    md << "Two-pass split (step 1b): two_pass_min_rows_per_part " << tuned_parts << " against the default "
       << base.two_pass_min_rows_per_part << " on the full backward, " << split_points << " shapes, tuned / default "
       << fmt(split_geo, 4) << (split_kept ? ": kept" : ": not kept, step 1 searched again at the default split")
       << "\n\n" << split_table.markdown() << "\n";
  md << "Fused as one thread-block cluster (full backward, small shapes; " << cluster_points.size()
     << " points): against the best of tiled, two-pass and fused with a second launch. Default rule (M x N <= "
     << normkit::default_planner_table().fused_cluster_max_elements << ", N <= "
     << normkit::default_planner_table().fused_cluster_max_cols << ") score " << fmt(cluster_default_score, 4)
     << "; tuned rule (M x N <= " << best_table.fused_cluster_max_elements << ", N <= "
     << best_table.fused_cluster_max_cols << ") score " << fmt(cluster_best_score, 4)
     << (facts.max_cluster_blocks >= 2 ? "" : " (this device has no thread-block clusters: not measured)") << "\n\n";
  md << cluster_table.markdown() << "\n";
  for (const ByteCutTune& w : walks) {
    const std::int64_t tuned = best_table.*w.min_bytes;
    md << w.title << " against the plan it replaces (" << w.points.size() << " shapes, x of 256 KiB - "
       << fmt_bytes(double(std::int64_t(1) << w.max_bytes_log)) << "): default rule (" << w.key_name << ", x >= "
       << fmt_bytes(double(normkit::default_planner_table().*w.min_bytes)) << ") score " << fmt(w.default_score, 4)
       << "; tuned rule (x >= "
       << (tuned == std::numeric_limits<std::int64_t>::max() ? std::string("never") : fmt_bytes(double(tuned)))
       << ") score " << fmt(w.tuned_score, 4) << "\n\n";
    md << w.table.markdown() << "\n";
  }
  md << "Fused rows beyond a portable cluster, 2-item blocks against the wide layout (" << cached_split.points.size()
     << " shapes, full backward): default table (" << CachedSplitTune::keys_of(normkit::default_planner_table())
     << ") score " << fmt(cached_split.default_score, 4) << "; tuned table (" << CachedSplitTune::keys_of(best_table)
     << ") score " << fmt(cached_split.tuned_score, 4)
     << (facts.max_nonportable_cluster_blocks > normkit::kPortableClusterBlocks
             ? ""
             : " (this device launches no cluster above the portable size: not measured)")
     << "\n\n" << cached_split.table.markdown() << "\n";
  md << "Forward rows split over a cluster beyond the portable layout, 8 vectors a thread against 4 ("
     << split_items.points.size() << " shapes): default table ("
     << ForwardSplitItemsTune::keys_of(normkit::default_planner_table()) << ") score " << fmt(split_items.default_score, 4)
     << "; tuned table (" << ForwardSplitItemsTune::keys_of(best_table) << ") score " << fmt(split_items.tuned_score, 4)
     << (facts.max_cluster_blocks >= 2 ? "" : " (this device has no thread-block clusters: not measured)") << "\n\n"
     << split_items.table.markdown() << "\n";
  md << "Wrote " << path << ":\n\n```\n" << normkit::format_planner_table(best_table) << "```\n";
  std::cout << md.str();
  Record meta = meta_record(ctx, "tune");
  meta.push_back({"table_file", path});
  meta.push_back({"default_score", default_score});
  meta.push_back({"tuned_score", best_score});
  meta.push_back({"tuned_simple_max_rows", best_table.simple_max_rows});
  meta.push_back({"tuned_two_pass_min_rows_per_part", best_table.two_pass_min_rows_per_part});
  meta.push_back({"fused_over_unfused_geomean", fused_geo});
  meta.push_back({"split_tuned_over_default_geomean", split_geo});
  meta.push_back({"split_kept", split_kept});
  meta.push_back({"fused_enabled", best_table.fused_enabled});
  meta.push_back({"tuned_fused_cluster_max_elements", best_table.fused_cluster_max_elements});
  meta.push_back({"tuned_fused_cluster_max_cols", best_table.fused_cluster_max_cols});
  meta.push_back({"cluster_default_score", cluster_default_score});
  meta.push_back({"cluster_tuned_score", cluster_best_score});
  std::vector<std::pair<std::string, std::vector<Record>>> tables{
      {"fused_vs_unfused", table_records(fused_table)}, {"cluster_vs_other", table_records(cluster_table)},
      {"two_pass_split", table_records(split_table)}};
  for (const ByteCutTune& w : walks) {
    meta.push_back({std::string("tuned_") + w.key_name, best_table.*w.min_bytes});
    meta.push_back({std::string(w.walk_name) + "_default_score", w.default_score});
    meta.push_back({std::string(w.walk_name) + "_tuned_score", w.tuned_score});
    tables.push_back({w.walk_name + std::string("_vs_other"), table_records(w.table)});
  }
  meta.push_back({"tuned_fused_cached_split_max", best_table.fused_cached_split_max});
  meta.push_back({"tuned_fused_cached_split_min_beyond_portable", best_table.fused_cached_split_min_beyond_portable});
  meta.push_back({"cached_split_default_score", cached_split.default_score});
  meta.push_back({"cached_split_tuned_score", cached_split.tuned_score});
  tables.push_back({"cached_split_vs_wide", table_records(cached_split.table)});
  meta.push_back({"tuned_forward_split_wide_items_min_vectors", best_table.forward_split_wide_items_min_vectors});
  meta.push_back({"tuned_forward_split_wide_items_min_rows", best_table.forward_split_wide_items_min_rows});
  meta.push_back({"forward_split_items_default_score", split_items.default_score});
  meta.push_back({"forward_split_items_tuned_score", split_items.tuned_score});
  tables.push_back({"forward_split_8_vs_4_vectors", table_records(split_items.table)});
  write_outputs(out, meta, records, tables, md.str());
  return 0;
}

// ---------------------------------------------------------------------------------------------

std::vector<DType> parse_dtypes(const Cli& cli, std::vector<DType> fallback) {
  if (!cli.has("dtype")) return fallback;
  std::vector<DType> out;
  for (const auto& s : cli.list("dtype")) out.push_back(parse_dtype(s));
  return out;
}

std::vector<OpKind> parse_ops(const Cli& cli, std::vector<OpKind> fallback) {
  if (!cli.has("op")) return fallback;
  std::vector<OpKind> out;
  for (const auto& s : cli.list("op")) out.push_back(parse_op_kind(s));
  return out;
}

std::vector<Strategy> parse_strategies(const Cli& cli) {
  std::vector<Strategy> out;
  if (!cli.has("strategy") || cli.str("strategy") == "all") {
    out = forced_strategies();
    out.push_back(Strategy::Auto);
    return out;
  }
  for (const auto& s : cli.list("strategy")) out.push_back(normkit::parse_strategy(s));
  return out;
}

int main_impl(int argc, char** argv) {
  Cli cli("normkit-bench");
  cli.option("suite", "seed|llm", "run a suite: the seed's 13 cases, or the LLM shapes");
  cli.flag("sweep", "sweep an (M, N) grid: every strategy forced plus auto");
  cli.option("tune", "FILE", "re-measure the planner's crossovers on this GPU and write a PlannerTable to FILE");
  cli.option("shape", "M,N | MxN,MxN,...", "time one shape, or several written MxN (with --op, --dtype, --strategy)");
  cli.option("op", "LIST", "ln_fwd, ln_bwd, ln_gb, rms_fwd, rms_bwd, rms_gb (comma-separated)");
  cli.option("dtype", "LIST", "f32, f16, bf16 (f64 on the CPU path); comma-separated");
  cli.option("wdtype", "DTYPE", "weight dtype (default: the activation dtype); f32 allowed with f16/bf16");
  cli.option("strategy", "LIST", "auto, simple, tiled, two_pass, fused or all (default all = every forced + auto)");
  cli.option("mode", "events|graph|both", "timing mode (default: both for suites/--shape, graph for --sweep/--tune)");
  cli.option("iters", "N", "timed calls per run (default 100; sweep/tune 20)");
  cli.option("warmup", "N", "untimed calls first (default 20; sweep/tune 3)");
  cli.option("runs", "N", "runs averaged (default 3)");
  cli.option("budget", "SECONDS",
             "per measurement: fewer iterations when the first call predicts more (default 2; sweep/tune 0.5; 0 = off)");
  cli.option("sweep-m", "LIST", "M values of the sweep (integers, 2^k, K/M suffixes)");
  cli.option("sweep-n", "LIST", "N values of the sweep");
  cli.flag("quick", "sweep: the coarse 10 x 9 grid (meant to fit in about 4 minutes for 4 op/dtype pairs on the H200)");
  cli.option("max-cell-bytes", "BYTES", "sweep/tune: skip cells whose byte floor exceeds this (default 2G)");
  cli.option("tune-n", "LIST", "tune: N values of the crossover search (default 256,768,1024,4096,8192)");
  cli.option("json", "FILE", "write all measurements (and tables) as JSON");
  cli.option("csv", "FILE", "write all measurements as CSV");
  cli.option("md", "FILE", "write the markdown tables");
  cli.option("commit", "SHA", "commit to print (default: git rev-parse --short HEAD)");
  cli.option("tie", "FRACTION", "speedups within this fraction count as ~tie (default 0.05)");
  cli.option("rotate-l2-factor", "X", "rotate input sets until their total exceeds X times L2 (default 3)");
  cli.option("max-sets", "N", "at most N rotated buffer sets (default 1024)");
  cli.option("mem-fraction", "X", "at most this fraction of free memory per shape (default 0.6)");
  cli.option("copy-bytes", "BYTES", "bytes of the bandwidth copy (default 1G on CUDA, 256M on the CPU)");
  cli.option("cpu-max-elements", "N", "CPU path: skip shapes with M*N above this (default 4M)");
  cli.flag("help", "this text");
  try {
    cli.parse(argc, argv);
  } catch (const std::invalid_argument& e) {
    std::cerr << "normkit-bench: " << e.what() << "\n\n" << cli.usage();
    return 2;
  }
  if (cli.has("help")) {
    std::cout << cli.usage();
    return 0;
  }
  const int selected = int(cli.has("suite")) + int(cli.has("sweep")) + int(cli.has("tune")) + int(cli.has("shape"));
  if (selected != 1) {
    std::cerr << "normkit-bench: choose exactly one of --suite, --sweep, --tune, --shape\n\n" << cli.usage();
    return 2;
  }

  // A table named by NORMKIT_PLANNER_TABLE is read now: a malformed one would otherwise surface as
  // every measurement "n/a" (each plan throws), with its reason only in the JSON.
  try {
    (void)normkit::default_planner_table();
  } catch (const normkit::Error& e) {
    std::cerr << "normkit-bench: NORMKIT_PLANNER_TABLE: " << e.what() << "\n";
    return 2;
  }

  std::string why_cpu;
  std::unique_ptr<Backend> backend = make_backend(&why_cpu);
  Context ctx;
  ctx.backend = backend.get();
  ctx.why_cpu = why_cpu;
  if (!why_cpu.empty()) std::cerr << "normkit-bench: " << why_cpu << "\n";

  const bool long_mode = cli.has("sweep") || cli.has("tune");
  if (ctx.cpu()) {
    // The float64 reference is orders of magnitude slower: few calls unless asked otherwise.
    ctx.params.warmup = int(cli.integer("warmup", 1));
    ctx.params.iters = int(cli.integer("iters", 3));
    ctx.params.runs = int(cli.integer("runs", 1));
  } else {
    ctx.params.warmup = int(cli.integer("warmup", long_mode ? 3 : 20));
    ctx.params.iters = int(cli.integer("iters", long_mode ? 20 : 100));
    ctx.params.runs = int(cli.integer("runs", 3));
  }
  ctx.params.budget_s = cli.number("budget", long_mode ? 0.5 : 2.0);
  if (ctx.params.iters < 1 || ctx.params.runs < 1 || ctx.params.warmup < 0) {
    std::cerr << "normkit-bench: --iters and --runs must be >= 1, --warmup >= 0\n";
    return 2;
  }
  ctx.rotation.l2_factor = cli.number("rotate-l2-factor", 3.0);
  ctx.rotation.max_sets = int(cli.integer("max-sets", 1024));
  ctx.rotation.memory_fraction = cli.number("mem-fraction", 0.6);
  ctx.tie = cli.number("tie", 0.05);
  ctx.cpu_max_elements = cli.integer("cpu-max-elements", std::int64_t(1) << 22);
  if (cli.has("wdtype")) ctx.wdtype = parse_dtype(cli.str("wdtype"));

  const std::string mode = cli.str("mode", long_mode ? "graph" : "both");
  if (mode == "events") ctx.modes = {TimingMode::Events};
  else if (mode == "graph") ctx.modes = {TimingMode::Graph};
  else if (mode == "both") ctx.modes = {TimingMode::Events, TimingMode::Graph};
  else {
    std::cerr << "normkit-bench: --mode must be events, graph or both\n";
    return 2;
  }
  if (ctx.cpu() && std::find(ctx.modes.begin(), ctx.modes.end(), TimingMode::Graph) != ctx.modes.end()) {
    std::cerr << "normkit-bench: graph mode needs a CUDA device: timing with the host clock only\n";
    ctx.modes = {TimingMode::Events};
  }

  ctx.commit = cli.str("commit");
  if (ctx.commit.empty()) ctx.commit = shell_output("git rev-parse --short HEAD 2>/dev/null");
  if (ctx.commit.empty()) ctx.commit = "unknown (pass --commit)";
  ctx.date = utc_now();

  // Copy bandwidth, same process, before anything else.
  std::size_t copy_bytes = std::size_t(cli.integer("copy-bytes", ctx.cpu() ? (256LL << 20) : (1LL << 30)));
  if (!ctx.cpu()) {
    const std::size_t free_b = ctx.backend->free_memory();
    while (copy_bytes > (64u << 20) && 2 * copy_bytes > free_b / 2) copy_bytes /= 2;
  }
  ctx.copy_bw = ctx.backend->copy_bandwidth(copy_bytes, ctx.cpu() ? 3 : 10, &ctx.copy_bytes);
  std::cerr << "normkit-bench: " << ctx.backend->description() << "; copy bandwidth " << fmt(ctx.copy_bw / 1e12, 3)
            << " TB/s (" << fmt_bytes(double(ctx.copy_bytes)) << " copies, read + write)\n";

  Outputs out{cli.str("json"), cli.str("csv"), cli.str("md")};
  const double max_cell_bytes = double(cli.integer("max-cell-bytes", 2LL << 30));
  int rc = 0;
  if (cli.has("suite")) {
    const std::string suite = cli.str("suite");
    if (suite == "seed") {
      rc = run_seed(ctx, out);
    } else if (suite == "llm") {
      rc = run_shapes(ctx, out, "llm", llm_shapes(), parse_dtypes(cli, {DType::BF16, DType::F16}),
                      parse_ops(cli, all_op_kinds()), parse_strategies(cli));
    } else {
      std::cerr << "normkit-bench: --suite must be seed or llm\n";
      return 2;
    }
  } else if (cli.has("shape")) {
    std::vector<ShapeCase> shapes;
    const std::string spec = cli.str("shape");
    if (spec.find('x') == std::string::npos) {  // "M,N": one shape
      const auto dims = cli.int_list("shape");
      if (dims.size() != 2 || dims[0] < 0 || dims[1] < 1) {
        std::cerr << "normkit-bench: --shape takes M,N or MxN,MxN,... (M >= 0, N >= 1)\n";
        return 2;
      }
      shapes.push_back({std::to_string(dims[0]) + "x" + std::to_string(dims[1]), dims[0], dims[1]});
    } else {
      for (const std::string& item : cli.list("shape")) {
        const auto x = item.find('x');
        const std::int64_t m = x == std::string::npos ? -1 : nkbench::Cli::parse_int(item.substr(0, x), "shape");
        const std::int64_t n = x == std::string::npos ? 0 : nkbench::Cli::parse_int(item.substr(x + 1), "shape");
        if (m < 0 || n < 1) {
          std::cerr << "normkit-bench: --shape: '" << item << "' is not MxN (M >= 0, N >= 1)\n";
          return 2;
        }
        shapes.push_back({std::to_string(m) + "x" + std::to_string(n), m, n});
      }
    }
    rc = run_shapes(ctx, out, "shape", shapes, parse_dtypes(cli, {DType::BF16}), parse_ops(cli, {OpKind::LnGb}),
                    parse_strategies(cli));
  } else if (cli.has("sweep")) {
    std::vector<std::int64_t> ms, ns;
    if (cli.has("quick")) {
      ms = {1, 7, 64, 255, 1024, 4097, 16384, 65535, 262144, 1048576};
      ns = {1, 64, 255, 768, 1024, 4097, 16384, 65536, 262144};
    } else {
      ms = pow2_grid(20);
      ns = pow2_grid(18);
    }
    if (cli.has("sweep-m")) ms = cli.int_list("sweep-m");
    if (cli.has("sweep-n")) ns = cli.int_list("sweep-n");
    rc = run_sweep(ctx, out, ms, ns, parse_dtypes(cli, {DType::BF16, DType::F16}),
                   parse_ops(cli, {OpKind::LnGb, OpKind::RmsGb}), parse_strategies(cli), max_cell_bytes);
  } else {
    std::vector<std::int64_t> tune_n = cli.has("tune-n") ? cli.int_list("tune-n")
                                                         : std::vector<std::int64_t>{256, 768, 1024, 4096, 8192};
    rc = run_tune(ctx, out, cli.str("tune"), parse_dtypes(cli, {DType::BF16}).front(), tune_n, max_cell_bytes);
  }
  if (ctx.errors > 0) {
    std::cerr << "normkit-bench: " << ctx.errors << " measurement(s) failed (see above)\n";
    return rc ? rc : 1;
  }
  return rc;
}

}  // namespace
}  // namespace nkbench

int main(int argc, char** argv) {
  try {
    return nkbench::main_impl(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "normkit-bench: " << e.what() << "\n";
    return 1;
  }
}
