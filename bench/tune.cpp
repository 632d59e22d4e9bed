// normkit-bench --tune FILE: re-measures the planner's crossovers on the GPU at hand and writes a
// PlannerTable that NORMKIT_PLANNER_TABLE (or ExecConfig::table) loads. The steps, in order, are described in
// bench/README.md ("--tune"); each scores candidate tables by asking normkit::plan() what it would pick at
// every measured point (geometric-mean regret against the fastest measured), and moves a key only when a
// candidate scores strictly better.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "app.h"

namespace nkbench {
namespace {

/// The regret score of the tune's steps 3-6: a rule picks one of two timed ways at each point
/// (`takes_first(p)`: the `first` member's time, else the `second`'s); the score is the geometric mean,
/// over the points, of the picked time over the faster of the two (1: the rule always picks the faster;
/// NaN without points).
template <typename Points, typename TakesFirst, typename Point = typename Points::value_type>
double pair_regret(const Points& points, TakesFirst&& takes_first, double Point::*first, double Point::*second) {
  double sum = 0;
  for (const Point& p : points) sum += std::log((takes_first(p) ? p.*first : p.*second) / std::min(p.*first, p.*second));
  return points.empty() ? kNaN : std::exp(sum / double(points.size()));
}

/// Whether a candidate's regret `score` moves the keys away from those scoring `best`: only a strictly
/// better score does (beyond rounding), so on a tie the default stays.
bool strictly_better(double score, double best) { return score < best - 1e-6; }

/// Of `candidates`, the table `score` rates lowest, where strictly better than `current` (whose score,
/// `current_score`, becomes the kept table's).
template <typename Score>
normkit::PlannerTable best_table_of(const std::vector<normkit::PlannerTable>& candidates, normkit::PlannerTable current,
                                    double& current_score, Score&& score) {
  for (const normkit::PlannerTable& candidate : candidates) {
    const double sc = score(candidate);
    if (strictly_better(sc, current_score)) {
      current_score = sc;
      current = candidate;
    }
  }
  return current;
}

/// One point of a two-way step: `op` under table `first` and under `second`, timed side by side by `timed`
/// (measure_variants; each noted and recorded under its label).
template <typename Timed>
std::pair<Timing, Timing> timed_under_tables(Setup& setup, OpKind op, Strategy strategy, const normkit::PlannerTable& first,
                                             const std::string& first_label, const normkit::PlannerTable& second,
                                             const std::string& second_label, Timed&& timed) {
  std::vector<Timing> t = timed(setup, op, {Variant{strategy, &first}, Variant{strategy, &second}}, {first_label, second_label});
  return {std::move(t[0]), std::move(t[1])};
}

/// Whether the tune measures an M x N cell of `op`: its byte floor within --max-cell-bytes and, on the CPU
/// path, its elements within --cpu-max-elements.
bool cell_measured(const Context& ctx, OpKind op, std::int64_t m, std::int64_t n, DType dtype, DType weight,
                   double max_cell_bytes) {
  std::string why;
  return m >= 1 && floor_bytes(op, m, n, dtype, weight) <= max_cell_bytes && !cpu_too_big(ctx, m, n, &why);
}

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
    return pair_regret(points, [&](const Point& p) { return takes_cached(p.problem, facts, table); }, &Point::cached,
                       &Point::wide);
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
            if (cell_measured(ctx, op, rows, n, dtype, w, max_cell_bytes)) {
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
          const auto [cached, wide] =
              timed_under_tables(*setup, op, Strategy::Fused, cached_all, "cached_split", wide_all, "wide_split", timed);
          if (cached.ok && wide.ok) points.push_back({op, problem, blocks, cached.mean_us, wide.mean_us});
        }
      }
    }
    std::fprintf(stderr, "\n");
    default_score = tuned_score = score(facts, best_table);
    std::vector<normkit::PlannerTable> candidates;
    for (int cut = normkit::kPortableClusterBlocks + 1; cut <= kNever && !points.empty(); ++cut)
      candidates.push_back(with_cut(best_table, cut));
    best_table = best_table_of(candidates, best_table, tuned_score,
                               [&](const normkit::PlannerTable& t) { return score(facts, t); });
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
    return pair_regret(points, [&](const Point& p) { return takes_more(p.problem, facts, table); }, &Point::more,
                       &Point::fewer);
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
          for (std::int64_t m : {32, 128, 512, 2048})
            if (cell_measured(ctx, op, m, n, dtype, w, max_cell_bytes)) ms.push_back(m);
          if (ms.empty() && cell_measured(ctx, op, 1, n, dtype, w, max_cell_bytes)) ms.push_back(1);
          std::string why;
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
            const auto [more, fewer] = timed_under_tables(*setup, op, Strategy::Auto, more_all, "split_8_vectors", fewer_all,
                                                          "split_4_vectors", timed);
            if (more.ok && fewer.ok) points.push_back({op, problem, vectors, more.mean_us, fewer.mean_us});
          }
        }
      }
    }
    std::fprintf(stderr, "\n");
    default_score = tuned_score = score(facts, best_table);
    std::vector<std::int64_t> vector_cuts{kNever}, row_cuts{1};
    for (const Point& p : points) {
      vector_cuts.push_back(p.vectors);
      row_cuts.push_back(p.problem.rows);
    }
    std::vector<normkit::PlannerTable> candidates;
    for (std::int64_t v : vector_cuts)
      for (std::int64_t r : row_cuts) candidates.push_back(with_keys(best_table, v, r));
    best_table = best_table_of(candidates, best_table, tuned_score,
                               [&](const normkit::PlannerTable& t) { return score(facts, t); });
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

