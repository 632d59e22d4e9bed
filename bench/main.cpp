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

#include "app.h"
#include "cli.h"

namespace nkbench {
namespace {

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

/// A case's strategies of `op` timed side by side (measure_strategies): each failure noted, named by the case, op
/// and strategy, and each timing recorded under `suite` / `name`. The timings by strategy.
std::map<Strategy, Timing> measure_case(Context& ctx, Setup& setup, const std::string& suite, const std::string& name,
                                        OpKind op, const std::vector<Strategy>& strategies, TimingMode mode,
                                        std::vector<Record>& records) {
  const std::vector<Timing> timings = measure_strategies(*ctx.backend, setup, op, strategies, mode, ctx.params);
  std::map<Strategy, Timing> by_strategy;
  for (std::size_t k = 0; k < strategies.size(); ++k) {
    const Strategy st = strategies[k];
    note_failure(ctx, name + " " + op_kind_name(op) + " " + normkit::strategy_name(st), timings[k]);
    records.push_back(timing_record(ctx, suite, name, setup, op, st, mode, timings[k]));
    by_strategy[st] = timings[k];
  }
  return by_strategy;
}

int run_seed(Context& ctx, const Outputs& out) {
  normkit::PlannerTable no_fused = normkit::default_planner_table(ctx.backend->planner_facts());
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
      std::vector<Strategy> strategies = {Strategy::Tiled, Strategy::TwoPass, Strategy::Fused, Strategy::Auto};
      if (std::find(strategies.begin(), strategies.end(), mixed) == strategies.end()) strategies.push_back(mixed);
      std::map<Strategy, Timing> t = measure_case(ctx, *setup, "seed", c.name, gb, strategies, mode, records);
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
      std::map<Strategy, Timing> f = measure_case(
          ctx, *setup, "seed", c.name, full, {Strategy::Auto, Strategy::Fused, Strategy::Tiled, Strategy::TwoPass}, mode,
          records);
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
// Generic per-(op, shape, dtype) table: the llm suite (app.h's llm_shapes) and a single --shape.

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
            std::map<Strategy, Timing> t =
                measure_case(ctx, *setup, suite, sc.name, op, strategies_for(op, strategies), mode, records);
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
        const auto op_strategies = strategies_for(op, strategies);
        const std::vector<Timing> timings = measure_strategies(*ctx.backend, *setup, op, op_strategies, mode, ctx.params);
        for (std::size_t k = 0; k < op_strategies.size(); ++k) {
          const Strategy st = op_strategies[k];
          const Timing& t = timings[k];
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

  // Summary: per (op, dtype, mode) how often auto is within the tie band of the best forced strategy,
  // and how far apart auto and a forced strategy that ran auto's very plan were timed: the same
  // kernels measured twice, so that spread is the measurement's own, not the planner's.
  struct Timed {
    double us;
    std::string plan;
  };
  std::map<std::string, std::map<std::string, Timed>> best_forced, auto_time;  // key -> cell -> time
  std::map<std::string, std::map<std::string, std::vector<Timed>>> forced;     // key -> cell -> every forced one
  for (const Record& r : records) {
    std::map<std::string, const Value*> f;
    for (const auto& kv : r) f[kv.first] = &kv.second;
    if (!f["ok"]->b) continue;
    const std::string key = f["op"]->s + " " + f["dtype"]->s + " " + f["mode"]->s;
    const std::string cellname = std::to_string(f["M"]->i) + "x" + std::to_string(f["N"]->i);
    const Timed t{f["time_us"]->d, f["plan"]->s};
    if (f["strategy"]->s == "auto") {
      auto_time[key][cellname] = t;
    } else {
      forced[key][cellname].push_back(t);
      auto& b = best_forced[key][cellname];
      if (b.us == 0 || t.us < b.us) b = t;
    }
  }
  Table summary;
  summary.header = {"op dtype mode", "cells", "auto within " + fmt(100 * ctx.tie, 0) + "% of best forced", "worst auto/best",
                    "worst cell", "cells with auto's plan forced", "their auto / forced (min-max)"};
  for (const auto& [key, cellmap] : auto_time) {
    int cells = 0, within = 0, same_plan = 0;
    double worst = 0, same_lo = 0, same_hi = 0;
    std::string worst_cell;
    for (const auto& [cellname, at] : cellmap) {
      const auto it = best_forced[key].find(cellname);
      if (it == best_forced[key].end()) continue;
      const double ratio = at.us / it->second.us;
      ++cells;
      if (ratio <= 1.0 + ctx.tie) ++within;
      if (ratio > worst) {
        worst = ratio;
        worst_cell = cellname;
      }
      for (const Timed& f : forced[key][cellname]) {
        if (f.plan != at.plan) continue;
        const double same = at.us / f.us;
        same_lo = same_plan ? std::min(same_lo, same) : same;
        same_hi = same_plan ? std::max(same_hi, same) : same;
        ++same_plan;
        break;  // one forced strategy per cell
      }
    }
    summary.rows.push_back({key, std::to_string(cells), std::to_string(within), fmt(worst, 3), worst_cell,
                            std::to_string(same_plan), same_plan ? fmt(same_lo, 3) + "-" + fmt(same_hi, 3) : "-"});
  }
  std::string md = "# normkit-bench --sweep\n\n" + header_lines(ctx, "sweep", ctx.modes.back()) + summary.markdown();
  std::cout << md;
  write_outputs(out, meta_record(ctx, "sweep"), records, {{"summary", table_records(summary)}}, md);
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The command line

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
  cli.flag("sequential",
           "measure a cell's strategies one after another instead of taking turns run by run (how results before "
           "NOTES entry 96 were measured)");
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
  ctx.params.interleave = !cli.has("sequential");
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
            << " TB/s (" << fmt_bytes(double(ctx.copy_bytes)) << " copies, read + write); planner table "
            << planner_table_note(ctx.backend->planner_facts()) << "\n";

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