/// Step 7 of --tune: the fused backward on short vectorised rows (at most short_row_max_vectors 16-byte
/// vectors: 64 16-bit / 32 fp32 columns) from a row count (PlannerTable::fused_short_row_min_rows). Rows of
/// 2, 4 and 8 vectors at M = 4096 ... 262144 within `--max-cell-bytes`, gamma/beta alone and the full
/// backward, LayerNorm and RMSNorm, each timed under a table that fuses them from one row and one that
/// never does by rows (auto's unfused plan; with dX the byte rule, fused_short_row_dx_min_bytes, fuses many
/// under both, and those are no point). The cut (fused from this many rows; never) by the regret score of
/// steps 3-6. Why a step: the H200 measured fused and two-pass even at 16384 x 64 (the built-in cut), while
/// an H100 under its tuned table kept fused there at 1.04-1.06x two-pass's time (docs/NOTES.md entry 93).
struct ShortRowFusedTune {
  struct Point {
    OpKind op;
    normkit::Problem problem;  // the backward timed (M, N, mask)
    double fused, unfused;
  };
  static constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();
  std::vector<Point> points;
  double default_score = kNaN, tuned_score = kNaN;
  Table table;

  static normkit::PlannerTable with_cut(normkit::PlannerTable t, std::int64_t cut) {
    t.fused_short_row_min_rows = cut;
    return t;
  }
  /// Whether `table` fuses `p`: the planner's answer.
  static bool takes_fused(const normkit::Problem& p, const normkit::DeviceFacts& facts, const normkit::PlannerTable& table) {
    return normkit::plan(p, facts, Strategy::Auto, table).strategy == Strategy::Fused;
  }
  double score(const normkit::DeviceFacts& facts, const normkit::PlannerTable& table) const {
    return pair_regret(points, [&](const Point& p) { return takes_fused(p.problem, facts, table); }, &Point::fused,
                       &Point::unfused);
  }

  template <typename Timed>
  void run(Context& ctx, DType dtype, double max_cell_bytes, normkit::PlannerTable& best_table, Timed&& timed) {
    const normkit::DeviceFacts facts = ctx.backend->planner_facts();
    const normkit::PlannerTable fused_all = with_cut(best_table, 1);
    const normkit::PlannerTable unfused_all = with_cut(best_table, kNever);
    const std::int64_t vec = 16 / std::int64_t(normkit::dtype_size(dtype));
    for (bool rms : {false, true}) {
      for (OpKind op : rms ? std::vector<OpKind>{OpKind::RmsGb, OpKind::RmsBwd}
                           : std::vector<OpKind>{OpKind::LnGb, OpKind::LnBwd}) {
        for (std::int64_t vectors : {2, 4, 8}) {
          if (vectors > best_table.short_row_max_vectors) continue;
          const std::int64_t n = vectors * vec;
          for (std::int64_t m = 4096; m <= 262144; m *= 2) {
            if (!cell_measured(ctx, op, m, n, dtype, ctx.weight_dtype(dtype), max_cell_bytes)) continue;
            std::fprintf(stderr, "\r[tune] short rows fused %s M=%lld N=%lld        ", op_kind_name(op), (long long)m,
                         (long long)n);
            std::fflush(stderr);
            std::string why;
            auto setup = make_setup(ctx, rms, m, n, dtype, &why);
            if (!setup) continue;
            const normkit::Problem problem = setup->problem(op);
            if (!takes_fused(problem, facts, fused_all) || takes_fused(problem, facts, unfused_all))
              continue;  // the row count does not decide this point
            const auto [fused, unfused] = timed_under_tables(*setup, op, Strategy::Auto, fused_all, "short_rows_fused",
                                                             unfused_all, "short_rows_unfused", timed);
            if (fused.ok && unfused.ok) points.push_back({op, problem, fused.mean_us, unfused.mean_us});
          }
        }
      }
    }
    std::fprintf(stderr, "\n");
    default_score = tuned_score = score(facts, best_table);
    std::vector<normkit::PlannerTable> candidates{with_cut(best_table, kNever)};
    for (const Point& p : points) candidates.push_back(with_cut(best_table, p.problem.rows));
    best_table = best_table_of(candidates, best_table, tuned_score,
                               [&](const normkit::PlannerTable& t) { return score(facts, t); });
    table.header = {"op", "M", "N", "fused (µs)", "unfused (µs)", "fused / unfused", "tuned table picks"};
    for (const Point& p : points)
      table.rows.push_back({op_kind_name(p.op), std::to_string(p.problem.rows), std::to_string(p.problem.cols),
                            fmt(p.fused), fmt(p.unfused), fmt(p.fused / p.unfused, 3),
                            takes_fused(p.problem, facts, best_table) ? "fused" : "unfused"});
  }
  static std::string keys_of(const normkit::PlannerTable& t) {
    return "fused_short_row_min_rows = " +
           (t.fused_short_row_min_rows == kNever ? std::string("never") : std::to_string(t.fused_short_row_min_rows));
  }
};

}  // namespace

int run_tune(Context& ctx, const Outputs& out, const std::string& path, DType dtype,
             const std::vector<std::int64_t>& tune_n, double max_cell_bytes) {
  const TimingMode mode = ctx.modes.back();  // graph when available
  const normkit::DeviceFacts facts = ctx.backend->planner_facts();
  // The table the tune starts from and reports against: this device's (its built-in one, or
  // NORMKIT_PLANNER_TABLE's file).
  const normkit::PlannerTable& defaults = normkit::default_planner_table(facts);
  std::vector<Record> records;
  // Measurements of the tune, timed side by side (measure_variants): each failure noted, each recorded
  // under its label.
  auto timed = [&](Setup& setup, OpKind op, const std::vector<Variant>& variants, const std::vector<std::string>& labels) {
    std::vector<Timing> t = measure_variants(*ctx.backend, setup, op, variants, mode, ctx.params);
    for (std::size_t k = 0; k < t.size(); ++k) {
      note_failure(ctx, "tune", t[k]);
      records.push_back(timing_record(ctx, "tune", labels[k], setup, op, variants[k].strategy, mode, t[k]));
    }
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
        if (!cell_measured(ctx, op, m, n, dtype, ctx.weight_dtype(dtype), max_cell_bytes)) continue;
        std::string why;
        std::fprintf(stderr, "\r[tune] gamma/beta %s M=%lld N=%lld        ", op_kind_name(op), (long long)m, (long long)n);
        std::fflush(stderr);
        auto setup = make_setup(ctx, rms, m, n, dtype, &why);
        if (!setup) continue;
        Point p{op, m, n, {}};
        const std::vector<Variant> crossover = {{Strategy::Simple}, {Strategy::Tiled}, {Strategy::TwoPass}};
        const std::vector<Timing> t = timed(*setup, op, crossover, {"crossover", "crossover", "crossover"});
        for (std::size_t k = 0; k < t.size(); ++k)
          if (t[k].ok) p.t[crossover[k].strategy] = t[k].mean_us;
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

  normkit::PlannerTable base = defaults;
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
          if (miss == 0 && std::isfinite(sc) && strictly_better(sc, best_score)) {
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
          if (!cell_measured(ctx, op, m, n, dtype, ctx.weight_dtype(dtype), max_cell_bytes)) continue;
          std::string why;
          auto setup = make_setup(ctx, rms, m, n, dtype, &why);
          if (!setup) continue;
          if (setup->plan_with_table(op, Strategy::TwoPass, base).describe() ==
              setup->plan_with_table(op, Strategy::TwoPass, best_table).describe())
            continue;
          std::fprintf(stderr, "\r[tune] two-pass split %s M=%lld N=%lld        ", op_kind_name(op), (long long)m, (long long)n);
          std::fflush(stderr);
          const auto [with_default, with_tuned] = timed_under_tables(*setup, op, Strategy::TwoPass, base, "default_split",
                                                                     best_table, "tuned_split", timed);
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
        try {
          (void)setup->plan(op, Strategy::Fused);
        } catch (const normkit::Error&) {
          continue;  // fused cannot serve this row width
        }
        const std::vector<Timing> t =
            timed(*setup, op, {{Strategy::Fused}, {Strategy::Tiled}, {Strategy::TwoPass}}, {sc.name, sc.name, sc.name});
        const Timing& fused = t[0];
        if (!fused.ok) continue;
        double unfused = kNaN;
        for (std::size_t k = 1; k < t.size(); ++k)
          if (t[k].ok && !(t[k].mean_us >= unfused)) unfused = t[k].mean_us;
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
      fused_points ? fused_geo < 1.0 : defaults.fused_enabled;

  // 3) The fused backward as one thread-block cluster (small full backwards, one launch) against the
  // best other plan -- tiled, two-pass, or fused reducing in a second launch -- on a grid of small
  // shapes; fused_cluster_max_elements / _cols chosen by the same regret score as step 1.
  struct ClusterPoint {
    OpKind op;
    std::int64_t m, n;
    double cluster, other;
  };
  std::vector<ClusterPoint> cluster_points;
  normkit::PlannerTable cluster_everywhere = defaults, no_cluster = cluster_everywhere;
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
          try {
            if (setup->plan_with_table(op, Strategy::Fused, cluster_everywhere).cluster_blocks < 2) continue;
          } catch (const normkit::Error&) {
            continue;  // fused cannot serve this row (e.g. unaligned): nothing to compare
          }
          const std::vector<Timing> t = timed(*setup, op,
                                              {{Strategy::Fused, &cluster_everywhere},
                                               {Strategy::Tiled, &no_cluster},
                                               {Strategy::TwoPass, &no_cluster},
                                               {Strategy::Fused, &no_cluster}},
                                              {"cluster", "no_cluster", "no_cluster", "no_cluster"});
          const Timing& cluster = t[0];
          double other = kNaN;
          for (std::size_t k = 1; k < t.size(); ++k)
            if (t[k].ok && !(t[k].mean_us >= other)) other = t[k].mean_us;
          if (cluster.ok && std::isfinite(other)) cluster_points.push_back({op, m, n, cluster.mean_us, other});
        }
    }
  }
  std::fprintf(stderr, "\n");
  // Regret of a rule "cluster when M x N <= elements and N <= cols" (elements = 0: never).
  auto cluster_score = [&](std::int64_t elements, std::int64_t cols) {
    return pair_regret(cluster_points, [&](const ClusterPoint& p) { return p.m * p.n <= elements && p.n <= cols; },
                       &ClusterPoint::cluster, &ClusterPoint::other);
  };
  const double cluster_default_score =
      cluster_score(best_table.fused_cluster_max_elements, best_table.fused_cluster_max_cols);
  double cluster_best_score = cluster_default_score;
  if (!cluster_points.empty()) {
    for (std::int64_t elements = 0; elements <= (std::int64_t(1) << 22); elements = elements ? elements * 2 : 4096)
      for (std::int64_t cols : cluster_n) {
        const double sc = cluster_score(elements, cols);
        if (strictly_better(sc, cluster_best_score)) {
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
        if (!cell_measured(ctx, w.op, m, n, dtype, ctx.weight_dtype(dtype), max_cell_bytes)) continue;
        std::string why;
        std::fprintf(stderr, "\r[tune] %s %s M=%lld N=%lld        ", w.walk_name, op_kind_name(w.op), (long long)m, (long long)n);
        std::fflush(stderr);
        auto setup = make_setup(ctx, rms, m, n, dtype, &why);
        if (!setup) continue;
        if (!w.takes(setup->plan_with_table(w.op, Strategy::Auto, everywhere))) continue;
        const auto [walk, other] = timed_under_tables(*setup, w.op, Strategy::Auto, everywhere, w.walk_name, never,
                                                      std::string("not_") + w.walk_name, timed);
        if (walk.ok && other.ok) w.points.push_back({m, n, m * n * element_bytes, walk.mean_us, other.mean_us});
      }
    }
    std::fprintf(stderr, "\n");
    // Regret of "the walk from this many bytes of x" (max: never).
    auto score = [&](std::int64_t min_bytes) {
      return pair_regret(w.points, [&](const WalkPoint& p) { return p.bytes >= min_bytes; }, &WalkPoint::walk,
                         &WalkPoint::other);
    };
    w.default_score = score(best_table.*w.min_bytes);
    w.tuned_score = w.default_score;
    if (!w.points.empty()) {
      std::vector<std::int64_t> candidates{std::numeric_limits<std::int64_t>::max()};
      for (const WalkPoint& p : w.points) candidates.push_back(p.bytes);  // each measured size a cut
      for (std::int64_t c : candidates) {
        const double sc = score(c);
        if (strictly_better(sc, w.tuned_score)) {
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

  // 7) The fused backward on short rows from a row count (ShortRowFusedTune).
  ShortRowFusedTune short_rows;
  short_rows.run(ctx, dtype, max_cell_bytes, best_table, timed);

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
     << defaults.fused_cluster_max_elements << ", N <= "
     << defaults.fused_cluster_max_cols << ") score " << fmt(cluster_default_score, 4)
     << "; tuned rule (M x N <= " << best_table.fused_cluster_max_elements << ", N <= "
     << best_table.fused_cluster_max_cols << ") score " << fmt(cluster_best_score, 4)
     << (facts.max_cluster_blocks >= 2 ? "" : " (this device has no thread-block clusters: not measured)") << "\n\n";
  md << cluster_table.markdown() << "\n";
  for (const ByteCutTune& w : walks) {
    const std::int64_t tuned = best_table.*w.min_bytes;
    md << w.title << " against the plan it replaces (" << w.points.size() << " shapes, x of 256 KiB - "
       << fmt_bytes(double(std::int64_t(1) << w.max_bytes_log)) << "): default rule (" << w.key_name << ", x >= "
       << fmt_bytes(double(defaults.*w.min_bytes)) << ") score " << fmt(w.default_score, 4)
       << "; tuned rule (x >= "
       << (tuned == std::numeric_limits<std::int64_t>::max() ? std::string("never") : fmt_bytes(double(tuned)))
       << ") score " << fmt(w.tuned_score, 4) << "\n\n";
    md << w.table.markdown() << "\n";
  }
  md << "Fused rows beyond a portable cluster, 2-item blocks against the wide layout (" << cached_split.points.size()
     << " shapes, full backward): default table (" << CachedSplitTune::keys_of(defaults)
     << ") score " << fmt(cached_split.default_score, 4) << "; tuned table (" << CachedSplitTune::keys_of(best_table)
     << ") score " << fmt(cached_split.tuned_score, 4)
     << (facts.max_nonportable_cluster_blocks > normkit::kPortableClusterBlocks
             ? ""
             : " (this device launches no cluster above the portable size: not measured)")
     << "\n\n" << cached_split.table.markdown() << "\n";
  md << "Forward rows split over a cluster beyond the portable layout, 8 vectors a thread against 4 ("
     << split_items.points.size() << " shapes): default table ("
     << ForwardSplitItemsTune::keys_of(defaults) << ") score " << fmt(split_items.default_score, 4)
     << "; tuned table (" << ForwardSplitItemsTune::keys_of(best_table) << ") score " << fmt(split_items.tuned_score, 4)
     << (facts.max_cluster_blocks >= 2 ? "" : " (this device has no thread-block clusters: not measured)") << "\n\n"
     << split_items.table.markdown() << "\n";
  md << "Short rows, fused from a row count against the unfused plan (" << short_rows.points.size()
     << " shapes, gamma/beta alone and full backward): default table ("
     << ShortRowFusedTune::keys_of(defaults) << ") score " << fmt(short_rows.default_score, 4)
     << "; tuned table (" << ShortRowFusedTune::keys_of(best_table) << ") score " << fmt(short_rows.tuned_score, 4)
     << "\n\n" << short_rows.table.markdown() << "\n";
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
  meta.push_back({"tuned_fused_short_row_min_rows", best_table.fused_short_row_min_rows});
  meta.push_back({"short_rows_fused_default_score", short_rows.default_score});
  meta.push_back({"short_rows_fused_tuned_score", short_rows.tuned_score});
  tables.push_back({"short_rows_fused_vs_unfused", table_records(short_rows.table)});
  write_outputs(out, meta, records, tables, md.str());
  return 0;
}

}  // namespace nkbench
