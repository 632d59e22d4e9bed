// The planner, on the CPU: the seed's bands and cases, every boundary, the mixed (auto) choice,
// workspace sizing from N, row layouts, forced-strategy errors and the tunable table format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "normkit/normkit.h"
#include "normkit/plan.h"

namespace normkit {
namespace {

Problem backward(std::int64_t m, std::int64_t n, DType t = DType::F16, Mask mask = {false, true, true},
                 bool rms = false) {
  Problem p;
  p.op = rms ? Op::RmsNormBackward : Op::LayerNormBackward;
  p.rows = m;
  p.cols = n;
  p.dtype = t;
  p.weight_dtype = t;
  p.mask = mask;
  p.rows_vector_aligned = (n * std::int64_t(dtype_size(t))) % 16 == 0;
  return p;
}

Problem forward(std::int64_t m, std::int64_t n, bool rms, DType t = DType::BF16) {
  Problem p = backward(m, n, t);
  p.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
  return p;
}

/// `t` with the forward's one-row-a-block walk off (RowShape::block_rows), for the tests of the walks
/// it comes before.
PlannerTable without_block_rows(PlannerTable t = PlannerTable{}) {
  t.forward_block_rows_below_bytes = 0;
  t.ln_forward_block_rows_wide_below_bytes = 0;
  return t;
}

/// ... and the forward's wide split blocks at kSplitItems vectors a thread wherever those hold the row
/// (forward_split_wide_items_min_vectors off).
PlannerTable four_vector_wide_split() {
  PlannerTable t = without_block_rows();
  t.forward_split_wide_items_min_vectors = std::int64_t(1) << 62;
  return t;
}

PlannerTable unfused_table() {
  PlannerTable t;
  t.fused_enabled = false;
  return t;
}

/// `t` with tall vectorised strips off (PlannerTable::tiled_tall_max_strips), for the tests of the rules
/// they come before.
PlannerTable without_tall_strips(PlannerTable t = PlannerTable{}) {
  t.tiled_tall_max_strips = 0;
  t.tiled_tall_strip_lanes = 0;
  return t;
}

struct SeedCase {
  const char* name;
  bool rms;
  std::int64_t m, n;
  DType dtype;
  TileBand tiled_band;       // the band the seed's name gives, with the strategy restricted to tiled
  Strategy mixed;            // our tiled + two-pass choice (fused disabled), documented in docs/NOTES.md
};

// The seed's 13 cases ((32, 4096, 4096) is M = 131072, N = 4096; (8, 1024, 768) is M = 8192, N = 768).
const SeedCase kSeedCases[] = {
    {"tile8_small", false, 32, 512, DType::F16, TileBand::Tile8, Strategy::Tiled},
    {"tile64_medium", false, 96, 768, DType::F16, TileBand::Tile64, Strategy::Tiled},
    {"tile128_medium", false, 192, 1024, DType::BF16, TileBand::Tile128, Strategy::Tiled},
    {"tile256_large", false, 4096, 1024, DType::F16, TileBand::Tile256, Strategy::TwoPass},
    {"tile256_bert", false, 1024, 768, DType::F16, TileBand::Tile256, Strategy::TwoPass},
    {"tile256_large_bf16", false, 4096, 1024, DType::BF16, TileBand::Tile256, Strategy::TwoPass},
    {"tile256_large_fp32", false, 4096, 1024, DType::F32, TileBand::Tile256, Strategy::TwoPass},
    {"two_pass_huge_M", false, 131072, 64, DType::F16, TileBand::Tile256, Strategy::TwoPass},
    {"llm_hidden_4096", false, 131072, 4096, DType::BF16, TileBand::Tile256, Strategy::TwoPass},
    {"gpt2_style", false, 8192, 768, DType::F16, TileBand::Tile256, Strategy::TwoPass},
    {"rms_tile256", true, 4096, 1024, DType::F16, TileBand::Tile256, Strategy::TwoPass},
    {"rms_llm", true, 131072, 4096, DType::BF16, TileBand::Tile256, Strategy::TwoPass},
    {"rms_two_pass", true, 131072, 64, DType::F16, TileBand::Tile256, Strategy::TwoPass},
};

TEST(Planner, SeedCasesRestrictedToTiledMapToTheirBand) {
  for (const SeedCase& c : kSeedCases) {
    const Plan plan = normkit::plan(backward(c.m, c.n, c.dtype, {false, true, !c.rms}, c.rms), DeviceFacts::h200(),
                                    Strategy::Tiled);
    EXPECT_EQ(plan.strategy, Strategy::Tiled) << c.name;
    EXPECT_EQ(plan.columns.band, c.tiled_band) << c.name;
  }
}

TEST(Planner, SeedCasesMixedChoiceIsDocumented) {
  const PlannerTable table = without_tall_strips(unfused_table());  // (tall strips take tile256_bert)
  for (const SeedCase& c : kSeedCases) {
    const Plan plan = normkit::plan(backward(c.m, c.n, c.dtype, {false, true, !c.rms}, c.rms), DeviceFacts::h200(),
                                    Strategy::Auto, table);
    EXPECT_EQ(plan.strategy, c.mixed) << c.name << ": " << plan.describe();
  }
}

TEST(Planner, AutoPicksFusedFromItsSizeThresholdOn) {
  const PlannerTable t = without_tall_strips(default_planner_table());  // tall strips come before fused
  const PlannerTable unfused = without_tall_strips(unfused_table());
  for (const SeedCase& c : kSeedCases) {
    const Problem p = backward(c.m, c.n, c.dtype, {true, true, !c.rms}, c.rms);
    const Plan plan = normkit::plan(p, DeviceFacts::h200(), Strategy::Auto, t);
    const std::int64_t row_bytes = c.n * std::int64_t(dtype_size(c.dtype));
    const std::int64_t min_row_bytes = dtype_size(c.dtype) == 4 ? t.fp32_fused_min_row_bytes : t.fused_min_row_bytes;
    if (c.m >= t.fused_min_rows ||
        (c.m >= t.fused_bytes_min_rows && c.m * row_bytes >= t.fused_min_bytes && row_bytes >= min_row_bytes) ||
        (c.m * c.n <= t.fused_cluster_max_elements && c.n <= t.fused_cluster_max_cols)) {
      EXPECT_EQ(plan.strategy, Strategy::Fused) << c.name;
      EXPECT_GE(plan.row.blocks, 1) << c.name;
      EXPECT_LE(plan.row.blocks, DeviceFacts::h200().sm_count * kFusedBlocksPerSm) << c.name;
    } else {  // small: the mixed tiled / two-pass choice
      EXPECT_EQ(plan.strategy, normkit::plan(p, DeviceFacts::h200(), Strategy::Auto, unfused).strategy) << c.name;
    }
  }
  // the boundaries themselves: bytes of x, rows, and the row length in bytes
  const std::int64_t m = t.fused_bytes_min_rows, n = t.fused_min_bytes / (2 * m);  // fp16: 1024 x 768
  ASSERT_LT(m, t.fused_min_rows);
  ASSERT_EQ(n % 8, 0);
  ASSERT_GE(2 * n, t.fused_min_row_bytes);
  auto full = [&](std::int64_t rows, std::int64_t cols, DType dt) {
    return normkit::plan(backward(rows, cols, dt, {true, true, true}), DeviceFacts::h200(), Strategy::Auto, t).strategy;
  };
  EXPECT_EQ(full(m, n, DType::F16), Strategy::Fused);
  EXPECT_NE(full(m, n - 8, DType::F16), Strategy::Fused);      // a vector too few bytes
  EXPECT_NE(full(m - 1, 8 * n, DType::F16), Strategy::Fused);  // bytes enough, rows too few
  EXPECT_EQ(full(m, n / 2, DType::F32), Strategy::Fused);      // bytes, not elements
  EXPECT_NE(full(m, n / 2 - 4, DType::F32), Strategy::Fused);
  const std::int64_t short_n = t.fused_min_row_bytes / 2 - 8, short_m = t.fused_min_bytes / (2 * short_n) + 1;
  ASSERT_LT(short_m, t.fused_min_rows);
  EXPECT_NE(full(short_m, short_n, DType::F16), Strategy::Fused);  // bytes and rows enough, rows too short
  EXPECT_EQ(full(short_m, short_n + 8, DType::F16), Strategy::Fused);
  // without dX: from fused_gb_min_rows rows, on rows of at least fused_gb_min_vectors vectors
  auto gb_only = [&](std::int64_t rows, std::int64_t cols) {
    return normkit::plan(backward(rows, cols, DType::F16, {false, true, true}), DeviceFacts::h200(), Strategy::Auto, t)
        .strategy;
  };
  const std::int64_t long_row = t.fused_gb_min_vectors * 8;  // fp16: 8 columns a vector
  ASSERT_LT(m, t.fused_gb_min_rows);
  EXPECT_NE(gb_only(m, long_row), Strategy::Fused);
  EXPECT_EQ(gb_only(t.fused_gb_min_rows, long_row), Strategy::Fused);
  EXPECT_NE(gb_only(t.fused_gb_min_rows - 1, long_row), Strategy::Fused);
  EXPECT_NE(gb_only(t.fused_gb_min_rows, long_row - 8), Strategy::Fused);  // one vector short
  // ... or rows of fused_gb_mid_min_vectors..fused_gb_mid_max_vectors vectors (fp16 N = 768..1024)
  ASSERT_EQ(t.fused_gb_mid_min_vectors, 96);
  ASSERT_EQ(t.fused_gb_mid_max_vectors, 128);
  for (const std::int64_t n : {768, 1000, 1024}) {
    EXPECT_EQ(gb_only(t.fused_gb_min_rows, n), Strategy::Fused) << n;
    EXPECT_EQ(gb_only(1 << 20, n), Strategy::Fused) << n;
    EXPECT_NE(gb_only(t.fused_gb_min_rows - 1, n), Strategy::Fused) << n;  // (4097 x 768: two-pass 0.81x fused)
  }
  EXPECT_NE(gb_only(1 << 20, 760), Strategy::Fused);   // 95 vectors
  EXPECT_NE(gb_only(1 << 20, 1032), Strategy::Fused);  // 129
  EXPECT_NE(gb_only(1 << 20, 4096), Strategy::Fused);  // 512 (131072 x 4096: two-pass)
  PlannerTable no_mid = t;
  no_mid.fused_gb_mid_min_vectors = no_mid.fused_gb_mid_max_vectors + 1;
  EXPECT_NE(normkit::plan(backward(1 << 20, 768, DType::F16, {false, true, true}), DeviceFacts::h200(), Strategy::Auto,
                          no_mid).strategy,
            Strategy::Fused);
  // rows split over a cluster (longer than 512 threads x 2 vectors): without dX only over clusters of
  // at most fused_gb_max_split blocks (N = 16384 fp16: 2), and only where the device has clusters
  ASSERT_EQ(t.fused_gb_max_split, 2);
  EXPECT_EQ(gb_only(t.fused_gb_min_rows, 16384), Strategy::Fused);
  EXPECT_EQ(normkit::plan(backward(t.fused_gb_min_rows, 16384), DeviceFacts::h200(), Strategy::Auto, t).row.split, 2);
  EXPECT_NE(gb_only(t.fused_gb_min_rows - 1, 16384), Strategy::Fused);
  EXPECT_NE(gb_only(t.fused_gb_min_rows, 16392), Strategy::Fused);  // 3 blocks
  EXPECT_NE(gb_only(1 << 16, 32768), Strategy::Fused);
  DeviceFacts no_clusters = DeviceFacts::h200();
  no_clusters.max_cluster_blocks = no_clusters.max_nonportable_cluster_blocks = 0;
  EXPECT_NE(normkit::plan(backward(t.fused_gb_min_rows, 16384), no_clusters, Strategy::Auto, t).strategy,
            Strategy::Fused);
  PlannerTable never_split = t;
  never_split.fused_gb_max_split = 1;
  EXPECT_NE(normkit::plan(backward(t.fused_gb_min_rows, 16384), DeviceFacts::h200(), Strategy::Auto, never_split).strategy,
            Strategy::Fused);
}

TEST(Planner, TiledBandBoundaries) {
  const struct { std::int64_t m; TileBand band; } expected[] = {
      {1, TileBand::Tile8},     {63, TileBand::Tile8},     {64, TileBand::Tile64},   {127, TileBand::Tile64},
      {128, TileBand::Tile128}, {129, TileBand::Tile128}, {192, TileBand::Tile128}, {255, TileBand::Tile128},
      {256, TileBand::Tile256}, {1 << 20, TileBand::Tile256}};
  for (const auto& e : expected) {
    // scalar strips (rows not vectorised): the seed's bands, at least 8 / 64 / 128 / 256 rows per
    // block iteration, more (up to 8 per thread, 16 in blocks of up to 512 threads) when that covers
    // M in fewer iterations
    // (warp-wide strips; the narrower ones keep the block's threads: ScalarTiledStripsNarrow...)
    Problem scalar = backward(e.m, 1024);
    scalar.rows_vector_aligned = false;
    PlannerTable warp_wide;
    warp_wide.tiled_min_strip_lanes = kWarpSize;
    const Plan plan = normkit::plan(scalar, DeviceFacts::h200(), Strategy::Tiled, warp_wide);
    EXPECT_EQ(plan.columns.band, e.band) << "M = " << e.m;
    const int seed_rows =
        e.band == TileBand::Tile8 ? 8 : e.band == TileBand::Tile64 ? 64 : e.band == TileBand::Tile128 ? 128 : 256;
    EXPECT_EQ(plan.columns.block_y, e.band == TileBand::Tile8 ? 8 : e.band == TileBand::Tile256 ? 32 : 16) << "M = " << e.m;
    EXPECT_GE(plan.columns.rows_per_iteration(), seed_rows) << "M = " << e.m;
    EXPECT_GE(plan.columns.rows_per_iteration(), std::min<std::int64_t>(e.m, 8 * plan.columns.block_y))
        << "M = " << e.m << ": one iteration when 8 rows per thread cover M";
    // 16 rows a thread only in blocks of at most kTiledLongUnrollMaxThreads (Tile-8..128): one
    // iteration for every M below Tile-256; Tile-256's 1024-thread blocks stay at 8
    const int threads = plan.columns.block_x * plan.columns.block_y;
    if (threads <= kTiledLongUnrollMaxThreads) EXPECT_GE(plan.columns.rows_per_iteration(), e.m) << "M = " << e.m;
    else EXPECT_LE(plan.columns.rows_per_thread, 8) << "M = " << e.m;
    // vectorised strips (wide rows): the same bands, at most 2 rows unrolled per thread (8 columns each)
    // (warp-wide ones: tall strips off)
    const Plan vectorised =
        normkit::plan(backward(e.m, 65536), DeviceFacts::h200(), Strategy::Tiled, without_tall_strips());
    ASSERT_EQ(vectorised.columns.vec, 8) << "M = " << e.m;
    EXPECT_EQ(vectorised.columns.band, e.band) << "M = " << e.m;
    EXPECT_EQ(vectorised.columns.block_y, plan.columns.block_y) << "M = " << e.m;
    EXPECT_LE(vectorised.columns.rows_per_thread, 2) << "M = " << e.m;
  }
}

TEST(Planner, MixedCutOversAtDocumentedBoundaries) {
  const PlannerTable t = without_tall_strips(unfused_table());  // the bands' strips against two-pass
  const DeviceFacts h200 = DeviceFacts::h200();
  auto strategy = [&](std::int64_t m, std::int64_t n) { return normkit::plan(backward(m, n), h200, Strategy::Auto, t).strategy; };
  // simple up to simple_max_rows
  EXPECT_EQ(strategy(t.simple_max_rows, 1024), Strategy::Simple);
  EXPECT_EQ(strategy(t.simple_max_rows + 1, 1024), Strategy::Tiled);
  // two-pass from max(two_pass_min_rows, strips x rows a strip): N = 512 at M >= 256 runs 32 strips
  // of 16 lanes (tiled_min_strip_lanes), two_pass_min_rows_per_narrow_strip rows each; warp-wide
  // strips (16 of them) two_pass_min_rows_per_strip each, so two_pass_min_rows; N = 2048 (64
  // strips, warp-wide from column_vec_two_pass_min_rows rows) at 64 x per_strip
  ASSERT_GE(t.two_pass_min_rows, 2 * t.two_pass_min_rows_per_part);
  ASSERT_GE(t.two_pass_min_rows, 16 * t.two_pass_min_rows_per_strip);
  ASSERT_EQ(normkit::plan(backward(511, 512), h200, Strategy::Tiled, t).columns.col_blocks, 32);
  const std::int64_t cut512 = 32 * t.two_pass_min_rows_per_narrow_strip;
  ASSERT_GT(cut512, t.two_pass_min_rows);
  ASSERT_LT(cut512, t.column_vec_two_pass_min_rows);
  EXPECT_EQ(strategy(cut512 - 1, 512), Strategy::Tiled);
  EXPECT_EQ(strategy(cut512, 512), Strategy::TwoPass);
  PlannerTable warp_wide = t;
  warp_wide.tiled_min_strip_lanes = kWarpSize;
  EXPECT_EQ(normkit::plan(backward(t.two_pass_min_rows - 1, 512), h200, Strategy::Auto, warp_wide).strategy, Strategy::Tiled);
  EXPECT_EQ(normkit::plan(backward(t.two_pass_min_rows, 512), h200, Strategy::Auto, warp_wide).strategy, Strategy::TwoPass);
  const std::int64_t cut2048 = 64 * t.two_pass_min_rows_per_strip;
  ASSERT_GT(cut2048, t.two_pass_min_rows);
  EXPECT_EQ(strategy(cut2048 - 1, 2048), Strategy::Tiled);
  EXPECT_EQ(strategy(cut2048, 2048), Strategy::TwoPass);
  // with dX, the per-strip rows of two_pass_min_rows_per_strip_with_dx (tiled runs beside dX)
  auto with_dx = [&](std::int64_t m, std::int64_t n) {
    return normkit::plan(backward(m, n, DType::F16, {true, true, true}), h200, Strategy::Auto, t).strategy;
  };
  // (N = 1024: 64 strips of 16 lanes x 24 rows would be 1536; two-pass reads 16 bytes a lane from
  // column_vec_two_pass_min_rows rows, where tiled reads one column: two-pass from there)
  ASSERT_LT(t.column_vec_two_pass_min_rows, 64 * t.two_pass_min_rows_per_strip_with_dx);
  const std::int64_t cut1024 = t.column_vec_two_pass_min_rows;
  EXPECT_EQ(with_dx(cut1024 - 1, 1024), Strategy::Tiled);
  EXPECT_EQ(with_dx(cut1024, 1024), Strategy::TwoPass);
  auto with_dx_unaligned = [&](std::int64_t m, std::int64_t n) {
    Problem p = backward(m, n, DType::F16, {true, true, true});
    p.rows_vector_aligned = false;
    return normkit::plan(p, h200, Strategy::Auto, t).strategy;
  };
  // scalar strips for both: 64 narrowed strips x 24 rows below column_vec_two_pass_min_rows rows, the
  // 32 warp-wide ones x 24 from there (the narrowed count was measured only below it)
  EXPECT_EQ(with_dx_unaligned(t.column_vec_two_pass_min_rows - 1, 1024), Strategy::Tiled);
  EXPECT_EQ(with_dx_unaligned(t.column_vec_two_pass_min_rows, 1024), Strategy::TwoPass);
  // ... and never once the column strips (32 lanes of 8 fp16 columns) alone fill the GPU: at least
  // tiled_full_grid_percent of its SMs (127 strips on the H200's 132)
  const std::int64_t strip = kWarpSize * 8;
  const std::int64_t full = (std::int64_t(h200.sm_count) * t.tiled_full_grid_percent + 99) / 100;
  EXPECT_EQ(full, 127);
  EXPECT_EQ(strategy(1 << 16, (full - 1) * strip), Strategy::TwoPass);
  EXPECT_EQ(strategy(1 << 16, full * strip), Strategy::Tiled);
  // ... but not where two-pass has 16-byte strips and tiled scalar ones (vectorised rows below
  // column_vec_min_cols, from column_vec_two_pass_min_rows rows): N = 8192, 256 scalar strips
  ASSERT_LT(8192, t.column_vec_min_cols);
  ASSERT_GE(8192 / kWarpSize, full);
  EXPECT_EQ(strategy(t.column_vec_two_pass_min_rows, 8192), Strategy::TwoPass);
  EXPECT_EQ(strategy(t.column_vec_two_pass_min_rows - 1, 8192), Strategy::Tiled);
  EXPECT_EQ(strategy(t.column_vec_two_pass_min_rows, 12288), Strategy::TwoPass);
  Problem unaligned8192 = backward(t.column_vec_two_pass_min_rows, 8192);
  unaligned8192.rows_vector_aligned = false;  // no 16-byte strips for either: the full grid holds
  EXPECT_EQ(normkit::plan(unaligned8192, h200, Strategy::Auto, t).strategy, Strategy::Tiled);
  // vectorised strips count vec times in strips x two_pass_min_rows_per_strip: N = 16384, 64 strips of 8
  const std::int64_t cut16384 = 64 * 8 * t.two_pass_min_rows_per_strip;
  EXPECT_EQ(strategy(cut16384 - 1, 16384), Strategy::Tiled);
  EXPECT_EQ(strategy(cut16384, 16384), Strategy::TwoPass);
  // scalar strips just short of filling the GPU (N = 4097: 129 strips; 4065: 128) take tiled at any M
  EXPECT_EQ(strategy(1 << 16, 4097), Strategy::Tiled);
  EXPECT_EQ(strategy(1 << 16, 4065), Strategy::Tiled);
  EXPECT_EQ(strategy(1 << 16, 4001), Strategy::TwoPass);  // 126 strips
  // N = 32768: 128 vectorised strips of 8 columns, tiled at every M (the measured 16384 x 32768)
  EXPECT_EQ(strategy(16384, 32768), Strategy::Tiled);
  EXPECT_EQ(strategy(1 << 16, 32768), Strategy::Tiled);
}

// NOTES entry 68: LayerNorm rows of 512-1536 bytes are fused with dX by the byte rule only from
// ln_fused_mid_rows_min_bytes, unless the fused grid is one full launch of a row group a block.
TEST(Planner, LayerNormMidRowsFusedFromTheirOwnBytesOrOneFullLaunch) {
  const PlannerTable t = without_tall_strips(default_planner_table());  // tall strips come before fused
  const DeviceFacts h200 = DeviceFacts::h200();
  ASSERT_EQ(t.ln_fused_mid_rows_min_row_bytes, 512);
  ASSERT_EQ(t.ln_fused_mid_rows_max_row_bytes, 1536);
  ASSERT_EQ(t.ln_fused_mid_rows_min_bytes, std::int64_t(4) << 20);
  auto full = [&](std::int64_t m, std::int64_t n, DType dt, bool rms = false) {
    return normkit::plan(backward(m, n, dt, {true, true, !rms}, rms), h200, Strategy::Auto, t).strategy;
  };
  for (const DType dt : {DType::BF16, DType::F16}) {
    EXPECT_NE(full(2560, 512, dt), Strategy::Fused);   // 2.5 MiB: two blocks' worth of groups, two-pass
    EXPECT_NE(full(4095, 512, dt), Strategy::Fused);   // just under 4 MiB
    EXPECT_EQ(full(4096, 512, dt), Strategy::Fused);   // 4 MiB
    EXPECT_EQ(full(2048, 512, dt), Strategy::Fused);   // one full launch: 128 groups of 16 rows
    EXPECT_EQ(full(1024, 768, dt), Strategy::Fused);   // one full launch: 128 groups of 8 rows (bert)
    EXPECT_NE(full(1536, 768, dt), Strategy::Fused);   // 192 groups: a second walk
    EXPECT_EQ(full(2560, 512, dt, true), Strategy::Fused);  // RMSNorm keeps the byte rule
    EXPECT_EQ(full(3172, 248, dt), Strategy::Fused);   // rows under 512 bytes keep it (entry 66)
    EXPECT_EQ(full(1536, 776, dt), Strategy::Fused);   // and rows over 1536 bytes
  }
  EXPECT_NE(full(3072, 128, DType::F32), Strategy::Fused);  // fp32 512-byte rows: mid rows too
  EXPECT_EQ(full(8192, 128, DType::F32), Strategy::Fused);  // fused_min_rows still takes them
  PlannerTable old = t;  // the rule off (ln_fused_mid_rows_min_bytes under fused_min_bytes)
  old.ln_fused_mid_rows_min_bytes = 0;
  EXPECT_EQ(normkit::plan(backward(2560, 512, DType::BF16, {true, true, true}), h200, Strategy::Auto, old).strategy,
            Strategy::Fused);
}

// The sweep-measured rules (docs/NOTES.md, entry 9): very wide scalar rows take simple, narrow rows with
// huge M take fused, unaligned rows take fused only when tiny.
TEST(Planner, SweepRulesForWideRowsNarrowRowsAndUnalignedRows) {
  PlannerTable t = without_tall_strips();  // (tall strips come before these rules)
  t.fused_cluster_max_elements = 0;  // the rules for problems too large for one cluster launch
  const DeviceFacts h200 = DeviceFacts::h200();
  auto strategy = [&](std::int64_t m, std::int64_t n, DType dt = DType::BF16) {  // full backward (dX too)
    return normkit::plan(backward(m, n, dt, {true, true, true}), h200, Strategy::Auto, t).strategy;
  };
  auto unaligned = [&](std::int64_t m, std::int64_t n) {
    Problem p = backward(m, n, DType::BF16);
    p.rows_vector_aligned = false;
    return normkit::plan(p, h200, Strategy::Auto, t).strategy;
  };
  // wide scalar rows: simple; wide vectorised rows: the vectorised strips
  EXPECT_EQ(unaligned(64, t.simple_min_cols), Strategy::Simple);
  EXPECT_EQ(unaligned(4096, t.simple_min_cols), Strategy::Simple);
  EXPECT_NE(unaligned(64, t.simple_min_cols / 4), Strategy::Simple);
  EXPECT_NE(strategy(64, t.simple_min_cols), Strategy::Simple);
  EXPECT_NE(strategy(4096, t.simple_min_cols), Strategy::Simple);
  // gamma/beta alone on up to simple_few_rows_max rows of at least simple_few_rows_min_cols columns:
  // simple; with dX, fewer columns or more rows: not by this rule (NOTES entry 60)
  const auto gamma_beta = [&](std::int64_t m, std::int64_t n) {
    return normkit::plan(backward(m, n, DType::BF16, {false, true, true}), h200, Strategy::Auto, t).strategy;
  };
  ASSERT_EQ(t.simple_few_rows_max, 4);
  ASSERT_EQ(t.simple_few_rows_min_cols, 4096);
  EXPECT_EQ(gamma_beta(2, 4096), Strategy::Simple);
  EXPECT_EQ(gamma_beta(4, 262144), Strategy::Simple);
  EXPECT_NE(gamma_beta(5, 4096), Strategy::Simple);
  EXPECT_NE(gamma_beta(4, 4088), Strategy::Simple);
  EXPECT_NE(normkit::plan(backward(4, 262144, DType::BF16, {true, true, true}), h200, Strategy::Auto, t).strategy,
            Strategy::Simple);
  // LayerNorm's up to ln_simple_few_wide_rows_max rows from ln_simple_few_wide_rows_min_cols; not RMSNorm's
  ASSERT_EQ(t.ln_simple_few_wide_rows_max, 7);
  ASSERT_EQ(t.ln_simple_few_wide_rows_min_cols, 196608);
  EXPECT_EQ(gamma_beta(7, 196608), Strategy::Simple);
  EXPECT_NE(gamma_beta(8, 262144), Strategy::Simple);
  EXPECT_NE(gamma_beta(7, 196600), Strategy::Simple);
  Problem rms_gb = backward(7, 262144, DType::BF16, {false, true, false});
  rms_gb.op = Op::RmsNormBackward;
  EXPECT_NE(normkit::plan(rms_gb, h200, Strategy::Auto, t).strategy, Strategy::Simple);
  rms_gb.rows = 4;
  EXPECT_EQ(normkit::plan(rms_gb, h200, Strategy::Auto, t).strategy, Strategy::Simple);
  EXPECT_EQ(strategy(7, 4096), Strategy::Tiled);  // simple only at M <= simple_max_rows ...
  EXPECT_EQ(strategy(1, 4096), Strategy::Tiled);  // ... and not where dX + tiled is one launch
  EXPECT_EQ(normkit::plan(backward(1, 4096, DType::BF16, {false, true, true}), h200, Strategy::Auto, t).strategy,
            Strategy::Simple);
  Problem one_wide = backward(1, 1 << 16, DType::BF16, {true, true, true});
  EXPECT_EQ(normkit::plan(one_wide, h200, Strategy::Auto, t).strategy, Strategy::Simple);  // past one launch
  // narrow rows: fused from their own row counts although their rows are shorter than fused_min_row_bytes
  ASSERT_LT(64 * 2, t.fused_min_row_bytes);
  auto gb_only = [&](std::int64_t m, std::int64_t n, bool rms = false) {
    return normkit::plan(backward(m, n, DType::BF16, {false, true, !rms}, rms), h200, Strategy::Auto, t).strategy;
  };
  EXPECT_EQ(gb_only(t.fused_short_row_min_rows, 64), Strategy::Fused);   // short vectorised rows
  EXPECT_NE(gb_only(t.fused_short_row_min_rows - 1, 64), Strategy::Fused);
  EXPECT_EQ(gb_only(t.fused_short_row_min_rows, 64, true), Strategy::Fused);
  EXPECT_NE(gb_only(t.fused_short_row_min_rows - 1, 64, true), Strategy::Fused);
  // ... and with dX from their bytes of x, LayerNorm and RMSNorm apart (bf16: 2 bytes an element)
  auto rms_full = [&](std::int64_t m, std::int64_t n) {
    return normkit::plan(backward(m, n, DType::BF16, {true, true, false}, true), h200, Strategy::Auto, t).strategy;
  };
  const std::int64_t ln_cut = t.fused_short_row_dx_min_bytes / 2, rms_cut = t.rms_fused_short_row_dx_min_bytes / 2;
  ASSERT_LT(ln_cut / 64, t.fused_short_row_min_rows);
  EXPECT_EQ(strategy(ln_cut / 64, 64), Strategy::Fused);  // 8192 x 64
  EXPECT_NE(strategy(ln_cut / 64 - 1, 64), Strategy::Fused);
  EXPECT_NE(strategy(ln_cut / 64, 32), Strategy::Fused);  // 8192 x 32: half the bytes
  EXPECT_EQ(strategy(ln_cut / 64, 32, DType::F32), Strategy::Fused);  // bytes, not elements: 8192 x 32 fp32
  EXPECT_NE(strategy(ln_cut / 64 - 1, 32, DType::F32), Strategy::Fused);
  EXPECT_EQ(rms_full(rms_cut / 64, 64), Strategy::Fused);  // 2048 x 64
  EXPECT_NE(rms_full(rms_cut / 64 - 1, 64), Strategy::Fused);
  EXPECT_EQ(rms_full(rms_cut / 32, 32), Strategy::Fused);  // 4096 x 32
  EXPECT_NE(rms_full(rms_cut / 16 - 1, 16), Strategy::Fused);
  EXPECT_NE(gb_only(ln_cut / 64, 64), Strategy::Fused);  // not without dX
  EXPECT_EQ(strategy(t.fused_unaligned_min_rows, 1), Strategy::Fused);    // N = 1: scalar, fits one thread
  EXPECT_NE(strategy(t.fused_unaligned_min_rows - 1, 1), Strategy::Fused);
  // the rest: rows shorter than fused_min_row_bytes (bf16 N = 120, 240 bytes) from fused_min_rows ...
  const std::int64_t below_row_bytes = t.fused_min_row_bytes / 2 - 8;
  ASSERT_GT(below_row_bytes, 8 * t.short_row_max_vectors);  // not a short-row rule's
  EXPECT_EQ(strategy(t.fused_min_rows, below_row_bytes), Strategy::Fused);
  EXPECT_NE(strategy(t.fused_min_rows - 1, below_row_bytes), Strategy::Fused);
  // ... and rows of fused_min_row_bytes (bf16 N = 128, NOTES entry 66) from fused_min_bytes of x
  const std::int64_t at_row_bytes = t.fused_min_row_bytes / 2, bytes_rows = t.fused_min_bytes / t.fused_min_row_bytes;
  ASSERT_LT(bytes_rows, t.fused_min_rows);
  EXPECT_EQ(strategy(bytes_rows, at_row_bytes), Strategy::Fused);  // 6144 x 128
  EXPECT_NE(strategy(bytes_rows - 1, at_row_bytes), Strategy::Fused);
  EXPECT_EQ(rms_full(bytes_rows, at_row_bytes), Strategy::Fused);
  EXPECT_NE(rms_full(bytes_rows - 1, at_row_bytes), Strategy::Fused);
  // fp32 rows by their own key: 256-byte rows (N = 64) not from their bytes, 512-byte rows (N = 128) are
  ASSERT_GT(t.fp32_fused_min_row_bytes, t.fused_min_row_bytes);
  const std::int64_t fp32_cols = t.fp32_fused_min_row_bytes / 4, fp32_rows = t.fused_min_bytes / t.fp32_fused_min_row_bytes;
  // (RMSNorm: LayerNorm's 512-byte rows have entry 68's mid-row rule, LayerNormMidRowsFusedFrom...)
  auto rms_f32 = [&](std::int64_t m, std::int64_t n) {
    return normkit::plan(backward(m, n, DType::F32, {true, true, false}, true), h200, Strategy::Auto, t).strategy;
  };
  EXPECT_EQ(rms_f32(std::max(fp32_rows, t.fused_bytes_min_rows), fp32_cols), Strategy::Fused);
  EXPECT_NE(rms_f32(fp32_rows - 1, fp32_cols), Strategy::Fused);
  EXPECT_NE(rms_f32(bytes_rows, at_row_bytes / 2), Strategy::Fused);  // 6144 x 64 fp32: 256-byte rows
  EXPECT_NE(strategy(bytes_rows, at_row_bytes / 2, DType::F32), Strategy::Fused);
  EXPECT_EQ(strategy(t.fused_bytes_min_rows, 768), Strategy::Fused);      // or enough bytes from fewer
  EXPECT_NE(strategy(t.fused_bytes_min_rows - 1, 768), Strategy::Fused);
  // N = 1 rows are not 16-byte vectorised but fit one thread: fused; N = 255 (scalar, wide group): not
  EXPECT_EQ(strategy(1 << 20, 1), Strategy::Fused);
  EXPECT_NE(strategy(1 << 20, 255), Strategy::Fused);
  EXPECT_TRUE(strategy_supported(backward(1 << 20, 255, DType::BF16), Strategy::Fused));  // forced still serves it
}

// Small problems with gamma/beta to reduce run fused as one launch: one thread-block cluster whose
// blocks reduce their partials in distributed shared memory (no workspace, no second kernel).
TEST(Planner, SmallProblemsRunFusedAsOneCluster) {
  // the rule as the d472e85 probe set it (the default is off since programmatic launch; see below)
  PlannerTable t;
  t.fused_cluster_max_elements = 1 << 16;
  t.fused_cluster_max_cols = 512;
  const DeviceFacts h200 = DeviceFacts::h200();
  auto plan = [&](const Problem& p, Strategy s = Strategy::Auto) { return normkit::plan(p, h200, s, t); };
  for (const Mask mask : {Mask{true, true, true}, Mask{false, true, true}, Mask{false, false, true}}) {
    for (const auto& [m, n, dt] : {std::tuple{32L, 512L, DType::F16}, std::tuple{96L, 256L, DType::F16},
                                   std::tuple{128L, 512L, DType::BF16}, std::tuple{255L, 64L, DType::BF16}}) {
      // auto: fused (as a cluster) with dX; gamma/beta alone stays with tiled (one launch already)
      const Plan chosen = plan(backward(m, n, dt, mask));
      EXPECT_EQ(chosen.strategy == Strategy::Fused, mask.dx) << chosen.describe();
      const Plan fused = plan(backward(m, n, dt, mask), Strategy::Fused);
      const std::string at = "M = " + std::to_string(m) + ", N = " + std::to_string(n) + ": " + fused.describe();
      EXPECT_EQ(fused.cluster_blocks, fused.row.blocks) << at;
      EXPECT_GE(fused.cluster_blocks, 2) << at;
      EXPECT_LE(fused.cluster_blocks, std::min(t.fused_cluster_max_blocks, h200.max_cluster_blocks)) << at;
      EXPECT_EQ(fused.workspace_bytes, 0u) << at;
      EXPECT_EQ(fused.partial_rows, 0) << at;
      EXPECT_FALSE(fused.single_launch) << at;
      // every block holds its partial rows next to the staging area
      const int arrays = (mask.dweight ? 1 : 0) + (mask.dbias ? 1 : 0);
      EXPECT_GE(fused.row.smem_bytes, std::int64_t(sizeof(float)) * (fused.row.block_threads() * fused.row.vec + arrays * n))
          << at;
      EXPECT_NE(fused.describe().find("cluster"), std::string::npos) << at;
      // no more blocks than there are rows to give each block a row group's worth
      EXPECT_LE((fused.cluster_blocks - 1) * std::int64_t(fused.row.rows_per_block), m) << at;
    }
  }
  // above either threshold: the multi-block fused plan with its partial reduce, never a cluster
  const std::int64_t n = t.fused_cluster_max_cols, m = t.fused_cluster_max_elements / n;
  EXPECT_GT(plan(backward(m, n, DType::F16, {true, true, true}), Strategy::Fused).cluster_blocks, 0);
  const Plan big = plan(backward(m + 1, n, DType::F16, {true, true, true}), Strategy::Fused);
  EXPECT_EQ(big.cluster_blocks, 0);
  EXPECT_EQ(big.partial_rows, big.row.blocks);
  EXPECT_EQ(plan(backward(16, 2 * n, DType::F16, {true, true, true}), Strategy::Fused).cluster_blocks, 0);
  // rows for one block: forced fused writes dgamma/dbeta itself (direct), no cluster; auto does not
  // take it (a one-block fused grid lost to dX + tiled)
  EXPECT_NE(plan(backward(1, 512, DType::BF16, {true, true, true})).strategy, Strategy::Fused);
  EXPECT_NE(plan(backward(64, 64, DType::BF16, {true, true, true})).strategy, Strategy::Fused);
  const Plan one = plan(backward(1, 512, DType::BF16, {true, true, true}), Strategy::Fused);
  EXPECT_EQ(one.row.blocks, 1);
  EXPECT_EQ(one.cluster_blocks, 0);
  EXPECT_EQ(one.workspace_bytes, 0u);
  // dX only: nothing to reduce, no cluster
  EXPECT_EQ(plan(backward(96, 256, DType::F16, {true, false, false}), Strategy::Fused).cluster_blocks, 0);
  // a device without clusters: auto keeps the unfused choice, forced fused reduces in a second launch
  DeviceFacts no_clusters = h200;
  no_clusters.max_cluster_blocks = 0;
  EXPECT_NE(normkit::plan(backward(96, 256, DType::F16, {true, true, true}), no_clusters, Strategy::Auto, t).strategy, Strategy::Fused);
  const Plan forced = normkit::plan(backward(96, 256, DType::F16, {true, true, true}), no_clusters, Strategy::Fused, t);
  EXPECT_EQ(forced.cluster_blocks, 0);
  EXPECT_EQ(forced.partial_rows, forced.row.blocks);
  // the table caps the cluster
  PlannerTable small_clusters = t;
  small_clusters.fused_cluster_max_blocks = 4;
  EXPECT_EQ(normkit::plan(backward(128, 512, DType::BF16, {true, true, true}), h200, Strategy::Auto, small_clusters)
                .cluster_blocks,
            4);
  // the default table: auto never takes the cluster with programmatic launch (it lost 1.08-1.58x to
  // dX + tiled beside it, docs/NOTES.md entry 19); forced fused still reduces in a second launch
  for (const auto& [m, n] : {std::pair{32L, 512L}, std::pair{128L, 256L}, std::pair{128L, 512L}}) {
    const Problem p = backward(m, n, DType::BF16, {true, true, true});
    EXPECT_NE(normkit::plan(p, h200).strategy, Strategy::Fused);
    EXPECT_EQ(normkit::plan(p, h200, Strategy::Fused).cluster_blocks, 0);
  }
}

// The second kernel of a backward is launched programmatically where the device and the table allow it.
TEST(Planner, ProgrammaticLaunchFollowsTheDeviceAndTheTable) {
  const Problem p = backward(4096, 768, DType::BF16, {true, true, true});
  EXPECT_TRUE(normkit::plan(p, DeviceFacts::h200(), Strategy::TwoPass).programmatic_launch);
  DeviceFacts old_gpu = DeviceFacts::h200();
  old_gpu.programmatic_launch = false;
  EXPECT_FALSE(normkit::plan(p, old_gpu, Strategy::TwoPass).programmatic_launch);
  PlannerTable off;
  off.programmatic_launch = false;
  EXPECT_FALSE(normkit::plan(p, DeviceFacts::h200(), Strategy::TwoPass, off).programmatic_launch);
}

TEST(Planner, TwoPassWorkspaceIsSizedFromNNotTheWeightShape) {
  // The seed's bug: x (100000, 8, 16) normalized over (8, 16) has N = 128 while the weight's last
  // dim is 16. The planner only knows N: the partials are [parts, 128] per requested output.
  const Plan both = normkit::plan(backward(100000, 128), DeviceFacts::h200(), Strategy::TwoPass);
  EXPECT_GT(both.columns.row_parts, 1);
  EXPECT_EQ(both.partial_arrays, 2);
  EXPECT_EQ(both.workspace_bytes, std::size_t(both.columns.row_parts) * 128 * 2 * sizeof(float));
  // dbias without a weight (mask dweight off): the dbias partials still exist.
  const Plan bias_only = normkit::plan(backward(100000, 128, DType::F16, {true, false, true}), DeviceFacts::h200(),
                                       Strategy::TwoPass);
  EXPECT_EQ(bias_only.partial_arrays, 1);
  EXPECT_EQ(bias_only.workspace_bytes, std::size_t(bias_only.columns.row_parts) * 128 * sizeof(float));
  // parts cover M exactly
  EXPECT_GE(both.columns.row_parts * both.columns.rows_per_part, 100000);
  EXPECT_LT((both.columns.row_parts - 1) * both.columns.rows_per_part, 100000);
}

// Two-pass slices: at most one per two_pass_min_rows_per_part rows, that count rounded up, so that M a
// few rows past a multiple of the minimum keeps slices of one block iteration (16 thread rows x 4
// rows of scalar strips = 64) instead of slices one row longer (docs/NOTES.md entry 42).
TEST(Planner, TwoPassSlicesRoundTheirCountUp) {
  const PlannerTable t;
  ASSERT_EQ(t.two_pass_min_rows_per_part, 64);
  auto slices = [&](std::int64_t m, std::int64_t n) {
    return normkit::plan(backward(m, n, DType::BF16), DeviceFacts::h200(), Strategy::TwoPass).columns;
  };
  const ColumnShape even = slices(4096, 64), odd = slices(4097, 64), past = slices(4100, 64), short_of = slices(4095, 64);
  EXPECT_EQ(even.row_parts, 64);
  EXPECT_EQ(even.rows_per_part, 64);
  EXPECT_EQ(odd.row_parts, 65);  // 64 slices of 64 rows and one of 1 (rounded down: 64 of 65)
  EXPECT_EQ(odd.rows_per_part, 64);
  EXPECT_EQ(past.row_parts, 65);
  EXPECT_EQ(past.rows_per_part, 64);
  EXPECT_EQ(short_of.row_parts, 64);
  EXPECT_EQ(short_of.rows_per_part, 64);
  EXPECT_LE(even.rows_per_part, std::int64_t(even.block_y) * even.rows_per_thread);
  for (std::int64_t m : {std::int64_t(129), std::int64_t(2049), std::int64_t(4097), std::int64_t(8193), std::int64_t(100003)}) {
    for (std::int64_t n : {std::int64_t(64), std::int64_t(1024)}) {
      const ColumnShape c = slices(m, n);
      EXPECT_GE(c.row_parts * c.rows_per_part, m) << m << " x " << n;
      EXPECT_LT((c.row_parts - 1) * c.rows_per_part, m) << m << " x " << n;
      EXPECT_LE(c.row_parts, (m + t.two_pass_min_rows_per_part - 1) / t.two_pass_min_rows_per_part) << m << " x " << n;
      // N = 64 up to 264 x 64 rows: two scalar strips want 264 slices, more than M / 64, so slices of
      // one block iteration
      if (n == 64 && m <= 264 * 64) EXPECT_LE(c.rows_per_part, std::int64_t(c.block_y) * c.rows_per_thread) << m << " x " << n;
    }
  }
  // large M is unchanged: the slices come from the grid there (33 for 131072 x 4096)
  EXPECT_EQ(slices(131072, 4096).row_parts, 33);
}

TEST(Planner, PartialReduceCoversThePartialsInOneBatchOfLoads) {
  // Thread rows of the partial reduce: ceil(partial rows / kReduceRowsPerThread), 1..32, for the
  // fused grid's partials and for two-pass's row slices alike.
  const Plan fused = normkit::plan(backward(8192, 768, DType::BF16), DeviceFacts::h200(), Strategy::Fused);
  ASSERT_EQ(fused.partial_rows, 132);
  EXPECT_EQ(fused.columns.reduce_block_y, 17);  // 132 rows: 17 thread rows of at most 8
  EXPECT_GE(std::int64_t(fused.columns.reduce_block_y) * kReduceRowsPerThread, fused.partial_rows);
  // ... and never fewer than the table's reduce_min_block_y
  const PlannerTable t;
  const Plan few = normkit::plan(backward(1024, 768, DType::F16), DeviceFacts::h200(), Strategy::TwoPass);
  ASSERT_EQ(few.partial_rows, 16);
  EXPECT_EQ(few.columns.reduce_block_y, std::max(2, t.reduce_min_block_y));
  PlannerTable one_row;
  one_row.reduce_min_block_y = 1;
  EXPECT_EQ(normkit::plan(backward(1024, 768, DType::F16), DeviceFacts::h200(), Strategy::TwoPass, one_row)
                .columns.reduce_block_y,
            2);
  const Plan tall = normkit::plan(backward(131072, 64, DType::F16), DeviceFacts::h200(), Strategy::TwoPass);
  ASSERT_GT(tall.partial_rows, 32 * kReduceRowsPerThread);  // more than one batch: the block is capped
  EXPECT_EQ(tall.columns.reduce_block_y, 1024 / kWarpSize);
  const Plan one = normkit::plan(backward(2, 768, DType::F16), DeviceFacts::h200(), Strategy::TwoPass, one_row);
  EXPECT_EQ(one.columns.reduce_block_y, 1);
}

TEST(Planner, RmsNeverHasDbiasPartials) {
  const Plan plan = normkit::plan(backward(4096, 1024, DType::F16, {true, true, true}, true), DeviceFacts::h200(),
                                  Strategy::TwoPass);
  EXPECT_FALSE(plan.mask.dbias);
  EXPECT_EQ(plan.partial_arrays, 1);
}

TEST(Planner, FusedWorkspaceAndSupport) {
  const Plan plan = normkit::plan(backward(131072, 4096, DType::BF16, {true, true, true}), DeviceFacts::h200(),
                                  Strategy::Fused);
  EXPECT_EQ(plan.partial_rows, plan.row.blocks);
  EXPECT_EQ(plan.workspace_bytes, std::size_t(plan.row.blocks) * 4096 * 2 * sizeof(float));
  EXPECT_EQ(plan.row.block_threads(), kFusedBlockThreads);
  // dx only: no partials
  const Plan dx_only = normkit::plan(backward(131072, 4096, DType::BF16, {true, false, false}), DeviceFacts::h200(),
                                     Strategy::Fused);
  EXPECT_EQ(dx_only.workspace_bytes, 0u);
  // widest fused row: kFusedBlockThreads * kFusedWideItems vectors per block, split over at most
  // kMaxFusedSplitBlocks blocks (fused_split_max): 262144 16-bit columns
  const std::int64_t widest = std::int64_t(kFusedBlockThreads) * kFusedWideItems * 8 * kMaxFusedSplitBlocks;
  EXPECT_EQ(widest, 262144);
  EXPECT_TRUE(strategy_supported(backward(16, widest, DType::BF16), Strategy::Fused));
  std::string why;
  EXPECT_FALSE(strategy_supported(backward(16, widest + 8, DType::BF16), Strategy::Fused, &why));
  EXPECT_NE(why.find("registers"), std::string::npos) << why;
  EXPECT_NE(why.find("cluster of 16"), std::string::npos) << why;
  try {
    normkit::plan(backward(16, widest + 8, DType::BF16), DeviceFacts::h200(), Strategy::Fused);
    FAIL() << "forcing fused on a row it cannot hold must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fused"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("262152"), std::string::npos) << e.what();
  }
  // auto falls back to the unfused strategies for such rows, it does not fail
  EXPECT_NE(normkit::plan(backward(2048, widest + 8, DType::BF16, {true, true, true}), DeviceFacts::h200()).strategy,
            Strategy::Fused);
}

// The fused backward splits rows longer than one block holds (kFusedBlockThreads x kMaxFusedItems
// vectors) over a cluster of up to fused_split_max blocks (docs/NOTES.md entry 25).
TEST(Planner, FusedRowsTooLongForOneBlockAreSplitOverACluster) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const Mask full{true, true, true};
  const struct { std::int64_t n; DType t; int split; int slice; } cases[] = {
      {8192, DType::BF16, 1, 0},     {8200, DType::BF16, 2, 4160}, {16384, DType::F16, 2, 8192},
      {65536, DType::BF16, 8, 8192}, {57352, DType::BF16, 8, 7232}, {20000, DType::F32, 5, 4000},
      {32768, DType::F32, 8, 4096}};
  for (const auto& c : cases) {
    for (bool rms : {false, true}) {
      Problem p = backward(2048, c.n, c.t, {true, true, !rms});
      if (rms) p.op = Op::RmsNormBackward;
      const std::string where = std::string(op_name(p.op)) + " " + dtype_name(c.t) + " N = " + std::to_string(c.n);
      const Plan plan = normkit::plan(p, h200, Strategy::Fused);
      EXPECT_EQ(plan.row.split, c.split) << where;
      if (c.split == 1) continue;
      EXPECT_EQ(plan.row.slice_cols, c.slice) << where;
      EXPECT_EQ(plan.row.items, kMaxFusedItems) << where;
      EXPECT_EQ(plan.row.threads_per_row, kFusedBlockThreads) << where;
      EXPECT_EQ(plan.row.rows_per_block, 1) << where;
      // one block per SM, in whole clusters; the clusters are the row walkers and own the partial rows
      const std::int64_t clusters = h200.sm_count / c.split;
      EXPECT_EQ(plan.row.blocks, clusters * c.split) << where;
      EXPECT_EQ(plan.partial_rows, clusters) << where;
      EXPECT_EQ(plan.workspace_bytes, std::size_t(clusters) * std::size_t(c.n) * (rms ? 1 : 2) * sizeof(float)) << where;
      EXPECT_FALSE(plan.single_launch) << where;
      EXPECT_EQ(plan.cluster_blocks, 0) << where;
      // 32 KB a stage: 2 stages (row_stage_bytes_per_sm), and one more from
      // fused_split_extra_stage_min_split (4) blocks on (NOTES entry 50)
      EXPECT_EQ(plan.row.stages, c.split >= 4 ? 3 : 2) << where;
      EXPECT_NE(plan.describe().find("split=" + std::to_string(c.split)), std::string::npos) << plan.describe();
      // 2-item rows never defer their cluster sums (fused_deferred_min_split above any cluster, NOTES
      // entry 50; deferred from 8 blocks in entry 28)
      EXPECT_FALSE(plan.deferred_sums) << where;
      EXPECT_EQ(plan.describe().find("deferred"), std::string::npos) << plan.describe();
      // auto fuses them with dX (the second read of x and dy is what fusing saves), not without
      EXPECT_EQ(normkit::plan(p, h200).strategy, Strategy::Fused) << where;
      Problem gb = p;
      gb.mask.dx = false;
      EXPECT_NE(normkit::plan(gb, h200).strategy, Strategy::Fused) << where;
      EXPECT_EQ(normkit::plan(gb, h200, Strategy::Fused).row.split, c.split) << where;  // forced: served
    }
  }
  // rows longer than a portable cluster of 2-item blocks: 4-item blocks, clusters above the portable
  // size where needed (the device opts in); a device without such clusters does not fuse them. (Rows
  // that need 15 or 16 2-item blocks, 114689..131072 16-bit / 57345..65536 fp32 columns, stay 2-item over a
  // cluster of 16:
  // FusedCachedRowsSplitUpToTheKeysCluster.)
  const struct { std::int64_t n; DType t; int split; int slice; } wide[] = {
      {65544, DType::BF16, 5, 13120}, {98304, DType::BF16, 6, 16384}, {262144, DType::BF16, 16, 16384},
      {40960, DType::F32, 5, 8192},   {131072, DType::F32, 16, 8192}};
  for (const auto& c : wide) {
    const Problem p = backward(4096, c.n, c.t, full);
    const std::string where = std::string(dtype_name(c.t)) + " N = " + std::to_string(c.n);
    const Plan plan = normkit::plan(p, h200, Strategy::Fused);
    EXPECT_EQ(plan.row.split, c.split) << where;
    EXPECT_EQ(plan.row.slice_cols, c.slice) << where;
    EXPECT_EQ(plan.row.items, kFusedWideItems) << where;
    EXPECT_EQ(plan.row.threads_per_row, kFusedBlockThreads) << where;
    EXPECT_EQ(plan.row.blocks, h200.sm_count / c.split * c.split) << where;
    EXPECT_EQ(plan.partial_rows, h200.sm_count / c.split) << where;
    EXPECT_GT(plan.row.stages, 1) << where;
    EXPECT_TRUE(plan.deferred_sums) << where;  // wide rows defer at any split (they recompute anyway)
    // deferred walks load the statistics themselves: three stages of x and dy alone, 192 KB, then the
    // weights of the block's slice, one 16-byte pack a slot (weights of the rows' type: 16 bytes a
    // slot), 32 KB more (NOTES entries 28 and 59)
    const std::int64_t slot_bytes = std::int64_t(kFusedBlockThreads) * kFusedWideItems * 16;
    EXPECT_EQ(plan.row.stages, 3) << where;
    EXPECT_EQ(plan.row.smem_bytes, (3 * 2 + 1) * slot_bytes) << where;
    EXPECT_LE(plan.row.smem_bytes + 1152, h200.smem_per_block_optin) << where;  // with the static scratch
    if (c.t != DType::F32) {
      // fp32 weights of 16-bit rows (autocast) take 32 bytes a slot, 64 KB, in shared memory too: two
      // stages fit beside them (NOTES entry 85: 0.77-0.79x the time of three stages and the weights read
      // from global memory at 4096 x 262144)
      Problem fp32_weights = p;
      fp32_weights.weight_dtype = DType::F32;
      const Plan mixed = normkit::plan(fp32_weights, h200, Strategy::Fused);
      EXPECT_EQ(mixed.row.stages, 2) << where;
      EXPECT_EQ(mixed.row.smem_bytes, (2 * 2 + 2) * slot_bytes) << where;
      EXPECT_TRUE(mixed.deferred_sums) << where;
    }
    // auto: fused for every element size since NOTES entry 59 (fused_wide_min_element_bytes = 2); with
    // the key at 4, the unfused strategies with the split dX for 16-bit elements, fused again where the
    // dX kernel would stream the rows
    const bool fp32 = c.t == DType::F32;
    const Plan automatic = normkit::plan(p, h200);
    EXPECT_EQ(automatic.strategy, Strategy::Fused) << where << ": " << automatic.describe();
    PlannerTable unfuse_16bit = default_planner_table(), no_wide_dx = unfuse_16bit;
    unfuse_16bit.fused_wide_min_element_bytes = 4;
    no_wide_dx.fused_wide_min_element_bytes = 4;
    no_wide_dx.row_split_wide_max = 1;
    const Plan unfused = normkit::plan(p, h200, Strategy::Auto, unfuse_16bit);
    EXPECT_EQ(unfused.strategy == Strategy::Fused, fp32) << where << ": " << unfused.describe();
    if (!fp32) {
      EXPECT_EQ(unfused.row.split, c.split) << where;
      EXPECT_EQ(unfused.row.threads_per_row, kWideSplitBlockThreads) << where;
    }
    EXPECT_EQ(normkit::plan(p, h200, Strategy::Auto, no_wide_dx).strategy, Strategy::Fused) << where;
    DeviceFacts portable_only = h200;
    portable_only.max_nonportable_cluster_blocks = 0;
    EXPECT_EQ(normkit::plan(p, portable_only).strategy == Strategy::Fused, c.split <= 8) << where;
    if (c.split > 8) EXPECT_THROW(normkit::plan(p, portable_only, Strategy::Fused), Error) << where;
  }
  // the key is read
  {
    const std::string path = ::testing::TempDir() + "normkit_fused_wide_table.txt";
    { std::ofstream(path) << "fused_wide_min_element_bytes = 2\n"; }
    EXPECT_EQ(load_planner_table(path).fused_wide_min_element_bytes, 2);
    std::remove(path.c_str());
  }
  // 16-bit rows of the fused kernel's portable split (2 items a thread) stay fused
  EXPECT_EQ(normkit::plan(backward(8192, 65536, DType::BF16, full), h200).strategy, Strategy::Fused);
  // rows the dX kernel would stream (beyond its split: row_split_wide_max off, or a device without
  // clusters above the portable size) are fused at any M with dX (sweep at 3440edf); rows its split
  // covers, the wide split included, keep the size rules (docs/NOTES.md entry 38)
  PlannerTable no_wide_dx;
  no_wide_dx.row_split_wide_max = 1;
  for (std::int64_t m : {1, 7, 64}) {
    EXPECT_EQ(normkit::plan(backward(m, 262144, DType::BF16, full), h200, Strategy::Auto, no_wide_dx).strategy, Strategy::Fused) << m;
    EXPECT_EQ(normkit::plan(backward(m, 131072, DType::F32, full), h200, Strategy::Auto, no_wide_dx).strategy, Strategy::Fused) << m;
    // a device without clusters above the portable size: 131072 16-bit columns still split (8 wide
    // blocks), 262144 neither split nor fused (its fused walk needs clusters of 16)
    DeviceFacts portable_only = h200;
    portable_only.max_nonportable_cluster_blocks = 0;
    EXPECT_EQ(normkit::plan(backward(m, 131072, DType::BF16, full), portable_only).row.split, 8) << m;
    EXPECT_EQ(normkit::plan(backward(m, 262144, DType::BF16, full), portable_only).row.items, 0) << m;
    for (const auto& [n, t] : {std::pair{262144, DType::BF16}, std::pair{131072, DType::F32}, std::pair{131072, DType::BF16}}) {
      const Plan unfused = normkit::plan(backward(m, n, t, full), h200);
      EXPECT_NE(unfused.strategy, Strategy::Fused) << m << " x " << n;
      EXPECT_GT(unfused.row.split, 1) << m << " x " << n;
    }
    EXPECT_NE(normkit::plan(backward(m, 65536, DType::BF16, full), h200).strategy, Strategy::Fused) << m;
    EXPECT_NE(normkit::plan(backward(m, 262144, DType::BF16), h200).strategy, Strategy::Fused) << m;  // no dX
  }
  // fused_deferred_min_split: 2-item split rows follow the key; wide rows defer whatever it says;
  // unstaged walks (one walker per row: M = 1) cannot defer; unsplit rows never do
  PlannerTable defer_from_two, never_defer;
  defer_from_two.fused_deferred_min_split = 2;
  never_defer.fused_deferred_min_split = 1000;
  EXPECT_TRUE(normkit::plan(backward(2048, 16384, DType::BF16, full), h200, Strategy::Fused, defer_from_two).deferred_sums);
  EXPECT_FALSE(normkit::plan(backward(2048, 65536, DType::BF16, full), h200, Strategy::Fused, never_defer).deferred_sums);
  EXPECT_TRUE(normkit::plan(backward(2048, 262144, DType::BF16, full), h200, Strategy::Fused, never_defer).deferred_sums);
  EXPECT_FALSE(normkit::plan(backward(2048, 8192, DType::BF16, full), h200, Strategy::Fused, defer_from_two).deferred_sums);
  // fused_split_extra_stage_min_split: split rows from that many blocks stage one row more (32 KB a
  // stage: 3 instead of 2); deferred walks always do; unsplit rows never
  PlannerTable extra_from_two, extra_never;
  extra_from_two.fused_split_extra_stage_min_split = 2;
  extra_never.fused_split_extra_stage_min_split = 1000;
  const Problem split2 = backward(2048, 8192, DType::F32, full), split8 = backward(2048, 65536, DType::BF16, full);
  EXPECT_EQ(normkit::plan(split2, h200, Strategy::Fused).row.stages, 2);
  EXPECT_EQ(normkit::plan(split2, h200, Strategy::Fused, extra_from_two).row.stages, 3);
  EXPECT_EQ(normkit::plan(split8, h200, Strategy::Fused).row.stages, 3);
  EXPECT_EQ(normkit::plan(split8, h200, Strategy::Fused, extra_never).row.stages, 2);
  PlannerTable deferred_no_extra = defer_from_two;
  deferred_no_extra.fused_split_extra_stage_min_split = 1000;
  EXPECT_EQ(normkit::plan(split2, h200, Strategy::Fused, deferred_no_extra).row.stages, 3);
  EXPECT_EQ(normkit::plan(backward(2048, 262144, DType::BF16, full), h200, Strategy::Fused, extra_never).row.stages, 3);
  EXPECT_EQ(normkit::plan(backward(16384, 8192, DType::BF16, full), h200, Strategy::Fused, extra_from_two).row.stages, 2);
  // fused_split_min_bytes (24 MiB of x): split rows of 2-item blocks are fused with dX at any M from
  // there (NOTES entry 50); below, fused_bytes_min_rows rows as before; never without dX, never the
  // wide layout by this rule
  const auto auto_strategy = [&](std::int64_t m, std::int64_t n, DType t, Mask mask, const PlannerTable& table) {
    return normkit::plan(backward(m, n, t, mask), h200, Strategy::Auto, table).strategy;
  };
  const PlannerTable defaults = default_planner_table();
  ASSERT_EQ(defaults.fused_split_min_bytes, std::int64_t(24) << 20);
  EXPECT_EQ(auto_strategy(512, 65536, DType::BF16, full, defaults), Strategy::Fused);      // 64 MiB
  EXPECT_EQ(auto_strategy(255, 65536, DType::BF16, full, defaults), Strategy::Fused);      // 31.9 MiB
  EXPECT_EQ(auto_strategy(512, 32768, DType::BF16, full, defaults), Strategy::Fused);      // 32 MiB
  EXPECT_EQ(auto_strategy(255, 32768, DType::F32, full, defaults), Strategy::Fused);       // 31.9 MiB
  EXPECT_NE(auto_strategy(128, 65536, DType::BF16, full, defaults), Strategy::Fused);      // 16 MiB
  EXPECT_NE(auto_strategy(255, 32768, DType::BF16, full, defaults), Strategy::Fused);      // 15.9 MiB
  EXPECT_NE(auto_strategy(512, 16384, DType::BF16, full, defaults), Strategy::Fused);      // 16 MiB
  EXPECT_NE(auto_strategy(512, 65536, DType::BF16, {false, true, true}, defaults), Strategy::Fused);  // no dX
  EXPECT_NE(auto_strategy(409, 40960, DType::F32, full, defaults), Strategy::Fused);       // wide layout, 64 MiB
  // fp32 rows from fp32_fused_split_min_bytes (16 MiB)
  ASSERT_EQ(defaults.fp32_fused_split_min_bytes, std::int64_t(16) << 20);
  EXPECT_EQ(auto_strategy(512, 8192, DType::F32, full, defaults), Strategy::Fused);        // 16 MiB, split 2
  EXPECT_EQ(auto_strategy(256, 16384, DType::F32, full, defaults), Strategy::Fused);       // 16 MiB, split 4
  EXPECT_NE(auto_strategy(511, 8192, DType::F32, full, defaults), Strategy::Fused);
  EXPECT_NE(auto_strategy(255, 16384, DType::F32, full, defaults), Strategy::Fused);
  PlannerTable split_bytes = defaults;
  split_bytes.fused_split_min_bytes = std::int64_t(16) << 20;
  EXPECT_EQ(auto_strategy(128, 65536, DType::BF16, full, split_bytes), Strategy::Fused);
  EXPECT_NE(auto_strategy(127, 65536, DType::BF16, full, split_bytes), Strategy::Fused);
  split_bytes.fused_split_min_bytes = std::int64_t(1) << 20;
  EXPECT_NE(auto_strategy(512, 8192, DType::BF16, full, split_bytes), Strategy::Fused);    // unsplit: not this rule
  // fused_wide_min_bytes (LayerNorm, 96 MiB) / rms_fused_wide_min_bytes (48 MiB): 16-bit rows of the wide
  // layout are fused with dX at any M from there (NOTES entry 60); below, tiled + the split dX; fp32 and
  // gamma/beta alone not by this rule
  ASSERT_EQ(defaults.fused_wide_min_bytes, std::int64_t(96) << 20);
  ASSERT_EQ(defaults.rms_fused_wide_min_bytes, std::int64_t(48) << 20);
  const auto rms_strategy = [&](std::int64_t m, std::int64_t n, DType t, Mask mask, const PlannerTable& table) {
    Problem p = backward(m, n, t, mask);
    p.op = Op::RmsNormBackward;
    p.mask.dbias = false;
    return normkit::plan(p, h200, Strategy::Auto, table).strategy;
  };
  EXPECT_EQ(auto_strategy(192, 262144, DType::BF16, full, defaults), Strategy::Fused);     // 96 MiB
  EXPECT_NE(auto_strategy(191, 262144, DType::BF16, full, defaults), Strategy::Fused);
  EXPECT_EQ(auto_strategy(512, 98304, DType::F16, full, defaults), Strategy::Fused);       // 96 MiB
  EXPECT_NE(auto_strategy(511, 98304, DType::F16, full, defaults), Strategy::Fused);
  EXPECT_EQ(rms_strategy(96, 262144, DType::BF16, full, defaults), Strategy::Fused);       // 48 MiB
  EXPECT_NE(rms_strategy(95, 262144, DType::BF16, full, defaults), Strategy::Fused);
  EXPECT_EQ(rms_strategy(256, 98304, DType::F16, full, defaults), Strategy::Fused);
  EXPECT_NE(rms_strategy(255, 98304, DType::F16, full, defaults), Strategy::Fused);
  EXPECT_NE(auto_strategy(512, 262144, DType::BF16, {false, true, true}, defaults), Strategy::Fused);  // no dX
  EXPECT_NE(auto_strategy(615, 40960, DType::F32, full, defaults), Strategy::Fused);      // fp32 wide, 96 MiB
  PlannerTable wide_bytes = defaults;
  wide_bytes.fused_wide_min_bytes = std::int64_t(1) << 62;
  EXPECT_NE(auto_strategy(512, 262144, DType::BF16, full, wide_bytes), Strategy::Fused);
  EXPECT_EQ(auto_strategy(1024, 262144, DType::BF16, full, wide_bytes), Strategy::Fused);  // fused_bytes_min_rows
  EXPECT_EQ(rms_strategy(512, 262144, DType::BF16, full, wide_bytes), Strategy::Fused);    // RMSNorm: its own key
  const Plan unstaged_wide = normkit::plan(backward(1, 262144, DType::BF16, full), h200, Strategy::Fused);
  EXPECT_EQ(unstaged_wide.row.stages, 0);
  EXPECT_FALSE(unstaged_wide.deferred_sums);
  PlannerTable eight;
  eight.fused_split_max = 8;
  EXPECT_EQ(normkit::plan(backward(4096, 131072, DType::BF16, full), h200, Strategy::Fused, eight).row.split, 8);
  EXPECT_FALSE(strategy_supported(backward(4096, 262144, DType::BF16, full), Strategy::Fused, nullptr, eight));

  // few rows: clusters of fused_split_min_rows_per_cluster rows each (7 rows: 4 clusters, or 7 with
  // one row each); one row: one walker writes dgamma/dbeta itself. Unsplit rows count
  // fused_min_rows_per_block instead.
  EXPECT_EQ(normkit::plan(backward(7, 65536, DType::BF16, full), h200, Strategy::Fused).row.blocks, 4 * 8);
  PlannerTable one_row_each;
  one_row_each.fused_split_min_rows_per_cluster = 1;
  one_row_each.fused_min_rows_per_block = 3;  // not for split rows
  EXPECT_EQ(normkit::plan(backward(7, 65536, DType::BF16, full), h200, Strategy::Fused, one_row_each).row.blocks, 7 * 8);
  ASSERT_EQ(default_planner_table().fused_min_rows_per_block, 1);
  const Plan unsplit = normkit::plan(backward(1000, 1024, DType::BF16, full), h200, Strategy::Fused);
  EXPECT_EQ(unsplit.row.blocks, (1000 + unsplit.row.rows_per_block - 1) / unsplit.row.rows_per_block);
  EXPECT_EQ(normkit::plan(backward(1000, 1024, DType::BF16, full), h200, Strategy::Fused, one_row_each).row.blocks,
            (1000 + 3 * unsplit.row.rows_per_block - 1) / (3 * unsplit.row.rows_per_block));
  const Plan one_row = normkit::plan(backward(1, 65536, DType::BF16, full), h200, Strategy::Fused);
  EXPECT_EQ(one_row.row.blocks, 8);
  EXPECT_EQ(one_row.partial_rows, 0);
  EXPECT_EQ(one_row.workspace_bytes, 0u);
  // the single cooperative launch (the default) is not for split rows: they take two launches
  ASSERT_TRUE(default_planner_table().fused_single_launch);
  EXPECT_FALSE(normkit::plan(backward(2048, 65536, DType::BF16, full), h200, Strategy::Fused).single_launch);
  EXPECT_TRUE(normkit::plan(backward(2048, 4096, DType::BF16, full), h200, Strategy::Fused).single_launch);
  PlannerTable second_launch;
  second_launch.fused_single_launch = false;
  EXPECT_FALSE(normkit::plan(backward(2048, 4096, DType::BF16, full), h200, Strategy::Fused, second_launch).single_launch);
  // ... and only for grids of fused_single_launch_min_grid_percent of the SMs: 1024 x 768 bf16 is 128
  // blocks of 8 rows (97 %), 512 x 768 64 (48 %), 32 x 512 two
  ASSERT_EQ(default_planner_table().fused_single_launch_min_grid_percent, 95);
  const Plan grid128 = normkit::plan(backward(1024, 768, DType::BF16, full), h200, Strategy::Fused);
  EXPECT_EQ(grid128.row.blocks, 128);
  EXPECT_TRUE(grid128.single_launch);
  const Plan grid64 = normkit::plan(backward(512, 768, DType::BF16, full), h200, Strategy::Fused);
  EXPECT_EQ(grid64.row.blocks, 64);
  EXPECT_FALSE(grid64.single_launch);
  EXPECT_GT(grid64.partial_rows, 1);
  EXPECT_FALSE(normkit::plan(backward(32, 512, DType::BF16, full), h200, Strategy::Fused).single_launch);
  PlannerTable any_grid;
  any_grid.fused_single_launch_min_grid_percent = 0;
  EXPECT_TRUE(normkit::plan(backward(512, 768, DType::BF16, full), h200, Strategy::Fused, any_grid).single_launch);
  // the table turns it off (auto then takes the unfused dX split), and so does a device without
  // clusters: forced fused throws, naming why
  PlannerTable no_split;
  no_split.fused_split_max = 1;
  std::string why;
  EXPECT_FALSE(strategy_supported(backward(2048, 16384, DType::BF16, full), Strategy::Fused, &why, no_split));
  EXPECT_NE(why.find("fused_split_max"), std::string::npos) << why;
  const Plan unfused = normkit::plan(backward(2048, 65536, DType::BF16, full), h200, Strategy::Auto, no_split);
  EXPECT_NE(unfused.strategy, Strategy::Fused);
  EXPECT_EQ(unfused.row.split, 8);  // the dX kernel's split
  DeviceFacts no_clusters = h200;
  no_clusters.max_cluster_blocks = 0;
  EXPECT_NE(normkit::plan(backward(2048, 65536, DType::BF16, full), no_clusters).strategy, Strategy::Fused);
  try {
    normkit::plan(backward(2048, 65536, DType::BF16, full), no_clusters, Strategy::Fused);
    FAIL() << "forcing a split fused plan on a device without clusters must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cluster of 8"), std::string::npos) << e.what();
  }
  // unvectorised rows are never split
  EXPECT_FALSE(strategy_supported(backward(16, 16385, DType::BF16), Strategy::Fused, &why));
  EXPECT_NE(why.find("16-byte"), std::string::npos) << why;
  // the key is read and written, and capped at the largest cluster the fused kernel launches
  const std::string path = ::testing::TempDir() + "normkit_fused_split_table.txt";
  { std::ofstream(path) << "fused_split_max = 4\n"; }
  EXPECT_EQ(load_planner_table(path).fused_split_max, 4);
  { std::ofstream(path) << "fused_split_max = 17\n"; }
  EXPECT_THROW(load_planner_table(path), Error);
  std::remove(path.c_str());
}

// Split rows: each block's slice starts on a 128-byte line where the row does (slices off the lines
// cost the fused split walk 12-25 %, docs/NOTES.md entry 70), covers the row with the others, leaves
// the last block columns, and fits a block -- for the fused walk, the dX kernel's split and the forward.
TEST(Planner, SplitRowSlicesStartOnWholeLines) {
  const DeviceFacts h200 = DeviceFacts::h200();
  int split_plans = 0, rounded = 0;
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    const std::int64_t bytes = dtype_size(t);
    for (std::int64_t cols = 4096; cols <= 262144; cols += 1016) {  // 127 16-bit vectors a step: every remainder
      for (int kind = 0; kind < 3; ++kind) {
        const Problem p = kind == 0 ? backward(2048, cols, t, {true, true, true}) : forward(2048, cols, kind == 2, t);
        // the backward: the fused walk, and the dX kernel's split under tiled
        const std::vector<Strategy> strategies =
            kind == 0 ? std::vector<Strategy>{Strategy::Fused, Strategy::Tiled} : std::vector<Strategy>{Strategy::Auto};
        for (Strategy s : strategies) {
          if (!strategy_supported(p, s)) continue;
          const RowShape r = normkit::plan(p, h200, s).row;
          if (r.split < 2) continue;
          const std::string where = std::string(op_name(p.op)) + " " + strategy_name(s) + " " + dtype_name(t) +
                                    " N = " + std::to_string(cols) + " split " + std::to_string(r.split);
          ++split_plans;
          const std::int64_t vectors = cols / r.vec, even = (vectors + r.split - 1) / r.split;
          rounded += r.slice_cols / r.vec != even;
          EXPECT_EQ(std::int64_t(r.slice_cols) * bytes % 128, 0) << where << " slice " << r.slice_cols;
          EXPECT_LT(r.slice_cols / r.vec - even, 128 / (r.vec * bytes)) << where;  // less than a line added
          EXPECT_GE(std::int64_t(r.slice_cols) * r.split, cols) << where;
          EXPECT_LT(std::int64_t(r.slice_cols) * (r.split - 1), cols) << where;
          EXPECT_LE(r.slice_cols, std::int64_t(r.items) * r.threads_per_row * r.vec) << where;
        }
      }
    }
  }
  EXPECT_GT(split_plans, 500);
  EXPECT_GT(rounded, 100);  // most even shares are not whole lines
  // entry 70's shapes: 45056 16-bit columns over 6 blocks, 939 vectors even, 944 (118 lines) rounded
  const RowShape r = normkit::plan(backward(2048, 45056, DType::BF16, {true, true, true}), h200, Strategy::Fused).row;
  EXPECT_EQ(r.split, 6);
  EXPECT_EQ(r.slice_cols, 944 * 8);
}

// Fused split rows take, from the blocks the row needs up to the largest cluster of their layout, the
// size of which the device holds the most clusters (DeviceFacts::cluster_sms), ties to more blocks
// (PlannerTable::fused_split_most_clusters, docs/NOTES.md entry 70).
TEST(Planner, FusedSplitRowsTakeTheClusterSizeTheDeviceHoldsMostOf) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const Mask full{true, true, true};
  auto fused_row = [&](std::int64_t n, DType t, const DeviceFacts& device = DeviceFacts::h200(),
                       const PlannerTable& table = PlannerTable{}) {
    return normkit::plan(backward(2048, n, t, full), device, Strategy::Fused, table).row;
  };
  // H200: clusters of 2..8 blocks: 66 39 30 22 17 15 15; of 9..16: 9 7 7 7 7 7 7 7
  const struct { std::int64_t n; DType t; int needed, split, slice; } cases[] = {
      {16384, DType::BF16, 2, 2, 8192},    {20480, DType::BF16, 3, 3, 6848},    {24576, DType::BF16, 3, 3, 8192},
      {40960, DType::BF16, 5, 5, 8192},    {49152, DType::BF16, 6, 6, 8192},    {53248, DType::BF16, 7, 8, 6656},
      {57344, DType::BF16, 7, 8, 7168},    {65536, DType::BF16, 8, 8, 8192},    {98304, DType::BF16, 6, 6, 16384},
      {131080, DType::BF16, 9, 9, 14592},  {163840, DType::BF16, 10, 16, 10240}, {196608, DType::BF16, 12, 16, 12288},
      {262144, DType::BF16, 16, 16, 16384}, {28672, DType::F32, 7, 8, 3584},    {24576, DType::F32, 6, 6, 4096}};
  PlannerTable needed;
  needed.fused_split_most_clusters = 0;
  DeviceFacts unknown = h200;
  for (int& sms : unknown.cluster_sms) sms = 0;
  DeviceFacts even = h200;  // a device whose clusters fill sm_count / k x k SMs: 7 blocks hold 18 clusters, 8 16
  for (int k = 1; k <= kMaxFusedSplitBlocks; ++k) even.cluster_sms[k - 1] = even.sm_count / k * k;
  for (const auto& c : cases) {
    const std::string where = std::string(dtype_name(c.t)) + " N = " + std::to_string(c.n);
    const RowShape r = fused_row(c.n, c.t);
    EXPECT_EQ(r.split, c.split) << where;
    EXPECT_EQ(r.slice_cols, c.slice) << where;
    EXPECT_EQ(r.blocks, std::int64_t(h200.sm_count) / c.split * c.split) << where;  // the launch caps it
    EXPECT_EQ(fused_row(c.n, c.t, h200, needed).split, c.needed) << where;  // key off
    EXPECT_EQ(fused_row(c.n, c.t, unknown).split, c.needed) << where;      // sizes not known
    if (c.needed == 7) EXPECT_EQ(fused_row(c.n, c.t, even).split, 7) << where;
    // the strategy rules see the blocks the row needs: the same strategy with the key on and off
    const Problem p = backward(2048, c.n, c.t, full);
    EXPECT_EQ(normkit::plan(p, h200).strategy, normkit::plan(p, h200, Strategy::Auto, needed).strategy) << where;
  }
  // a device without non-portable clusters keeps wide rows within what it launches
  DeviceFacts portable_only = h200;
  portable_only.max_nonportable_cluster_blocks = 0;
  EXPECT_EQ(fused_row(98304, DType::BF16, portable_only).split, 6);
  // the key is read from a table file
  const std::string path = ::testing::TempDir() + "normkit_fused_split_most_clusters.txt";
  { std::ofstream(path) << "fused_split_most_clusters = 0\n"; }
  EXPECT_EQ(load_planner_table(path).fused_split_most_clusters, 0);
  std::remove(path.c_str());
}

// PlannerTable::fused_cached_split_max / fused_cached_split_min_beyond_portable: rows beyond a portable
// cluster of 2-item blocks stay 2-item (their terms cached, fp32 weights in registers) over clusters up to
// the first key, where the device launches them and the row needs at least the second key's blocks; the
// wide layout otherwise. Built in: the portable size (the H200: the wide layout 1.14-1.80x faster at every
// width, docs/NOTES.md entry 92); a table that raises it to 16 (an H100's tune) takes rows that need 15 or
// 16 blocks (entry 91).
TEST(Planner, FusedCachedRowsSplitUpToTheKeysCluster) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const Mask full{true, true, true};
  EXPECT_EQ(PlannerTable{}.fused_cached_split_max, kPortableClusterBlocks);
  const int min_blocks = PlannerTable{}.fused_cached_split_min_beyond_portable;
  EXPECT_EQ(min_blocks, 15);
  PlannerTable raised;  // the built-in cut, clusters up to 16
  raised.fused_cached_split_max = kMaxFusedSplitBlocks;
  PlannerTable every_beyond = raised;  // every row beyond the portable cluster stays 2-item
  every_beyond.fused_cached_split_min_beyond_portable = kPortableClusterBlocks + 1;
  PlannerTable portable_cached;  // the portable size at most: the wide layout beyond it
  portable_cached.fused_cached_split_max = kPortableClusterBlocks;
  DeviceFacts portable_only = h200;
  portable_only.max_nonportable_cluster_blocks = 0;
  // N, type, blocks of 2 items the row needs
  const struct { std::int64_t n; DType t; int needed; } cases[] = {
      {131072, DType::BF16, 16}, {122888, DType::F16, 16}, {122880, DType::BF16, 15}, {114688, DType::F16, 14},
      {98304, DType::F16, 12},   {65544, DType::BF16, 9},   {65536, DType::F32, 16},   {61440, DType::F32, 15},
      {40000, DType::F32, 10}};
  for (const auto& c : cases) {
    for (bool rms : {false, true}) {
      for (DType w : {c.t, DType::F32}) {
        Problem p = backward(4096, c.n, c.t, {true, true, !rms});
        if (rms) p.op = Op::RmsNormBackward;
        p.weight_dtype = w;
        const std::string where = std::string(op_name(p.op)) + " " + dtype_name(c.t) + " weights " + dtype_name(w) +
                                  " N = " + std::to_string(c.n);
        const Plan wide = normkit::plan(p, h200, Strategy::Fused, portable_cached);
        EXPECT_EQ(wide.row.items, kFusedWideItems) << where << ": " << wide.describe();
        EXPECT_EQ(normkit::plan(p, h200, Strategy::Fused).describe(), wide.describe()) << where;  // built in
        const Plan at_cut = normkit::plan(p, h200, Strategy::Fused, raised);
        if (c.needed < min_blocks) EXPECT_EQ(at_cut.describe(), wide.describe()) << where;
        const Plan cached = normkit::plan(p, h200, Strategy::Fused, every_beyond);
        if (c.needed >= min_blocks) EXPECT_EQ(at_cut.describe(), cached.describe()) << where;
        const RowShape& r = cached.row;
        EXPECT_EQ(r.items, kMaxFusedItems) << where << ": " << cached.describe();
        EXPECT_EQ(r.threads_per_row, kFusedBlockThreads) << where;
        // from the blocks the row needs up to 16, the size the H200 holds the most clusters of (9 of 9
        // blocks, 7 of each of 10..16), of those the most blocks; slices on whole 128-byte lines, covering the row
        EXPECT_EQ(r.split, c.needed == 9 ? 9 : kMaxFusedSplitBlocks) << where;
        EXPECT_GE(std::int64_t(r.split) * r.slice_cols, c.n) << where;
        EXPECT_EQ(r.slice_cols * std::int64_t(dtype_size(c.t)) % 128, 0) << where;
        EXPECT_LE(std::int64_t(r.slice_cols), std::int64_t(kFusedBlockThreads) * kMaxFusedItems * r.vec) << where;
        EXPECT_EQ(r.blocks, std::int64_t(h200.sm_count) / r.split * r.split) << where;
        EXPECT_EQ(cached.partial_rows, h200.sm_count / r.split) << where;
        // the 2-item walk: staged with its statistics, not deferred, three stages from
        // fused_split_extra_stage_min_split blocks, no weights in shared memory
        EXPECT_EQ(r.stages, 3) << where;
        EXPECT_FALSE(cached.deferred_sums) << where;
        EXPECT_EQ(r.smem_bytes, 3 * std::int64_t(kFusedBlockThreads) * (2 * kMaxFusedItems * 16 + 2 * 4)) << where;
        // auto fuses it with dX (4096 rows: x above fused_split_min_bytes)
        EXPECT_EQ(normkit::plan(p, h200, Strategy::Auto, every_beyond).strategy, Strategy::Fused) << where;
        // a device without clusters above the portable size keeps the wide layout
        const Plan portable = normkit::plan(p, portable_only, Strategy::Fused, every_beyond);
        EXPECT_EQ(portable.row.items, kFusedWideItems) << where << ": " << portable.describe();
        EXPECT_EQ(portable.describe(), normkit::plan(p, portable_only, Strategy::Fused, raised).describe()) << where;
        EXPECT_EQ(portable.describe(), normkit::plan(p, portable_only, Strategy::Fused, portable_cached).describe())
            << where;
      }
    }
  }
  // auto: 2-item rows over a cluster above the portable size keep the 2-item rows' size rule (x from
  // fused_split_min_bytes, 24 MiB; fp32 rows fp32_fused_split_min_bytes, 16 MiB), measured there (H100,
  // entry 91: LayerNorm bf16 131072 columns, fused 0.94x tiled at 128 rows, 1.21x at 64)
  const auto auto_of = [&](std::int64_t m, std::int64_t n, DType t, bool rms) {
    Problem p = backward(m, n, t, {true, true, !rms});
    if (rms) p.op = Op::RmsNormBackward;
    return normkit::plan(p, h200, Strategy::Auto, raised).strategy;
  };
  for (bool rms : {false, true}) {
    EXPECT_EQ(auto_of(96, 131072, DType::BF16, rms), Strategy::Fused) << rms;  // 24 MiB
    EXPECT_NE(auto_of(95, 131072, DType::BF16, rms), Strategy::Fused) << rms;
    EXPECT_EQ(auto_of(64, 65536, DType::F32, rms), Strategy::Fused) << rms;  // 16 MiB
    EXPECT_NE(auto_of(63, 65536, DType::F32, rms), Strategy::Fused) << rms;
  }
  // rows a portable cluster of 2-item blocks holds take no cluster above it, whatever the keys; rows beyond
  // 16 of them stay wide
  for (std::int64_t n : {8200LL, 40960LL, 57344LL, 65536LL, 131080LL, 262144LL}) {
    const Problem p = backward(4096, n, DType::BF16, full);
    const std::string portable_plan = normkit::plan(p, h200, Strategy::Fused, portable_cached).describe();
    EXPECT_EQ(normkit::plan(p, h200, Strategy::Fused, raised).describe(), portable_plan) << "N = " << n;
    EXPECT_EQ(normkit::plan(p, h200, Strategy::Fused, every_beyond).describe(), portable_plan) << "N = " << n;
  }
  // the keys are read, from 2 to 16
  const std::string path = ::testing::TempDir() + "normkit_fused_cached_split_max.txt";
  for (const char* key : {"fused_cached_split_max", "fused_cached_split_min_beyond_portable"}) {
    { std::ofstream(path) << key << " = 9\n"; }
    const PlannerTable read = load_planner_table(path);
    EXPECT_EQ(std::string(key) == "fused_cached_split_max" ? read.fused_cached_split_max
                                                           : read.fused_cached_split_min_beyond_portable,
              9)
        << key;
    for (const char* bad : {"1", "17"}) {
      { std::ofstream(path) << key << " = " << bad << "\n"; }
      EXPECT_THROW(load_planner_table(path), Error) << key << " = " << bad;
    }
  }
  std::remove(path.c_str());
}

TEST(Planner, RowShapesCoverTheRowWithinTheRegisterBudget) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (std::int64_t n : {1LL, 2LL, 3LL, 7LL, 8LL, 64LL, 100LL, 512LL, 768LL, 1000LL, 1001LL, 1024LL, 1536LL, 2049LL,
                           3584LL, 4096LL, 8192LL, 16384LL, 65536LL, 131072LL, 262144LL}) {
      Problem p = backward(1000, n, t, {true, true, true});
      for (Op op : {Op::LayerNormForward, Op::LayerNormBackward}) {
        p.op = op;
        const Plan plan = normkit::plan(p, DeviceFacts::h200(), is_backward(op) ? Strategy::Tiled : Strategy::Auto);
        const RowShape& r = plan.row;
        const std::string where = std::string(dtype_name(t)) + " N = " + std::to_string(n);
        EXPECT_TRUE(r.threads_per_row >= 1 && (r.threads_per_row & (r.threads_per_row - 1)) == 0) << where;
        EXPECT_LE(r.block_threads(), 1024) << where;
        EXPECT_EQ(r.block_threads() % 32 == 0 || r.block_threads() < 32, true) << where;
        if (r.items > 0) {
          EXPECT_GE(std::int64_t(r.items) * r.threads_per_row * r.vec * r.split, n) << where;
          // the forward's wide split blocks: kSplitItems (or on the longest rows kWideForwardSplitItems)
          // in kWideSplitBlockThreads threads, one block per SM (its instances' launch bounds): 128
          // registers a thread, as 4 items in 256
          if (r.split > 1 && r.threads_per_row == kWideSplitBlockThreads) {
            EXPECT_TRUE(r.items == kSplitItems || (r.items == kWideForwardSplitItems && !is_backward(op))) << where;
          } else if (r.block_rows) {  // its instances' launch bounds are their block's width
            EXPECT_LE(r.block_threads(), kBlockRowMaxThreads) << where;
            EXPECT_LE(r.items, kBlockRowMaxItems) << where;
          } else {
            EXPECT_LE(r.block_threads(), max_row_threads(r.items, r.vec)) << where;
          }
        }
        if (r.split > 1) {  // the slices cover the row, every block has columns
          EXPECT_GE(std::int64_t(r.slice_cols) * r.split, n) << where;
          EXPECT_LT(std::int64_t(r.slice_cols) * (r.split - 1), n) << where;
          EXPECT_LE(r.slice_cols, std::int64_t(r.items) * r.threads_per_row * r.vec) << where;
          EXPECT_EQ(r.blocks % r.split, 0) << where;
        }
        EXPECT_EQ(n % r.vec, 0) << where;
        EXPECT_GE(r.blocks, 1) << where;
      }
    }
  }
}

// dX rows too long for one block's registers are split over a thread-block cluster: blocks of
// kSplitBlockThreads threads caching kSplitItems 16-byte vectors of their slice. The forward has its
// own rule (ForwardRowsTooLongForOneBlockAreSplitOverAClusterToo).
TEST(Planner, RowsTooLongForOneBlockAreSplitOverACluster) {
  const DeviceFacts h200 = DeviceFacts::h200();
  auto row_of = [&](Op op, std::int64_t m, std::int64_t n, DType t, const PlannerTable& table = PlannerTable{},
                    const DeviceFacts& device = DeviceFacts::h200()) {
    Problem p = backward(m, n, t, {true, true, !is_rms(op)});
    p.op = op;
    // the dX kernel's rule: an unfused strategy (auto fuses these rows, FusedRowsAreSplitOverACluster)
    return normkit::plan(p, device, is_backward(op) ? Strategy::Tiled : Strategy::Auto, table).row;
  };
  // threads 512: the wide split (kWideSplitBlockThreads, row_split_wide_max), one block per SM
  const struct { std::int64_t n; DType t; int split; int slice; int threads; } cases[] = {
      {8192, DType::BF16, 1, 0, 0},          {8200, DType::BF16, 2, 4160, 256},     {16384, DType::F16, 2, 8192, 256},
      {12296, DType::BF16, 2, 6208, 256},    {65536, DType::BF16, 8, 8192, 256},    {57352, DType::BF16, 8, 7232, 256},
      {4096, DType::F32, 1, 0, 0},           {20000, DType::F32, 5, 4000, 256},     {32768, DType::F32, 8, 4096, 256},
      {65544, DType::BF16, 5, 13120, 512},   {131072, DType::BF16, 8, 16384, 512},  {262144, DType::BF16, 16, 16384, 512},
      {65536, DType::F32, 8, 8192, 512},     {131072, DType::F32, 16, 8192, 512},   {262152, DType::BF16, 1, 0, 0},
      {131080, DType::F32, 1, 0, 0}};
  for (const auto& c : cases) {
    for (Op op : {Op::LayerNormForward, Op::RmsNormForward, Op::LayerNormBackward, Op::RmsNormBackward}) {
      const RowShape r = row_of(op, 2048, c.n, c.t);
      const std::string where = std::string(op_name(op)) + " " + dtype_name(c.t) + " N = " + std::to_string(c.n);
      if (!is_backward(op)) continue;
      EXPECT_EQ(r.split, c.split) << where;
      if (c.split > 1) {
        EXPECT_EQ(r.slice_cols, c.slice) << where;
        EXPECT_EQ(r.items, kSplitItems) << where;
        EXPECT_EQ(r.threads_per_row, c.threads) << where;
        EXPECT_EQ(r.rows_per_block, 1) << where;
        const int resident = c.threads == kSplitBlockThreads ? 2 : 1;  // blocks per SM the launch bounds keep
        EXPECT_EQ(r.blocks, std::int64_t(h200.sm_count) * resident / c.split * c.split) << where;
        EXPECT_GT(r.stages, 1) << where;
        // the stages fit the shared memory of the resident blocks
        EXPECT_LE(r.smem_bytes * resident, h200.smem_per_sm) << where;
      } else if (c.n > 8192 / (c.t == DType::F32 ? 2 : 1)) {
        EXPECT_EQ(r.items, 0) << where;  // longer than sixteen wide blocks hold: streamed by one block
      }
    }
  }
  // fewer rows than clusters: one cluster per row; a walk of one row per cluster is not staged
  EXPECT_EQ(row_of(Op::LayerNormBackward, 7, 65536, DType::BF16).blocks, 7 * 8);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 1, 262144, DType::BF16).blocks, 16);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 1, 262144, DType::BF16).stages, 0);
  EXPECT_EQ(row_of(Op::RmsNormBackward, 7, 262144, DType::BF16).blocks, 7 * 16);
  // the wide split: capped by its key (0 or 1: streamed) and by the clusters the device launches
  PlannerTable wide_eight, wide_off;
  wide_eight.row_split_wide_max = 8;
  wide_off.row_split_wide_max = 1;
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 131072, DType::BF16, wide_eight).split, 8);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 262144, DType::BF16, wide_eight).items, 0);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 131072, DType::BF16, wide_off).items, 0);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 65536, DType::BF16, wide_off).split, 8);  // the portable split stays
  DeviceFacts portable_only = h200;
  portable_only.max_nonportable_cluster_blocks = 0;
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 131072, DType::BF16, PlannerTable{}, portable_only).split, 8);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 262144, DType::BF16, PlannerTable{}, portable_only).items, 0);
  // the table, the device and unaligned rows turn it off: streamed
  PlannerTable no_split;
  no_split.row_split_max = 1;
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 16384, DType::BF16, no_split).split, 1);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 16384, DType::BF16, no_split).items, 0);
  PlannerTable four;
  four.row_split_max = 4;
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 32768, DType::BF16, four).split, 4);
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 65536, DType::BF16, four).split, 1);
  DeviceFacts no_clusters = h200;
  no_clusters.max_cluster_blocks = 0;
  EXPECT_EQ(row_of(Op::LayerNormBackward, 2048, 16384, DType::BF16, PlannerTable{}, no_clusters).split, 1);
  Problem unaligned = backward(2048, 16384, DType::BF16, {true, true, true});
  unaligned.rows_vector_aligned = false;
  EXPECT_EQ(normkit::plan(unaligned, h200).row.split, 1);
  // gamma/beta only: no row kernel, nothing split; the plan names the split
  EXPECT_EQ(normkit::plan(backward(2048, 65536, DType::BF16, {false, true, true}), h200).row.split, 1);
  EXPECT_NE(normkit::plan(backward(2048, 65536, DType::BF16, {true, true, true}), h200).describe().find("split=8"),
            std::string::npos);
  // the table's caps are checked
  const std::string path = ::testing::TempDir() + "normkit_split_table.txt";
  { std::ofstream(path) << "row_split_max = 16\n"; }
  EXPECT_THROW(load_planner_table(path), Error);
  { std::ofstream(path) << "row_split_wide_max = 8\n"; }
  EXPECT_EQ(load_planner_table(path).row_split_wide_max, 8);
  { std::ofstream(path) << "row_split_wide_max = 17\n"; }
  EXPECT_THROW(load_planner_table(path), Error);
  std::remove(path.c_str());
}

// Forward rows too long for one block, from forward_split_min_vectors (8192) vectors: the dX kernel's
// blocks (kSplitBlockThreads x kSplitItems vectors) up to a portable cluster, then
// kWideSplitBlockThreads-thread blocks over clusters of up to 16; the staged walk holds one stage more
// than it copies ahead (its previous row waits for the cluster's values). docs/NOTES.md entry 29.
TEST(Planner, ForwardRowsTooLongForOneBlockAreSplitOverAClusterToo) {
  const DeviceFacts h200 = DeviceFacts::h200();
  // (rows of up to 2048 vectors take one block a row first: off here, ForwardRowsOfABlockTakeTheBlockRowWalk)
  // (the longest rows' 8-vector blocks off here except where nothing else holds the row:
  // ForwardWideSplitBlocksCacheEightVectorsAThreadOnTheLongestRows)
  const PlannerTable four_vectors = four_vector_wide_split();
  auto forward_row = [](std::int64_t m, std::int64_t n, DType t, bool rms = false,
                        const PlannerTable& table = four_vector_wide_split(), const DeviceFacts& device = DeviceFacts::h200()) {
    Problem p = backward(m, n, t);
    p.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
    return normkit::plan(p, device, Strategy::Auto, table).row;
  };
  // split 0: streamed (rows of fewer than 8192 vectors that one block cannot cache); 1: cached by one block
  const struct { std::int64_t n; DType t; int split, slice, threads; } cases[] = {
      {8192, DType::BF16, 1, 0, 0},          {8200, DType::BF16, 0, 0, 0},          {16384, DType::F16, 0, 0, 0},
      {57352, DType::BF16, 0, 0, 0},         {65536, DType::BF16, 8, 8192, 256},    {65544, DType::BF16, 5, 13120, 512},
      {131072, DType::BF16, 8, 16384, 512},  {262144, DType::BF16, 16, 16384, 512}, {4096, DType::F32, 1, 0, 0},
      {20000, DType::F32, 0, 0, 0},          {32768, DType::F32, 8, 4096, 256},     {65536, DType::F32, 8, 8192, 512},
      {131072, DType::F32, 16, 8192, 512}};
  for (const auto& c : cases) {
    for (bool rms : {false, true}) {
      // LayerNorm splits 16-bit rows (32 elements a thread) as RMSNorm does; a table can keep them
      // streamed (forward_split_ln_max_thread_elements = 16: fp32 rows only)
      const bool ln_16bit = !rms && c.t != DType::F32 && c.split > 1;
      PlannerTable fp32_only = four_vectors;
      fp32_only.forward_split_ln_max_thread_elements = 16;
      if (ln_16bit) EXPECT_EQ(forward_row(2048, c.n, c.t, rms, fp32_only).items, 0) << c.n;
      const RowShape r = forward_row(2048, c.n, c.t, rms);
      const std::string where = std::string(rms ? "rms " : "ln ") + dtype_name(c.t) + " N = " + std::to_string(c.n);
      EXPECT_EQ(r.split, std::max(c.split, 1)) << where;
      if (c.split <= 1) {
        EXPECT_EQ(r.items > 0, c.split == 1) << where;  // cached by one block, or streamed
        continue;
      }
      EXPECT_EQ(r.slice_cols, c.slice) << where;
      EXPECT_EQ(r.items, kSplitItems) << where;
      EXPECT_EQ(r.threads_per_row, c.threads) << where;
      EXPECT_EQ(r.rows_per_block, 1) << where;
      const int resident = c.threads == kSplitBlockThreads ? 2 : 1;  // blocks per SM the launch bounds keep
      EXPECT_EQ(r.blocks, std::int64_t(h200.sm_count) * resident / c.split * c.split) << where;
      // 32 KB of rows a stage per SM: two stages (row_stage_bytes_per_sm), plus the one the deferred walk holds
      EXPECT_EQ(r.stages, 3) << where;
      EXPECT_EQ(r.smem_bytes, 3 * std::int64_t(c.threads) * kSplitItems * 16) << where;
    }
  }
  // (rows 16 such blocks cannot hold take 8 vectors a thread: 262152 columns over 9 blocks; longer than
  // 16 blocks of 4096 vectors, streamed)
  EXPECT_EQ(forward_row(2048, 262152, DType::BF16, true).split, 9);
  EXPECT_EQ(forward_row(2048, 262152, DType::BF16, true).items, kWideForwardSplitItems);
  EXPECT_EQ(forward_row(2048, 524296, DType::BF16, true).split, 1);
  EXPECT_EQ(forward_row(2048, 524296, DType::BF16, true).items, 0);
  // fewer rows than clusters: one cluster per row; a walk of one row per cluster is not staged
  EXPECT_EQ(forward_row(7, 65536, DType::BF16, true).blocks, 7 * 8);
  EXPECT_EQ(forward_row(1, 262144, DType::BF16, true).blocks, 16);
  EXPECT_EQ(forward_row(1, 262144, DType::BF16, true).stages, 0);
  // the table: off, from fewer vectors, or capped (4: the wide blocks take 65536 16-bit columns in four)
  PlannerTable off = four_vectors, four = off, eight = off, shorter = off;
  off.forward_split_max = 1;
  four.forward_split_max = 4;
  four.forward_split_min_vectors = eight.forward_split_min_vectors = shorter.forward_split_min_vectors = 1025;
  eight.forward_split_max = 8;
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, off).split, 1);
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, off).items, 0);
  EXPECT_EQ(forward_row(2048, 16384, DType::F16, true, shorter).split, 2);
  EXPECT_EQ(forward_row(2048, 16384, DType::F16, true, shorter).slice_cols, 8192);
  EXPECT_EQ(forward_row(2048, 57352, DType::BF16, true, shorter).slice_cols, 7232);  // a short last slice
  EXPECT_EQ(forward_row(2048, 20000, DType::F32, false, shorter).split, 5);
  EXPECT_EQ(forward_row(2048, 8200, DType::BF16, true, shorter).split, 2);
  EXPECT_EQ(forward_row(2048, 16384, DType::F16, false, shorter).split, 2);  // LayerNorm 16-bit too
  shorter.forward_split_ln_max_thread_elements = 16;
  EXPECT_EQ(forward_row(2048, 16384, DType::F16, false, shorter).items, 0);  // fp32 only: streamed
  EXPECT_EQ(forward_row(2048, 16384, DType::F32, false, shorter).split, 4);
  EXPECT_EQ(forward_row(2048, 32768, DType::BF16, true, four).split, 4);
  EXPECT_EQ(forward_row(2048, 32768, DType::BF16, true, four).threads_per_row, kSplitBlockThreads);
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, four).split, 4);
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, four).threads_per_row, kWideSplitBlockThreads);
  EXPECT_EQ(forward_row(2048, 131072, DType::BF16, true, eight).split, 8);
  // (262144 16-bit columns in 8 blocks: only the 8-vector wide blocks hold them, and they do at any M)
  EXPECT_EQ(forward_row(2048, 262144, DType::BF16, true, eight).items, kWideForwardSplitItems);
  // the device: no clusters, or no clusters above the portable size
  DeviceFacts no_clusters = h200, portable_only = h200;
  no_clusters.max_cluster_blocks = 0;
  portable_only.max_nonportable_cluster_blocks = 0;
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, PlannerTable{}, no_clusters).items, 0);
  EXPECT_EQ(forward_row(2048, 131072, DType::BF16, true, PlannerTable{}, portable_only).split, 8);
  EXPECT_EQ(forward_row(2048, 262144, DType::BF16, true, PlannerTable{}, portable_only).items, kWideForwardSplitItems);
  EXPECT_EQ(forward_row(2048, 524288, DType::BF16, true, PlannerTable{}, portable_only).items, 0);
  // unaligned rows are streamed; the plan names the split
  Problem unaligned = backward(2048, 65536, DType::BF16);
  unaligned.op = Op::RmsNormForward;
  unaligned.rows_vector_aligned = false;
  EXPECT_EQ(normkit::plan(unaligned, h200).row.split, 1);
  Problem wide = backward(2048, 262144, DType::BF16);
  wide.op = Op::RmsNormForward;
  EXPECT_NE(normkit::plan(wide, h200).describe().find("split=8"), std::string::npos) << normkit::plan(wide, h200).describe();
  // the key is read, and capped at the largest cluster normkit launches
  const std::string path = ::testing::TempDir() + "normkit_forward_split_table.txt";
  { std::ofstream(path) << "forward_split_max = 4\n"; }
  EXPECT_EQ(load_planner_table(path).forward_split_max, 4);
  { std::ofstream(path) << "forward_split_max = 17\n"; }
  try {
    load_planner_table(path);
    ADD_FAILURE() << "forward_split_max = 17 must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward_split_max"), std::string::npos) << e.what();
  }
  std::remove(path.c_str());
}

// The forward's wide split blocks (kWideSplitBlockThreads threads) cache kWideForwardSplitItems vectors a
// thread for rows of more than a portable cluster of kSplitItems blocks (forward_split_wide_items_min_vectors)
// from forward_split_wide_items_min_rows rows, and for rows kSplitItems blocks cannot hold at any M;
// RMSNorm and 16-bit LayerNorm only. forward_split_wide_min_vectors sends rows the portable layout holds
// to the wide blocks. docs/NOTES.md entry 60.
TEST(Planner, ForwardWideSplitBlocksCacheEightVectorsAThreadOnTheLongestRows) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const PlannerTable defaults = without_block_rows();
  auto forward_row = [](std::int64_t m, std::int64_t n, DType t, bool rms, const PlannerTable& table,
                        const DeviceFacts& device = DeviceFacts::h200()) {
    Problem p = backward(m, n, t);
    p.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
    return normkit::plan(p, device, Strategy::Auto, table).row;
  };
  // 262144 16-bit columns from 128 rows: 8 blocks of 512 threads x 8 vectors, 16 clusters of one block an
  // SM; three stages of 64 KB (two copied ahead, the one the deferred walk holds)
  for (bool rms : {true, false}) {
    const RowShape r = forward_row(4096, 262144, DType::BF16, rms, defaults);
    EXPECT_EQ(r.split, 8) << rms;
    EXPECT_EQ(r.items, kWideForwardSplitItems) << rms;
    EXPECT_EQ(r.threads_per_row, kWideSplitBlockThreads) << rms;
    EXPECT_EQ(r.slice_cols, 32768) << rms;
    EXPECT_EQ(r.blocks, std::int64_t(h200.sm_count) / 8 * 8) << rms;
    EXPECT_EQ(r.stages, 3) << rms;
    EXPECT_EQ(r.smem_bytes, 3 * std::int64_t(kWideSplitBlockThreads) * kWideForwardSplitItems * 16) << rms;
    EXPECT_EQ(forward_row(128, 262144, DType::F16, rms, defaults).items, kWideForwardSplitItems) << rms;
    // fewer rows: 4 vectors over 16 blocks (more clusters at once do not pay for the longer rows)
    EXPECT_EQ(forward_row(127, 262144, DType::BF16, rms, defaults).items, kSplitItems) << rms;
    EXPECT_EQ(forward_row(127, 262144, DType::BF16, rms, defaults).split, 16) << rms;
    // 131072 16-bit columns: a portable cluster of 4-vector blocks holds them
    EXPECT_EQ(forward_row(4096, 131072, DType::BF16, rms, defaults).items, kSplitItems) << rms;
    EXPECT_EQ(forward_row(4096, 131072, DType::BF16, rms, defaults).split, 8) << rms;
  }
  // fp32: RMSNorm 131072 columns over 8 blocks from 128 rows; 262144 (which 4-vector blocks cannot hold)
  // over 16 at any M; LayerNorm fp32 keeps 4 vectors (the 8-vector instance spills): 16 blocks, or streamed
  EXPECT_EQ(forward_row(300, 131072, DType::F32, true, defaults).split, 8);
  EXPECT_EQ(forward_row(300, 131072, DType::F32, true, defaults).items, kWideForwardSplitItems);
  EXPECT_EQ(forward_row(64, 131072, DType::F32, true, defaults).split, 16);
  EXPECT_EQ(forward_row(1, 262144, DType::F32, true, defaults).split, 16);
  EXPECT_EQ(forward_row(1, 262144, DType::F32, true, defaults).items, kWideForwardSplitItems);
  EXPECT_EQ(forward_row(300, 131072, DType::F32, false, defaults).split, 16);
  EXPECT_EQ(forward_row(300, 131072, DType::F32, false, defaults).items, kSplitItems);
  EXPECT_EQ(forward_row(300, 262144, DType::F32, false, defaults).items, 0);
  // 65540 fp32 columns (16385 vectors) in 5 blocks of 8 vectors, slices of whole lines, a short last one
  EXPECT_EQ(forward_row(300, 65540, DType::F32, true, defaults).split, 5);
  EXPECT_EQ(forward_row(300, 65540, DType::F32, true, defaults).slice_cols, 13120);
  // the keys: 8 vectors on shorter rows and fewer of them; off (no row of 2^62 vectors)
  PlannerTable everywhere = defaults, off = defaults;
  everywhere.forward_split_wide_items_min_vectors = 1;
  everywhere.forward_split_wide_items_min_rows = 0;
  off.forward_split_wide_items_min_vectors = std::int64_t(1) << 62;
  EXPECT_EQ(forward_row(64, 131072, DType::BF16, true, everywhere).split, 4);
  EXPECT_EQ(forward_row(64, 131072, DType::BF16, true, everywhere).items, kWideForwardSplitItems);
  EXPECT_EQ(forward_row(4096, 262144, DType::BF16, true, off).split, 16);
  EXPECT_EQ(forward_row(4096, 262144, DType::BF16, false, off).items, kSplitItems);
  EXPECT_EQ(forward_row(1, 262144, DType::F32, true, off).items, kWideForwardSplitItems);  // the only layout
  // rows the portable layout holds keep it unless forward_split_wide_min_vectors sends them on
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, everywhere).threads_per_row, kSplitBlockThreads);
  PlannerTable wide_from = everywhere;
  wide_from.forward_split_wide_min_vectors = 8192;
  wide_from.forward_split_min_vectors = 4096;  // (65528 columns, 8191 vectors, split at all)
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, wide_from).split, 2);
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, wide_from).threads_per_row, kWideSplitBlockThreads);
  EXPECT_EQ(forward_row(2048, 65528, DType::BF16, true, wide_from).threads_per_row, kSplitBlockThreads);
  wide_from.forward_split_wide_items_min_vectors = 16385;
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, wide_from).split, 4);
  EXPECT_EQ(forward_row(2048, 65536, DType::BF16, true, wide_from).items, kSplitItems);
  // a device without clusters above the portable size splits 262144 16-bit columns over 8 such blocks
  DeviceFacts portable_only = h200;
  portable_only.max_nonportable_cluster_blocks = 0;
  EXPECT_EQ(forward_row(64, 262144, DType::BF16, true, defaults, portable_only).split, 8);
  EXPECT_EQ(forward_row(64, 262144, DType::BF16, false, defaults, portable_only).items, kWideForwardSplitItems);
  // the keys are read
  const std::string path = ::testing::TempDir() + "normkit_forward_wide_items_table.txt";
  {
    std::ofstream(path) << "forward_split_wide_items_min_vectors = 4096\nforward_split_wide_items_min_rows = 7\n"
                           "forward_split_wide_min_vectors = 8192\n";
  }
  const PlannerTable loaded = load_planner_table(path);
  EXPECT_EQ(loaded.forward_split_wide_items_min_vectors, 4096);
  EXPECT_EQ(loaded.forward_split_wide_items_min_rows, 7);
  EXPECT_EQ(loaded.forward_split_wide_min_vectors, 8192);
  std::remove(path.c_str());
}

// Forward rows of kShortRowMaxLanes + 1 .. kBlockRowMaxThreads x kBlockRowMaxItems 16-byte vectors take
// the one-row-a-block walk while x has fewer than forward_block_rows_below_bytes: the next power of two
// of vectors / forward_block_rows_items_target threads (64 .. 512), more vectors a thread where the row
// needs them, a block per row; shorter, longer and unvectorised rows, larger x and the backward do not.
TEST(Planner, ForwardRowsOfABlockTakeTheBlockRowWalk) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const PlannerTable defaults;
  auto forward_plan = [&](std::int64_t m, std::int64_t n, DType t, bool rms = false, const PlannerTable& table = PlannerTable{}) {
    Problem p = backward(m, n, t);
    p.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
    return normkit::plan(p, h200, Strategy::Auto, table);
  };
  const struct { std::int64_t m, n; DType t; int threads, items; } cases[] = {
      // forward_block_rows_items_target (2) vectors a thread, at least kBlockRowMinThreads threads
      {32, 512, DType::F16, 64, 1},      {96, 768, DType::F16, 64, 2},     {192, 1024, DType::BF16, 64, 2},
      {1024, 768, DType::F16, 64, 2},    {7, 264, DType::BF16, 64, 1},     {5, 200, DType::F32, 64, 1},
      {16, 1032, DType::BF16, 128, 2},   {64, 4096, DType::BF16, 256, 2},  {3, 4104, DType::BF16, 512, 2},
      // rows of more than 1024 vectors: 4 vectors a thread at kBlockRowMaxThreads
      {4, 8192, DType::F16, 512, 2},     {2, 12296, DType::F16, 512, 4},   {3, 16384, DType::BF16, 512, 4},
      {1, 8192, DType::F32, 512, 4},     {2048, 1024, DType::F32, 128, 2}, {131072, 4096, DType::F32, 512, 2}};
  for (const auto& c : cases) {
    for (bool rms : {false, true}) {
      const Plan plan = forward_plan(c.m, c.n, c.t, rms);
      const std::string where = std::string(rms ? "rms " : "ln ") + dtype_name(c.t) + " " + std::to_string(c.m) +
                                " x " + std::to_string(c.n) + ": " + plan.describe();
      ASSERT_TRUE(plan.row.block_rows) << where;
      EXPECT_FALSE(plan.row.short_rows || plan.row.packed) << where;
      EXPECT_EQ(plan.row.threads_per_row, c.threads) << where;
      EXPECT_EQ(plan.row.items, c.items) << where;
      EXPECT_EQ(plan.row.rows_per_block, 1) << where;
      EXPECT_EQ(plan.row.block_threads(), c.threads) << where;
      EXPECT_EQ(plan.row.vec, 16 / int(dtype_size(c.t))) << where;
      EXPECT_EQ(plan.row.blocks, c.m) << where;
      EXPECT_EQ(plan.row.stages, 0) << where;
      EXPECT_EQ(plan.row.split, 1) << where;
      EXPECT_NE(plan.describe().find(" block-rows"), std::string::npos) << where;
    }
  }
  // rows of a warp's vectors or fewer, of more than 2048, unvectorised rows: other walks
  EXPECT_FALSE(forward_plan(64, 256, DType::BF16).row.block_rows);   // 32 vectors
  EXPECT_FALSE(forward_plan(64, 128, DType::F32).row.block_rows);    // 32 vectors
  EXPECT_FALSE(forward_plan(2, 16392, DType::BF16).row.block_rows);  // 2049 vectors
  EXPECT_FALSE(forward_plan(64, 1001, DType::BF16).row.block_rows);  // unvectorised
  // below forward_block_rows_below_bytes of x only
  const std::int64_t below = defaults.forward_block_rows_below_bytes;
  ASSERT_GT(below, 0);
  ASSERT_EQ(below % 2048, 0);
  EXPECT_TRUE(forward_plan(below / 2048 - 1, 1024, DType::BF16).row.block_rows);
  EXPECT_FALSE(forward_plan(below / 2048, 1024, DType::BF16).row.block_rows);
  EXPECT_FALSE(forward_plan(below / 2048, 1024, DType::BF16, true).row.block_rows);
  // 16-bit LayerNorm rows of more than kBlockRowMaxThreads vectors: below ln_forward_block_rows_wide_below_bytes
  const std::int64_t wide_below = defaults.ln_forward_block_rows_wide_below_bytes;
  ASSERT_EQ(wide_below % 16384, 0);
  EXPECT_TRUE(forward_plan(wide_below / 16384 - 1, 8192, DType::BF16).row.block_rows);
  EXPECT_FALSE(forward_plan(wide_below / 16384, 8192, DType::BF16).row.block_rows);
  EXPECT_GT(forward_plan(wide_below / 16384, 8192, DType::BF16).row.stages, 0);   // the staged walk
  EXPECT_TRUE(forward_plan(wide_below / 16384, 8192, DType::BF16, true).row.block_rows);  // RMSNorm
  EXPECT_TRUE(forward_plan(wide_below / 16384, 4096, DType::F32).row.block_rows);         // fp32
  EXPECT_TRUE(forward_plan(wide_below / 8192, 4096, DType::BF16).row.block_rows);         // 512 vectors
  // ... at 2 vectors a thread; at 4 (from ln_forward_block_rows_four_items_min_bytes, or rows of more
  // than 1024 vectors) at any size below forward_block_rows_below_bytes
  const std::int64_t four_items_from = defaults.ln_forward_block_rows_four_items_min_bytes;
  ASSERT_GT(four_items_from, wide_below);
  ASSERT_EQ(four_items_from % 16384, 0);
  const std::int64_t packed_above = std::int64_t(h200.sm_count) * defaults.forward_block_rows_packed_min_rows_per_sm;
  for (DType wide_type : {DType::BF16, DType::F16}) {
    const std::string where = dtype_name(wide_type);
    EXPECT_FALSE(forward_plan(four_items_from / 16384 - 1, 8192, wide_type).row.block_rows) << where;
    const Plan wide_four = forward_plan(four_items_from / 16384, 8192, wide_type);
    EXPECT_TRUE(wide_four.row.block_rows) << where;
    EXPECT_EQ(wide_four.row.items, kBlockRowMaxItems) << where;
    EXPECT_EQ(wide_four.row.threads_per_row, 256) << where;
    EXPECT_TRUE(forward_plan(16384, 8192, wide_type).row.block_rows) << where;  // 256 MiB
    for (std::int64_t rows : {wide_below / 32768, 4 * wide_below / 32768, std::int64_t(8192)}) {
      const Plan longest = forward_plan(rows, 16384, wide_type);  // 2048 vectors: 512 x 4
      EXPECT_TRUE(longest.row.block_rows) << where << " " << rows;
      EXPECT_EQ(longest.row.items, kBlockRowMaxItems) << where << " " << rows;
      EXPECT_EQ(longest.row.threads_per_row, kBlockRowMaxThreads) << where << " " << rows;
    }
    EXPECT_FALSE(forward_plan(below / 16384, 8192, wide_type).row.block_rows) << where;
    // ... in their packed instance for more rows than forward_block_rows_packed_min_rows_per_sm a SM
    EXPECT_TRUE(wide_four.row.block_rows_packed) << where;
    EXPECT_NE(wide_four.describe().find(" block-rows packed"), std::string::npos) << where;
    EXPECT_TRUE(forward_plan(packed_above + 1, 16384, wide_type).row.block_rows_packed) << where;
    EXPECT_FALSE(forward_plan(packed_above, 16384, wide_type).row.block_rows_packed) << where;
    EXPECT_TRUE(forward_plan(packed_above, 16384, wide_type).row.block_rows) << where;
    EXPECT_EQ(forward_plan(packed_above, 16384, wide_type).describe().find("packed"), std::string::npos) << where;
    // only LayerNorm 16-bit blocks of kBlockRowMaxItems vectors a thread and more than kBlockRowMaxThreads
    // vectors have the instance
    EXPECT_FALSE(forward_plan(packed_above + 1, 16384, wide_type, true).row.block_rows_packed) << where;  // RMSNorm
    EXPECT_FALSE(forward_plan(packed_above + 1, 8192, wide_type).row.block_rows_packed) << where;  // 512 x 2
    EXPECT_FALSE(forward_plan(16384, 4096, wide_type).row.block_rows_packed) << where;            // 128 x 4
  }
  EXPECT_FALSE(forward_plan(2048, 8192, DType::F32).row.block_rows_packed);  // fp32: 2048 vectors, 512 x 4
  EXPECT_TRUE(forward_plan(2048, 8192, DType::F32).row.block_rows);
  for (bool rms : {false, true})
    for (int threads : {64, 128, 256, 512})
      for (int items : {1, 2, 4})
        for (int bytes : {2, 4})
          for (int weight_bytes : {bytes, 4})
            EXPECT_EQ(block_rows_packed_instance(rms, bytes, weight_bytes, threads, items),
                      bytes == 2 && (weight_bytes == 4 || (!rms && items == 4 && threads >= 256)))
                << rms << " " << threads << " " << items << " " << bytes << " " << weight_bytes;
  // 16-bit rows with fp32 weights (autocast's mixed precision): every block of them, LayerNorm and
  // RMSNorm, for more rows than SMs and from forward_block_rows_packed_mixed_min_bytes of x (the
  // widest blocks from forward_block_rows_packed_mixed_widest_min_bytes)
  const std::int64_t mixed_from = defaults.forward_block_rows_packed_mixed_min_bytes;
  PlannerTable mixed_any_size;
  mixed_any_size.forward_block_rows_packed_mixed_min_bytes = 0;
  mixed_any_size.forward_block_rows_packed_mixed_widest_min_bytes = 0;
  for (bool rms : {false, true}) {
    for (std::int64_t n : {768, 4096, 8192}) {
      const std::int64_t rows_from = std::max(packed_above + 1, mixed_from / (2 * n) + 1);
      Problem mixed = backward(rows_from, n, DType::BF16);
      mixed.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
      mixed.weight_dtype = DType::F32;
      const Plan mixed_plan = normkit::plan(mixed, h200, Strategy::Auto);
      EXPECT_TRUE(mixed_plan.row.block_rows && mixed_plan.row.block_rows_packed) << mixed_plan.describe();
      mixed.rows = mixed_from / (2 * n) - 1;  // below the bytes: only the widest blocks (their own key, below)
      const Plan just_below = normkit::plan(mixed, h200, Strategy::Auto);
      EXPECT_EQ(just_below.row.block_rows_packed,
                just_below.row.block_rows && just_below.row.threads_per_row == kBlockRowMaxThreads)
          << just_below.describe();
      const Plan below = normkit::plan(mixed, h200, Strategy::Auto, mixed_any_size);
      EXPECT_EQ(below.row.block_rows_packed, below.row.block_rows) << below.describe();  // (8192 LN: staged)
      mixed.rows = packed_above;  // a block an SM or fewer: never
      EXPECT_FALSE(normkit::plan(mixed, h200, Strategy::Auto, mixed_any_size).row.block_rows_packed) << n;
      mixed.weight_dtype = DType::BF16;
      mixed.rows = rows_from;
      // 16-bit weights: only the wide LayerNorm blocks (8192 columns: 256 x 4 from 64 MiB)
      EXPECT_EQ(normkit::plan(mixed, h200, Strategy::Auto).row.block_rows_packed, !rms && n == 8192) << n;
    }
  }
  // The widest blocks (kBlockRowMaxThreads threads: RMSNorm rows of 8192 bf16, 2 vectors a thread)
  // from forward_block_rows_packed_mixed_widest_min_bytes, below the other blocks' bytes
  const std::int64_t widest_from = defaults.forward_block_rows_packed_mixed_widest_min_bytes;
  ASSERT_LT(widest_from, mixed_from);
  Problem widest = backward(widest_from / (2 * 8192), 8192, DType::BF16);
  widest.op = Op::RmsNormForward;
  widest.weight_dtype = DType::F32;
  const Plan widest_plan = normkit::plan(widest, h200, Strategy::Auto);
  EXPECT_TRUE(widest_plan.row.block_rows && widest_plan.row.threads_per_row == kBlockRowMaxThreads &&
              widest_plan.row.block_rows_packed)
      << widest_plan.describe();
  widest.rows -= 1;  // one row below the bytes
  EXPECT_FALSE(normkit::plan(widest, h200, Strategy::Auto).row.block_rows_packed);
  // blocks of fewer threads at the same bytes stay unpacked (4096 columns: 256 threads)
  Problem narrower = backward(widest_from / (2 * 4096), 4096, DType::BF16);
  narrower.op = Op::RmsNormForward;
  narrower.weight_dtype = DType::F32;
  const Plan narrower_plan = normkit::plan(narrower, h200, Strategy::Auto);
  EXPECT_TRUE(narrower_plan.row.block_rows && narrower_plan.row.threads_per_row < kBlockRowMaxThreads &&
              !narrower_plan.row.block_rows_packed)
      << narrower_plan.describe();
  PlannerTable never_packed;
  never_packed.forward_block_rows_packed_min_rows_per_sm = std::int64_t(1) << 40;
  EXPECT_FALSE(forward_plan(16384, 8192, DType::BF16, false, never_packed).row.block_rows_packed);
  EXPECT_TRUE(forward_plan(16384, 8192, DType::BF16, false, never_packed).row.block_rows);
  PlannerTable always_packed;
  always_packed.forward_block_rows_packed_min_rows_per_sm = 0;
  EXPECT_TRUE(forward_plan(1, 16384, DType::BF16, false, always_packed).row.block_rows_packed);
  // rows of at most kBlockRowMinThreads vectors: below forward_block_rows_narrow_below_bytes
  const std::int64_t narrow_below = defaults.forward_block_rows_narrow_below_bytes;
  ASSERT_EQ(narrow_below % 1024, 0);
  EXPECT_TRUE(forward_plan(narrow_below / 1024 - 1, 512, DType::BF16, true).row.block_rows);   // 64 vectors
  EXPECT_FALSE(forward_plan(narrow_below / 1024, 512, DType::BF16, true).row.block_rows);
  EXPECT_FALSE(forward_plan(narrow_below / 528 + 1, 264, DType::BF16).row.block_rows);         // 33 vectors
  EXPECT_TRUE(forward_plan(narrow_below / 1024, 520, DType::BF16).row.block_rows);             // 65 vectors
  EXPECT_TRUE(forward_plan(narrow_below / 1024, 512, DType::F32).row.block_rows);              // 128 vectors
  // 16-bit LayerNorm rows take 4 vectors a thread from ln_forward_block_rows_four_items_min_bytes
  const std::int64_t four_from = defaults.ln_forward_block_rows_four_items_min_bytes;
  ASSERT_EQ(four_from % 8192, 0);
  EXPECT_EQ(forward_plan(four_from / 8192, 4096, DType::BF16).row.items, 4);
  EXPECT_EQ(forward_plan(four_from / 8192, 4096, DType::BF16).row.threads_per_row, 128);
  EXPECT_EQ(forward_plan(four_from / 8192 - 1, 4096, DType::BF16).row.items, 2);
  EXPECT_EQ(forward_plan(four_from / 8192, 4096, DType::BF16, true).row.items, 2);  // RMSNorm: 2
  EXPECT_EQ(forward_plan(four_from / 8192, 2048, DType::F32).row.items, 2);         // fp32: 2
  // never the backward's dX or fused rows
  EXPECT_FALSE(normkit::plan(backward(96, 768, DType::F16, {true, true, true}), h200).row.block_rows);
  EXPECT_FALSE(normkit::plan(backward(96, 768, DType::F16, {true, false, false}), h200).row.block_rows);
  // the table: 0 turns it off, more vectors a thread narrow the blocks (at least kBlockRowMinThreads)
  PlannerTable off;
  off.forward_block_rows_below_bytes = 0;
  EXPECT_FALSE(forward_plan(32, 512, DType::F16, false, off).row.block_rows);
  PlannerTable two;
  two.forward_block_rows_items_target = 2;
  const Plan two_items = forward_plan(13, 4096, DType::F16, false, two);
  EXPECT_TRUE(two_items.row.block_rows);
  EXPECT_EQ(two_items.row.threads_per_row, 256);
  EXPECT_EQ(two_items.row.items, 2);
  PlannerTable four;
  four.forward_block_rows_items_target = 4;
  const Plan narrowest = forward_plan(10, 264, DType::BF16, false, four);  // 33 vectors: 64 threads, 1 item
  EXPECT_EQ(narrowest.row.threads_per_row, kBlockRowMinThreads);
  EXPECT_EQ(narrowest.row.items, 1);
  // both keys are read from a table file; more vectors a thread than an instance has are clamped
  const std::string path = ::testing::TempDir() + "normkit_block_rows_table.txt";
  { std::ofstream(path) << "forward_block_rows_below_bytes = 4096\nforward_block_rows_items_target = 99\n"; }
  const PlannerTable loaded = load_planner_table(path);
  EXPECT_EQ(loaded.forward_block_rows_below_bytes, 4096);
  EXPECT_EQ(loaded.forward_block_rows_items_target, kBlockRowMaxItems);
  std::remove(path.c_str());
}

// Forward rows of at most 8 16-byte vectors (short_row_max_vectors, kShortRowMaxLanes) take the
// short-row walk from forward_short_rows_min_bytes of x: one vector a lane, the next power of two of
// lanes a row, kShortRowsPerGroup rows a group, a grid over every row (docs/NOTES.md entry 39).
TEST(Planner, ShortForwardRowsTakeTheShortRowWalk) {
  const DeviceFacts h200 = DeviceFacts::h200();
  auto forward = [&](std::int64_t m, std::int64_t n, DType t, bool rms = false, const PlannerTable& table = PlannerTable{}) {
    Problem p = backward(m, n, t);
    p.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
    return normkit::plan(p, h200, Strategy::Auto, table);
  };
  const struct { std::int64_t n; DType t; int lanes; } cases[] = {
      {64, DType::BF16, 8}, {56, DType::F16, 8}, {40, DType::F16, 8}, {32, DType::BF16, 4}, {24, DType::F16, 4},
      {16, DType::BF16, 2}, {8, DType::F16, 1},  {32, DType::F32, 8}, {12, DType::F32, 4}, {4, DType::F32, 1}};
  for (const auto& c : cases) {
    for (bool rms : {false, true}) {
      const std::int64_t m = (std::int64_t(64) << 20) / (c.n * std::int64_t(dtype_size(c.t)));  // 64 MiB of x
      const Plan plan = forward(m, c.n, c.t, rms);
      const std::string where = std::string(rms ? "rms " : "ln ") + dtype_name(c.t) + " N = " + std::to_string(c.n);
      ASSERT_TRUE(plan.row.short_rows) << where << ": " << plan.describe();
      EXPECT_FALSE(plan.row.packed) << where;
      EXPECT_EQ(plan.row.threads_per_row, c.lanes) << where;
      EXPECT_EQ(plan.row.items, 1) << where;
      EXPECT_EQ(plan.row.vec, 16 / int(dtype_size(c.t))) << where;
      EXPECT_EQ(plan.row.block_threads(), kShortRowBlockThreads) << where;
      EXPECT_EQ(plan.row.stages, 0) << where;
      EXPECT_EQ(plan.row.split, 1) << where;
      // a grid over every row, no more blocks than that
      const std::int64_t rows_per_block = std::int64_t(plan.row.rows_per_block) * kShortRowsPerGroup;
      EXPECT_GE(plan.row.blocks * rows_per_block, m) << where;
      EXPECT_LT((plan.row.blocks - 1) * rows_per_block, m) << where;
      EXPECT_NE(plan.describe().find(" short"), std::string::npos) << plan.describe();
    }
  }
  // from forward_short_rows_min_bytes of x (128 KiB): 1024 x 64 bf16 is, 1023 x 64 is not
  const PlannerTable defaults;
  EXPECT_EQ(defaults.forward_short_rows_min_bytes, std::int64_t(128) << 10);
  EXPECT_TRUE(forward(1024, 64, DType::BF16).row.short_rows);
  EXPECT_TRUE(forward(1024, 64, DType::BF16, true).row.short_rows);
  EXPECT_FALSE(forward(1023, 64, DType::BF16).row.short_rows);
  EXPECT_FALSE(forward(1023, 64, DType::BF16, true).row.short_rows);
  EXPECT_TRUE(forward(1024, 32, DType::F32).row.short_rows);
  EXPECT_FALSE(forward(1023, 32, DType::F32).row.short_rows);
  // longer rows than forward_short_rows_max_vectors, unaligned rows and the backward keep their walks
  const std::int64_t longer = defaults.forward_short_rows_max_vectors + 1;
  EXPECT_TRUE(forward(131072, (longer - 1) * 8, DType::BF16).row.short_rows);
  EXPECT_FALSE(forward(131072, longer * 8, DType::BF16).row.short_rows);
  EXPECT_FALSE(forward(131072, longer * 4, DType::F32).row.short_rows);
  Problem unaligned = backward(131072, 64, DType::BF16);
  unaligned.op = Op::LayerNormForward;
  unaligned.rows_vector_aligned = false;
  EXPECT_FALSE(normkit::plan(unaligned, h200).row.short_rows);
  EXPECT_FALSE(normkit::plan(backward(131072, 64, DType::BF16, {true, true, true}), h200).row.short_rows);
  // RMSNorm rows the packed walk would take (64 MiB of x) take the short one
  EXPECT_FALSE(forward(1 << 20, 64, DType::BF16, true).row.packed);
  // the key: 0 takes every such row, even one; a table can turn the walk off
  PlannerTable always, never;
  always.forward_short_rows_min_bytes = 0;
  never.forward_short_rows_min_bytes = std::numeric_limits<std::int64_t>::max();
  never.ln_forward_warp_rows_min_bytes = std::numeric_limits<std::int64_t>::max();
  EXPECT_TRUE(forward(1, 64, DType::BF16, false, always).row.short_rows);
  EXPECT_EQ(forward(1, 64, DType::BF16, false, always).row.blocks, 1);
  EXPECT_FALSE(forward(1 << 20, 64, DType::BF16, false, never).row.short_rows);
  const std::string path = ::testing::TempDir() + "normkit_short_rows_table.txt";
  { std::ofstream(path) << "forward_short_rows_min_bytes = 0\n"; }
  EXPECT_EQ(load_planner_table(path).forward_short_rows_min_bytes, 0);
  std::remove(path.c_str());
}

// Rows longer than a warp's worth of vectors (forward_short_rows_max_vectors up to kShortRowMaxVectors):
// a warp a row, then 2, 4, 8 vectors a lane (the next power of two of vectors / 32), one row a group
// from two vectors a lane on (short_rows_per_group); the key is bounded by the kernel's instances.
TEST(Planner, ShortForwardRowsTakeAWarpThenMoreVectorsALane) {
  const DeviceFacts h200 = DeviceFacts::h200();
  PlannerTable widest = without_block_rows();  // (which rows of more than 32 vectors take first)
  widest.forward_short_rows_max_vectors = kShortRowMaxVectors;
  auto forward = [&](std::int64_t m, std::int64_t n, DType t, bool rms, const PlannerTable& table) {
    Problem p = backward(m, n, t);
    p.op = rms ? Op::RmsNormForward : Op::LayerNormForward;
    return normkit::plan(p, h200, Strategy::Auto, table);
  };
  const struct { std::int64_t n; DType t; int lanes, items; } cases[] = {
      {72, DType::BF16, 16, 1},   {128, DType::F16, 16, 1},  {136, DType::BF16, 32, 1}, {256, DType::BF16, 32, 1},
      {264, DType::F16, 32, 2},   {512, DType::BF16, 32, 2}, {768, DType::F16, 32, 4},  {1000, DType::BF16, 32, 4},
      {1024, DType::BF16, 32, 4}, {1032, DType::F16, 32, 8}, {2048, DType::BF16, 32, 8}, {64, DType::F32, 16, 1},
      {512, DType::F32, 32, 4},   {1000, DType::F32, 32, 8}, {1024, DType::F32, 32, 8},
      {2056, DType::BF16, 32, 16}, {4096, DType::F16, 32, 16}, {1028, DType::F32, 32, 16}, {2048, DType::F32, 32, 16}};
  for (const auto& c : cases) {
    for (bool rms : {false, true}) {
      const std::int64_t m = (std::int64_t(64) << 20) / (c.n * std::int64_t(dtype_size(c.t)));  // 64 MiB of x
      const Plan plan = forward(m, c.n, c.t, rms, widest);
      const std::string where = std::string(rms ? "rms " : "ln ") + dtype_name(c.t) + " N = " + std::to_string(c.n);
      ASSERT_TRUE(plan.row.short_rows) << where << ": " << plan.describe();
      EXPECT_FALSE(plan.row.packed) << where;
      EXPECT_EQ(plan.row.threads_per_row, c.lanes) << where;
      EXPECT_EQ(plan.row.items, c.items) << where;
      EXPECT_EQ(plan.row.block_threads(), kShortRowBlockThreads) << where;
      EXPECT_EQ(plan.row.stages, 0) << where;
      const std::int64_t rows_per_block = std::int64_t(plan.row.rows_per_block) * short_rows_per_group(c.items);
      EXPECT_GE(plan.row.blocks * rows_per_block, m) << where;
      EXPECT_LT((plan.row.blocks - 1) * rows_per_block, m) << where;
    }
  }
  EXPECT_EQ(short_rows_per_group(1), kShortRowsPerGroup);
  EXPECT_EQ(short_rows_per_group(2), 1);
  EXPECT_EQ(short_rows_per_group(16), 1);
  EXPECT_EQ(kShortRowMaxVectors, 512);
  EXPECT_EQ(short_row_min_blocks(16), 2);  // 128 registers: the 16-vector rows' 64 of packed row
  // one vector past kShortRowMaxVectors: the general walk, whatever the table says
  EXPECT_TRUE(forward(4096, kShortRowMaxVectors * 8, DType::BF16, false, widest).row.short_rows);
  EXPECT_FALSE(forward(4096, (kShortRowMaxVectors + 1) * 8, DType::BF16, false, widest).row.short_rows);
  const std::string path = ::testing::TempDir() + "normkit_short_rows_vectors.txt";
  { std::ofstream(path) << "forward_short_rows_max_vectors = " << kShortRowMaxVectors + 1 << "\n"; }
  try {
    load_planner_table(path);
    ADD_FAILURE() << "forward_short_rows_max_vectors past kShortRowMaxVectors must be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward_short_rows_max_vectors"), std::string::npos) << e.what();
  }
  { std::ofstream(path) << "forward_short_rows_max_vectors = " << kShortRowMaxVectors << "\n"; }
  EXPECT_EQ(load_planner_table(path).forward_short_rows_max_vectors, kShortRowMaxVectors);
  std::remove(path.c_str());

  // The built-in table: LayerNorm rows up to kShortRowMaxVectors from ln_forward_warp_rows_min_bytes
  // of x (64 MiB); RMSNorm keeps its packed walk there, and smaller LayerNorm forwards the staged one.
  // (Rows of more than 32 vectors take the one-row-a-block walk before these: off here.)
  const PlannerTable defaults = without_block_rows();
  EXPECT_EQ(defaults.ln_forward_warp_rows_min_bytes, std::int64_t(64) << 20);
  const Plan ln_1024 = forward(32768, 1024, DType::BF16, false, defaults);  // 64 MiB
  EXPECT_TRUE(ln_1024.row.short_rows) << ln_1024.describe();
  EXPECT_EQ(ln_1024.row.threads_per_row, 32);
  EXPECT_EQ(ln_1024.row.items, 4);
  EXPECT_TRUE(forward(65536, 1024, DType::F32, false, defaults).row.short_rows);   // 256 vectors
  EXPECT_FALSE(forward(32767, 1024, DType::BF16, false, defaults).row.short_rows);  // just below 64 MiB
  EXPECT_GT(forward(32767, 1024, DType::BF16, false, defaults).row.stages, 0);
  EXPECT_FALSE(forward(16384, 4096, DType::BF16, false, defaults).row.short_rows);  // 512 vectors, below 512 MiB
  EXPECT_FALSE(forward(65536, 1024, DType::BF16, true, defaults).row.short_rows);   // RMSNorm: packed
  EXPECT_TRUE(forward(65536, 1024, DType::BF16, true, defaults).row.packed);
  PlannerTable no_warp_rows = defaults;
  no_warp_rows.ln_forward_warp_rows_min_bytes = std::numeric_limits<std::int64_t>::max();
  EXPECT_FALSE(forward(65536, 1024, DType::BF16, false, no_warp_rows).row.short_rows);
  EXPECT_TRUE(forward(131072, 64, DType::BF16, false, no_warp_rows).row.short_rows);  // the short rule stays
  // LayerNorm rows of 16 vectors a lane (257 - 512 vectors) from ln_forward_long_warp_rows_min_bytes
  // (512 MiB); below it the staged walk
  EXPECT_EQ(defaults.ln_forward_long_warp_rows_min_bytes, std::int64_t(512) << 20);
  const Plan ln_4096 = forward(65536, 4096, DType::BF16, false, defaults);  // 512 MiB, 512 vectors
  EXPECT_TRUE(ln_4096.row.short_rows) << ln_4096.describe();
  EXPECT_EQ(ln_4096.row.threads_per_row, 32);
  EXPECT_EQ(ln_4096.row.items, 16);
  EXPECT_TRUE(forward(131072, 2560, DType::F16, false, defaults).row.short_rows);    // 320 vectors
  EXPECT_TRUE(forward(65536, 2048, DType::F32, false, defaults).row.short_rows);     // 512 fp32 vectors
  EXPECT_FALSE(forward(65535, 4096, DType::BF16, false, defaults).row.short_rows);   // just below 512 MiB
  EXPECT_FALSE(forward(65536, 3072, DType::BF16, false, defaults).row.short_rows);   // 384 MiB
  EXPECT_FALSE(forward(65536, 4096, DType::BF16, true, defaults).row.short_rows);    // RMSNorm: packed
  EXPECT_TRUE(forward(16384, 2048, DType::BF16, false, defaults).row.short_rows);    // 256 vectors: 64 MiB rule
  PlannerTable long_rows = defaults;
  long_rows.ln_forward_long_warp_rows_min_bytes = std::int64_t(64) << 20;
  EXPECT_TRUE(forward(16384, 4096, DType::BF16, false, long_rows).row.short_rows);
  EXPECT_FALSE(forward(16384, 4104, DType::BF16, false, long_rows).row.short_rows);  // 513 vectors
  const std::string max_path = ::testing::TempDir() + "normkit_ln_long_warp_rows.txt";
  { std::ofstream(max_path) << "ln_forward_long_warp_rows_min_bytes = 1024\n"; }
  EXPECT_EQ(load_planner_table(max_path).ln_forward_long_warp_rows_min_bytes, 1024);
  std::remove(max_path.c_str());
}

// PlannerTable::row_stage_bytes_per_sm: fewer stages where the resident blocks copy more row bytes
// a stage (docs/NOTES.md entry 29); 0 = row_pipeline_stages everywhere.
TEST(Planner, RowStagesAreCappedByTheRowBytesTheSmCopiesAStage) {
  const DeviceFacts h200 = DeviceFacts::h200();
  // the staged walks (RMSNorm forwards this large take the packed walk by default)
  PlannerTable staged = without_block_rows();
  staged.rms_forward_packed_min_bytes = std::numeric_limits<std::int64_t>::max();
  auto stages_of = [&](Op op, std::int64_t m, std::int64_t n, Strategy s, const PlannerTable& t) {
    Problem p = backward(m, n, DType::BF16, {true, true, !is_rms(op)});
    p.op = op;
    return normkit::plan(p, h200, s, t).row;
  };
  PlannerTable off = staged, wider = staged;
  off.row_stage_bytes_per_sm = 0;
  wider.row_stage_bytes_per_sm = 131072;
  const struct { const char* why; Op op; std::int64_t m, n; Strategy s; int stages, stages_off, stages_wider; } cases[] = {
      // fused 512 threads x 2 items x 2 tensors, one block per SM: 32 KB a stage
      {"fused 16384 x 8192", Op::RmsNormBackward, 16384, 8192, Strategy::Auto, 2, 4, 4},
      {"fused 131072 x 4096", Op::LayerNormBackward, 131072, 4096, Strategy::Auto, 2, 4, 4},
      // fused short rows, one item: 16 KB a stage
      {"fused 131072 x 64", Op::LayerNormBackward, 131072, 64, Strategy::Auto, 4, 4, 4},
      // LayerNorm forward 2 rows x 256 threads x 4 items: 32 KB
      {"ln forward 16384 x 8192", Op::LayerNormForward, 16384, 8192, Strategy::Auto, 2, 4, 4},
      // the 1024-thread RMSNorm forward, one item: 16 KB
      {"rms forward 16384 x 8192", Op::RmsNormForward, 16384, 8192, Strategy::Auto, 4, 4, 4},
      // fused wide rows (512 threads x 4 items x 2 tensors: 64 KB) hold one stage more
      {"fused wide 4096 x 262144", Op::LayerNormBackward, 4096, 262144, Strategy::Fused, 3, 3, 3}};
  for (const auto& c : cases) {
    EXPECT_EQ(stages_of(c.op, c.m, c.n, c.s, staged).stages, c.stages) << c.why;
    EXPECT_EQ(stages_of(c.op, c.m, c.n, c.s, off).stages, c.stages_off) << c.why;
    EXPECT_EQ(stages_of(c.op, c.m, c.n, c.s, wider).stages, c.stages_wider) << c.why;
  }
}

TEST(Planner, UnalignedRowsUseTheScalarPath) {
  Problem p = backward(100, 1024, DType::F16, {true, true, true});
  p.rows_vector_aligned = false;
  EXPECT_EQ(normkit::plan(p, DeviceFacts::h200()).row.vec, 1);
  p.rows_vector_aligned = true;
  EXPECT_EQ(normkit::plan(p, DeviceFacts::h200()).row.vec, 8);
}

// Scalar rows longer than the 1-4 element instances hold (1024 columns) are cached by the wide scalar
// instances, 8 elements a thread in the smallest group that holds them: up to 512 threads (4096
// columns), and 1024 threads from scalar_row_widest_group_min_cols (6145) to 8192 columns but in
// LayerNorm's forward (docs/NOTES.md entries 105, 106); the others are streamed. The forward and the
// unfused dX alike.
TEST(Planner, UnalignedRowsUpTo8192ColumnsAreCachedEightElementsAThread) {
  const DeviceFacts h200 = DeviceFacts::h200();
  constexpr int kStream = -1;
  // group: 0 = the 1-4 element instances' rules; kStream = streamed
  const struct { std::int64_t n; int group, ln_forward_group; } expected[] = {
      {1000, 0, 0},         {1024, 0, 0},          {1025, 256, 256},      {2048, 256, 256},
      {2049, 512, 512},     {4096, 512, 512},      {4097, kStream, kStream}, {6144, kStream, kStream},
      {6145, 1024, kStream}, {8192, 1024, kStream}, {8193, kStream, kStream}};
  ASSERT_EQ(builtin_planner_table(BuiltinTable::H200).scalar_row_widest_group_min_cols, 6145);
  for (const auto& e : expected) {
    for (Op op : {Op::LayerNormForward, Op::RmsNormForward, Op::LayerNormBackward, Op::RmsNormBackward}) {
      for (DType t : {DType::BF16, DType::F32}) {
        Problem p = backward(16384, e.n, t, {true, true, true});
        p.op = op;
        p.rows_vector_aligned = false;
        const Plan plan = normkit::plan(p, h200, is_backward(op) ? Strategy::Tiled : Strategy::Auto);
        const std::string where = std::string(op_name(op)) + " " + dtype_name(t) + " N = " + std::to_string(e.n) +
                                  ": " + plan.describe();
        const int group = op == Op::LayerNormForward ? e.ln_forward_group : e.group;
        EXPECT_EQ(plan.row.vec, 1) << where;
        if (group == 0) {  // the 1-4 element instances' rules (the packed RMSNorm forward's among them)
          EXPECT_GE(plan.row.items, 1) << where;
          EXPECT_LE(plan.row.items, 4) << where;
          continue;
        }
        EXPECT_EQ(plan.row.items, group == kStream ? 0 : kMaxScalarRowItems) << where;
        EXPECT_EQ(plan.row.threads_per_row, group == kStream ? kStreamRowThreads : group) << where;
        EXPECT_EQ(plan.row.split, 1) << where;
        EXPECT_EQ(plan.row.stages, 0) << where;
        const int bound = op == Op::LayerNormForward || op == Op::RmsNormForward
                              ? forward_kernel_max_threads(op == Op::RmsNormForward, plan.row.items, plan.row.vec)
                              : row_kernel_max_threads(plan.row.items, plan.row.vec);
        EXPECT_LE(plan.row.block_threads(), bound) << where;
        if (plan.row.items > 0) {
          EXPECT_GE(std::int64_t(plan.row.items) * plan.row.threads_per_row, e.n) << where;
          // the smallest group that holds the row
          EXPECT_LT(std::int64_t(plan.row.threads_per_row / 2) * plan.row.items, e.n) << where;
        }
      }
    }
  }
  // the wide scalar instances' launch bounds: one block an SM of kScalarRowMaxThreads threads, but
  // LayerNorm's forward (kLnForwardScalarRowMaxThreads)
  EXPECT_EQ(row_kernel_max_threads(kMaxScalarRowItems, 1), kScalarRowMaxThreads);
  EXPECT_EQ(forward_kernel_max_threads(/*rms=*/true, kMaxScalarRowItems, 1), kScalarRowMaxThreads);
  EXPECT_EQ(forward_kernel_max_threads(/*rms=*/false, kMaxScalarRowItems, 1), kLnForwardScalarRowMaxThreads);
  EXPECT_EQ(forward_kernel_max_threads(/*rms=*/false, 4, 8), row_kernel_max_threads(4, 8));
  EXPECT_EQ(row_kernel_min_blocks(kMaxScalarRowItems, 1), 1);
  // vectorised 8-item layouts keep their bound (the fused wide split blocks' budget)
  EXPECT_EQ(max_row_threads(8, 8), max_row_threads(8));
  // the table key moves the rule: 4097 columns cached, or 8192 streamed
  PlannerTable all_wide = builtin_planner_table(BuiltinTable::H200);
  all_wide.scalar_row_widest_group_min_cols = 0;
  PlannerTable none_wide = builtin_planner_table(BuiltinTable::H200);
  none_wide.scalar_row_widest_group_min_cols = 8193;
  Problem wide = backward(16384, 4097, DType::BF16, {true, true, true});
  wide.rows_vector_aligned = false;
  EXPECT_EQ(normkit::plan(wide, h200, Strategy::Tiled, all_wide).row.threads_per_row, 1024);
  wide.cols = 8192;
  EXPECT_EQ(normkit::plan(wide, h200, Strategy::Tiled, none_wide).row.items, 0);
  // a device of smaller blocks streams what it cannot cache
  DeviceFacts small_blocks = h200;
  small_blocks.max_threads_per_block = 256;
  Problem p = backward(16384, 4000, DType::BF16, {true, true, true});
  p.rows_vector_aligned = false;
  EXPECT_EQ(normkit::plan(p, h200, Strategy::Tiled).row.items, kMaxScalarRowItems);
  EXPECT_EQ(normkit::plan(p, small_blocks, Strategy::Tiled).row.items, 0);
  EXPECT_EQ(normkit::plan(backward(16384, 4096, DType::BF16), small_blocks, Strategy::Tiled).row.vec, 8);
}

TEST(Planner, ForwardRejectsAForcedStrategy) {
  Problem p = backward(10, 10);
  p.op = Op::LayerNormForward;
  EXPECT_THROW(normkit::plan(p, DeviceFacts::h200(), Strategy::Tiled), Error);
  EXPECT_NO_THROW(normkit::plan(p, DeviceFacts::h200(), Strategy::Auto));
}

TEST(Planner, SmallGpuGetsFewerBlocks) {
  DeviceFacts small;
  small.sm_count = 4;
  const Plan plan = normkit::plan(backward(1 << 20, 1024, DType::F16, {true, true, true}), small);
  EXPECT_LE(plan.row.blocks, 4 * kFusedBlocksPerSm);
}

// The row-layout rules measured at 41c76c0 (docs/NOTES.md entry 23), and that the table turns them off.
TEST(Planner, RowLayoutRulesForSmallGridsShortRowsAndWideRmsRows) {
  const DeviceFacts h200 = DeviceFacts::h200();
  struct Expected {
    const char* why;
    Problem problem;
    Strategy strategy;
    int items, threads_per_row, block_threads;
  };
  const Expected cases[] = {
      // 32 x 512: the 4-item layout made 2 blocks of 16 rows; now 2 items, 2 rows per block of 64 threads
      {"small grid, forward", forward(32, 512, false), Strategy::Auto, 2, 32, 64},
      // (two-pass: a tiled plan this small runs dX in the tiled launch, OneLaunch below)
      {"small grid, dX", backward(32, 512, DType::F16, {true, true, true}), Strategy::TwoPass, 2, 32, 64},
      // a grid already as large as forward_small_grid_blocks keeps the 4-item layout
      {"large enough grid", forward(1024, 768, false), Strategy::Auto, 4, 32, 256},
      // 64 x 4096: 32 blocks of 2 rows, under a forward_small_grid_blocks of 64 (2 items, a row a block
      // of 256 threads); the dX kernel's small_grid_blocks (16): 256 x 1024 with dX keeps 4 items
      {"small forward grid", forward(64, 4096, true), Strategy::Auto, 2, 256, 256},
      {"dX grid of 32 blocks", backward(256, 1024, DType::F16, {true, true, true}), Strategy::Tiled, 4, 32, 256},
      // rows of 8 vectors (64 16-bit columns): 2 items forward, 1 item fused
      {"short rows, forward", forward(131072, 64, true), Strategy::Auto, 2, 4, 256},
      {"short rows, fused", backward(131072, 64, DType::F16, {true, true, true}), Strategy::Fused, 1, 8, 512},
      // RMSNorm forward of 1024 vectors: one per thread; LayerNorm keeps 4
      {"wide RMSNorm forward", forward(16384, 8192, true), Strategy::Auto, 1, 1024, 1024},
      {"wide LayerNorm forward", forward(16384, 8192, false), Strategy::Auto, 4, 256, 256},
  };
  // the staged walk's rules (RMSNorm forwards of rms_forward_packed_min_bytes take the packed walk:
  // PackedRmsForwardRowsFromTheTablesByteCount)
  PlannerTable staged = without_tall_strips(without_block_rows());  // (256 x 1024 with dX: tall strips, OneLaunch)
  staged.rms_forward_packed_min_bytes = std::numeric_limits<std::int64_t>::max();
  staged.forward_short_rows_min_bytes = std::numeric_limits<std::int64_t>::max();  // (ShortForwardRowsTakeTheShortRowWalk)
  for (const Expected& e : cases) {
    const RowShape r = plan(e.problem, h200, e.strategy, staged).row;
    EXPECT_EQ(r.items, e.items) << e.why;
    EXPECT_EQ(r.threads_per_row, e.threads_per_row) << e.why;
    EXPECT_EQ(r.block_threads(), e.block_threads) << e.why;
  }
  EXPECT_EQ(plan(forward(32, 512, false), h200, Strategy::Auto, staged).row.blocks, 16);
  // the built-in forward_small_grid_blocks: 64
  EXPECT_EQ(plan(forward(64, 4096, true), h200, Strategy::Auto, staged).row.items, 2);
  // unvectorised rows keep the general layout for the row-length rules: 1024 scalar columns would
  // be 1024 "vectors" for the RMSNorm rule, and 8 for the short-row rules
  Problem unaligned = forward(16384, 1024, true);
  unaligned.rows_vector_aligned = false;
  EXPECT_EQ(plan(unaligned, h200).row.items, 4);
  EXPECT_EQ(plan(unaligned, h200).row.threads_per_row, 256);
  Problem unaligned_short = forward(131072, 8, true);
  unaligned_short.rows_vector_aligned = false;
  EXPECT_EQ(plan(unaligned_short, h200).row.items, 4);
  Problem unaligned_short_bwd = backward(131072, 8, DType::BF16, {true, true, true});
  unaligned_short_bwd.rows_vector_aligned = false;
  EXPECT_EQ(plan(unaligned_short_bwd, h200, Strategy::Fused).row.items, 2);
  // ... and rows longer than one vector per thread of a block are not affected
  EXPECT_EQ(plan(forward(2048, 16384, true), h200, Strategy::Auto, staged).row.items,
            plan(forward(2048, 16384, false), h200, Strategy::Auto, staged).row.items);
  // Short vectorised rows take fused from fused_short_row_min_rows rows (with and without dX), with
  // dX also from fused_short_row_dx_min_bytes of x (LayerNorm, 8192 x 64 bf16); unvectorised ones
  // (N = 1) and fewer rows keep two-pass.
  // (tall strips off: the rule under test comes after them)
  const PlannerTable no_tall = without_tall_strips(default_planner_table());
  auto short_rows = [&](const Problem& p) { return plan(p, h200, Strategy::Auto, no_tall).strategy; };
  EXPECT_EQ(short_rows(backward(16384, 64, DType::BF16, {true, true, true})), Strategy::Fused);
  EXPECT_EQ(short_rows(backward(16384, 64, DType::BF16)), Strategy::Fused);
  EXPECT_EQ(short_rows(backward(4097, 64, DType::BF16)), Strategy::TwoPass);
  EXPECT_EQ(short_rows(backward(8192, 64, DType::BF16, {true, true, true})), Strategy::Fused);
  EXPECT_EQ(short_rows(backward(8191, 64, DType::BF16, {true, true, true})), Strategy::TwoPass);
  EXPECT_EQ(short_rows(backward(2048, 64, DType::BF16, {true, true, false}, true)), Strategy::Fused);
  EXPECT_EQ(short_rows(backward(16384, 1, DType::BF16, {true, true, true})), Strategy::TwoPass);
  // A table can turn each rule off.
  PlannerTable off = staged;
  off.small_grid_blocks = 0;
  off.forward_small_grid_blocks = 0;
  off.short_row_max_vectors = 0;
  off.rms_forward_one_item_min_vectors = 1 << 30;
  EXPECT_EQ(plan(forward(32, 512, false), h200, Strategy::Auto, off).row.items, 4);
  EXPECT_EQ(plan(forward(131072, 64, true), h200, Strategy::Auto, off).row.items, 4);
  EXPECT_EQ(plan(forward(16384, 8192, true), h200, Strategy::Auto, off).row.items, 4);
  EXPECT_EQ(plan(backward(131072, 64, DType::F16, {true, true, true}), h200, Strategy::Fused, off).row.items, 2);
}

// RowShape::packed: RMSNorm forward's lean walk, from rms_forward_packed_min_bytes of x, for rows
// one block of at most kPackedRowMaxThreads caches; a grid that covers every row, never staged or split.
TEST(Planner, PackedRmsForwardRowsFromTheTablesByteCount) {
  const DeviceFacts h200 = DeviceFacts::h200();
  // the built-in table: from 64 MiB of x (rows of more than 32 vectors take the one-row-a-block walk
  // before it: off here)
  const PlannerTable no_block_rows = without_block_rows();
  EXPECT_TRUE(plan(forward(131072, 4096, true), h200, Strategy::Auto, no_block_rows).row.packed);
  EXPECT_TRUE(plan(forward(16384, 8192, true), h200, Strategy::Auto, no_block_rows).row.packed);
  EXPECT_TRUE(plan(forward(8192, 4096, true), h200, Strategy::Auto, no_block_rows).row.packed);         // 64 MiB exactly
  EXPECT_FALSE(plan(forward(8191, 4096, true), h200, Strategy::Auto, no_block_rows).row.packed);
  EXPECT_FALSE(plan(forward(8192, 1000, true), h200, Strategy::Auto, no_block_rows).row.packed);
  EXPECT_FALSE(plan(forward(131072, 4096, false), h200, Strategy::Auto, no_block_rows).row.packed);    // LayerNorm: never
  EXPECT_FALSE(plan(forward(2048, 65536, true), h200, Strategy::Auto, no_block_rows).row.packed);      // split over a cluster

  PlannerTable t;
  t.rms_forward_packed_min_bytes = 8 << 20;
  t.forward_short_rows_min_bytes = std::numeric_limits<std::int64_t>::max();  // short rows packed too
  t.forward_block_rows_below_bytes = 0;  // and the rows of a block (forward_block_rows comes first)
  t.forward_packed_items_target = 2;
  t.forward_packed_block_threads = 256;
  struct Expected {
    Problem problem;
    int vec, items, threads_per_row, block_threads;
    std::int64_t blocks;
  };
  for (const Expected& e : {
           // 512 vectors of 8: 256 threads of 2 vectors, a block a row
           Expected{forward(131072, 4096, true), 8, 2, 256, 256, 131072},
           // 1024 vectors: a 512-thread block a row (kPackedRowMaxThreads)
           Expected{forward(16384, 8192, true), 8, 2, 512, 512, 16384},
           // 96 vectors: 64 threads of 2 (the last 32 lanes hold one), 4 rows a block
           Expected{forward(8192, 768, true), 8, 2, 64, 256, 2048},
           // 8 vectors: 4 threads a row, 64 rows a block; M not a multiple of the rows per block
           Expected{forward(131073, 64, true), 8, 2, 4, 256, 2049},
           // fp32: 4-element vectors
           Expected{forward(4096, 1024, true, DType::F32), 4, 2, 128, 256, 2048},
           // exactly rms_forward_packed_min_bytes
           Expected{forward(4096, 1024, true), 8, 2, 64, 256, 1024},
       }) {
    const Plan pl = plan(e.problem, h200, Strategy::Auto, t);
    SCOPED_TRACE(pl.describe());
    EXPECT_TRUE(pl.row.packed);
    EXPECT_NE(pl.describe().find(" packed"), std::string::npos);
    EXPECT_EQ(pl.row.vec, e.vec);
    EXPECT_EQ(pl.row.items, e.items);
    EXPECT_EQ(pl.row.threads_per_row, e.threads_per_row);
    EXPECT_EQ(pl.row.block_threads(), e.block_threads);
    EXPECT_LE(pl.row.block_threads(), kPackedRowMaxThreads);
    EXPECT_EQ(pl.row.blocks, e.blocks);
    EXPECT_GE(pl.row.blocks * pl.row.rows_per_block, e.problem.rows);  // every row has its group
    EXPECT_EQ(pl.row.stages, 0);
    EXPECT_EQ(pl.row.smem_bytes, 0);
    EXPECT_EQ(pl.row.split, 1);
  }
  // fewer bytes than the table's count: the staged walk
  EXPECT_FALSE(plan(forward(4095, 1024, true), h200, Strategy::Auto, t).row.packed);
  EXPECT_GT(plan(forward(4095, 1024, true), h200, Strategy::Auto, t).row.stages, 0);
  // LayerNorm keeps its staged walk at any size
  EXPECT_FALSE(plan(forward(131072, 4096, false), h200, Strategy::Auto, t).row.packed);
  // rows one packed block cannot cache (2048 16-bit vectors need 4 items at 512 threads, beyond the
  // 4-item register budget of 256): split or streamed as before
  EXPECT_FALSE(plan(forward(16384, 16384, true), h200, Strategy::Auto, t).row.packed);
  EXPECT_FALSE(plan(forward(4096, 65536, true), h200, Strategy::Auto, t).row.packed);
  EXPECT_GT(plan(forward(4096, 65536, true), h200, Strategy::Auto, t).row.split, 1);
  // unaligned rows are packed too (scalar vectors)
  Problem unaligned = forward(8192, 1000, true);
  unaligned.rows_vector_aligned = false;
  const Plan scalar = plan(unaligned, h200, Strategy::Auto, t);
  EXPECT_TRUE(scalar.row.packed);
  EXPECT_EQ(scalar.row.vec, 1);
  EXPECT_LE(scalar.row.block_threads(), kPackedRowMaxThreads);
  // the table's items target: 4 items at 512 vectors -> 128 threads, 2 rows a block
  PlannerTable four = t;
  four.forward_packed_items_target = 4;
  const RowShape r4 = plan(forward(131072, 4096, true), h200, Strategy::Auto, four).row;
  EXPECT_TRUE(r4.packed);
  EXPECT_EQ(r4.items, 4);
  EXPECT_EQ(r4.threads_per_row, 128);
  EXPECT_EQ(r4.block_threads(), 256);
  EXPECT_EQ(r4.blocks, 65536);
  // the backward never packs
  Problem bwd = backward(131072, 4096, DType::BF16, {true, true, true}, true);
  EXPECT_FALSE(plan(bwd, h200, Strategy::Auto, t).row.packed);
  EXPECT_FALSE(plan(bwd, h200, Strategy::TwoPass, t).row.packed);
  // a grid beyond the largest CUDA grid: capped, the kernel walks the rest by grid stride
  PlannerTable tiny = t;
  tiny.forward_packed_block_threads = 32;
  const RowShape huge = plan(forward(std::int64_t(1) << 40, 8, true), h200, Strategy::Auto, tiny).row;
  EXPECT_TRUE(huge.packed);
  EXPECT_EQ(huge.blocks, kMaxGridBlocks);
}

// Plan::one_launch: small tiled plans with dX run dX and the strips as one grid, the dX rows laid
// out over the tiled block; everything else keeps two launches.
TEST(Planner, OneLaunchForSmallTiledPlansWithDx) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const Mask full{true, true, true};
  struct Expected {
    std::int64_t m, n;
    DType t;
    TileBand band;
    int items, threads_per_row, blocks;
  };
  // the seed's three small cases: Tile-8 (32 x 8 threads), Tile-64 and Tile-128 (32 x 16), one
  // vector a thread (one_launch_items_target)
  for (const Expected& e : {Expected{32, 512, DType::F16, TileBand::Tile8, 1, 64, 8},
                            Expected{96, 768, DType::F16, TileBand::Tile64, 1, 128, 24},
                            Expected{192, 1024, DType::BF16, TileBand::Tile128, 1, 128, 48}}) {
    const Plan pl = plan(backward(e.m, e.n, e.t, full), h200);
    SCOPED_TRACE(pl.describe());
    EXPECT_EQ(pl.strategy, Strategy::Tiled);
    EXPECT_EQ(pl.columns.band, e.band);
    ASSERT_TRUE(pl.one_launch);
    EXPECT_EQ(pl.row.items, e.items);
    EXPECT_EQ(pl.row.threads_per_row, e.threads_per_row);
    EXPECT_EQ(pl.row.threads_per_row * pl.row.rows_per_block, pl.columns.block_x * pl.columns.block_y);
    EXPECT_EQ(pl.row.blocks, e.blocks);
    EXPECT_EQ(pl.row.stages, 0);
    EXPECT_NE(pl.describe().find("one-launch"), std::string::npos);
  }
  // not without dX, nor without gamma/beta, nor past the size, nor on unaligned rows or fp32 rows
  // that need 4 items, nor when the table says 0
  EXPECT_FALSE(plan(backward(32, 512, DType::F16, {false, true, true}), h200).one_launch);
  EXPECT_FALSE(plan(backward(32, 512, DType::F16, {true, false, false}), h200, Strategy::Tiled).one_launch);
  EXPECT_FALSE(plan(backward(32, 512, DType::F16, full), h200, Strategy::TwoPass).one_launch);
  const PlannerTable t;
  EXPECT_TRUE(plan(backward(t.one_launch_max_elements / 4096, 4096, DType::F16, full), h200, Strategy::Tiled).one_launch);
  EXPECT_FALSE(plan(backward(t.one_launch_max_elements / 4096 + 1, 4096, DType::F16, full), h200, Strategy::Tiled).one_launch);
  EXPECT_FALSE(plan(backward(256, 512, DType::F16, full), h200, Strategy::Tiled, without_tall_strips())
                   .one_launch);  // Tile-256: 1024 threads (tall strips off: theirs are 512)
  Problem unaligned = backward(32, 511, DType::F16, full);
  EXPECT_FALSE(plan(unaligned, h200).one_launch);
  EXPECT_FALSE(plan(backward(8, 8192, DType::F16, full), h200, Strategy::Tiled).one_launch);  // 8 items a thread at 256 threads
  PlannerTable off;
  off.one_launch_max_elements = 0;
  const Plan two = plan(backward(32, 512, DType::F16, full), h200, Strategy::Auto, off);
  EXPECT_FALSE(two.one_launch);
  EXPECT_EQ(two.row.block_threads(), 64);  // the small-grid dX layout again
  PlannerTable two_items;
  two_items.one_launch_items_target = 2;  // the layout before entry 32
  const Plan before = plan(backward(96, 768, DType::F16, full), h200, Strategy::Auto, two_items);
  EXPECT_TRUE(before.one_launch);
  EXPECT_EQ(before.row.items, 2);
  EXPECT_EQ(before.row.threads_per_row, 64);
}

// Row staging (RowShape::stages): every row-cached kernel of 16-byte vectors is staged, within the
// SM's shared memory for the blocks the grid counts on; the grid is the resident blocks.
TEST(Planner, RowStagesFitSharedMemoryOfTheResidentBlocks) {
  const DeviceFacts h200 = DeviceFacts::h200();
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    for (std::int64_t n : {64LL, 768LL, 1000LL, 1024LL, 4096LL, 8192LL, 16384LL, 65536LL}) {
      for (Op op : {Op::LayerNormForward, Op::RmsNormForward, Op::LayerNormBackward, Op::RmsNormBackward}) {
        for (Strategy s : {Strategy::Auto, Strategy::Fused, Strategy::TwoPass}) {
          Problem p = backward(100000, n, t, {true, true, !is_rms(op)});
          p.op = op;
          if (!is_backward(op) && s != Strategy::Auto) continue;
          if (!strategy_supported(p, s)) continue;
          const Plan plan = normkit::plan(p, h200, s);
          const RowShape& r = plan.row;
          const std::string where = std::string(op_name(op)) + " " + strategy_name(plan.strategy) + " " +
                                    dtype_name(t) + " N = " + std::to_string(n);
          const bool cached_vectors = r.items > 0 && r.vec > 1;
          // enough shared memory for all of these; the packed walk (RMSNorm forward), the short-row
          // walk (the forward's rows of up to 8 vectors) and the one-row-a-block walk are never staged
          const bool unstaged_walk = r.packed || r.short_rows || r.block_rows;
          EXPECT_EQ(r.stages > 0, cached_vectors && !unstaged_walk) << where;
          if (unstaged_walk) EXPECT_EQ(r.smem_bytes, 0) << where;
          if (r.stages == 0) continue;
          EXPECT_GE(r.stages, 2) << where;
          EXPECT_LE(r.stages, PlannerTable{}.row_pipeline_stages) << where;
          const int tensors = is_backward(op) ? 2 : 1;
          EXPECT_GE(r.smem_bytes, std::int64_t(r.stages) * r.block_threads() * tensors * r.items * 16) << where;
          EXPECT_LE(r.smem_bytes, h200.smem_per_block_optin) << where;
          const std::int64_t resident = plan.strategy == Strategy::Fused ? kFusedBlocksPerSm
                                                                          : std::max(1, 512 / r.block_threads());
          EXPECT_LE(resident * (r.smem_bytes + kSmemReservedPerBlock), h200.smem_per_sm) << where;
          if (plan.strategy != Strategy::Fused) EXPECT_LE(r.blocks, h200.sm_count * resident) << where;
        }
      }
    }
  }
}

TEST(Planner, RowStagesOffForUnalignedRowsAndByTheTable) {
  Problem p = backward(100000, 4096, DType::BF16, {true, true, true});
  EXPECT_GT(normkit::plan(p, DeviceFacts::h200(), Strategy::Fused).row.stages, 0);
  PlannerTable off;
  off.row_pipeline_stages = 0;
  EXPECT_EQ(normkit::plan(p, DeviceFacts::h200(), Strategy::Fused, off).row.stages, 0);
  Problem unaligned = p;  // 2-byte copies: the 16-byte cp.async cannot stage them
  unaligned.op = Op::LayerNormForward;
  unaligned.rows = 60000;  // below ln_forward_long_warp_rows_min_bytes: the staged walk when aligned
  const PlannerTable no_block_rows = without_block_rows();  // (which takes aligned rows first)
  EXPECT_GT(normkit::plan(unaligned, DeviceFacts::h200(), Strategy::Auto, no_block_rows).row.stages, 0);
  unaligned.rows_vector_aligned = false;
  EXPECT_EQ(normkit::plan(unaligned, DeviceFacts::h200(), Strategy::Auto, no_block_rows).row.stages, 0);
  EXPECT_FALSE(normkit::plan(unaligned, DeviceFacts::h200()).row.block_rows);
  // a device with little shared memory gets fewer stages, or none
  DeviceFacts small = DeviceFacts::h200();
  small.smem_per_sm = small.smem_per_block_optin = 48 << 10;
  EXPECT_LT(normkit::plan(p, small, Strategy::Fused).row.stages, normkit::plan(p, DeviceFacts::h200(), Strategy::Fused).row.stages);
  EXPECT_LE(normkit::plan(p, small, Strategy::Fused).row.smem_bytes, 47 << 10);
}

TEST(Planner, ColumnStripsReadSixteenBytesPerLaneWhenRowsAreVectorised) {
  Problem p;
  p.op = Op::LayerNormBackward;
  p.rows = 2048;
  p.cols = 65536;
  p.dtype = p.weight_dtype = DType::BF16;
  const PlannerTable no_tall = without_tall_strips();  // warp-wide strips
  for (Strategy s : {Strategy::Tiled, Strategy::TwoPass}) {
    const Plan vectorised = normkit::plan(p, DeviceFacts::h200(), s, no_tall);
    EXPECT_EQ(vectorised.columns.vec, 8) << vectorised.describe();
    EXPECT_EQ(vectorised.columns.col_blocks, 65536 / (32 * 8)) << vectorised.describe();
    EXPECT_LE(vectorised.columns.rows_per_thread, 2) << "64 registers of a 1024-thread block";
    Problem unaligned = p;
    unaligned.rows_vector_aligned = false;
    const Plan scalar = normkit::plan(unaligned, DeviceFacts::h200(), s, no_tall);
    EXPECT_EQ(scalar.columns.vec, 1) << scalar.describe();
    EXPECT_EQ(scalar.columns.col_blocks, 65536 / 32) << scalar.describe();
  }
  // two-pass splits M into more parts when the vectorised strips are fewer
  const Plan two_pass = normkit::plan(p, DeviceFacts::h200(), Strategy::TwoPass, no_tall);
  EXPECT_GE(two_pass.columns.col_blocks * two_pass.columns.row_parts, DeviceFacts::h200().sm_count);
  EXPECT_EQ(two_pass.workspace_bytes, std::size_t(two_pass.columns.row_parts) * 65536 * 2 * sizeof(float));
  // float32 rows: 4 columns per lane
  p.dtype = p.weight_dtype = DType::F32;
  EXPECT_EQ(normkit::plan(p, DeviceFacts::h200(), Strategy::Tiled, no_tall).columns.vec, 4);
}

TEST(Planner, ScalarTiledStripsNarrowWhereTheyLeaveSmsIdle) {
  const DeviceFacts h200 = DeviceFacts::h200();
  // the built-in table: 16 lanes from 129 rows on, while the strips are at most 25 % of the SMs (Tile-256: 50 %)
  // (tall strips off throughout: they take vectorised rows from 256 / 384 rows first)
  const auto lanes_of = [&](const Problem& p, const PlannerTable& t = without_tall_strips()) {
    return normkit::plan(p, h200, Strategy::Tiled, t).columns.block_x;
  };
  EXPECT_EQ(lanes_of(backward(192, 1024, DType::BF16, {true, true, true})), 16);
  EXPECT_EQ(lanes_of(backward(129, 512)), 16);
  EXPECT_EQ(lanes_of(backward(600, 2048, DType::F32)), 16);
  EXPECT_EQ(lanes_of(backward(128, 1024)), kWarpSize) << "eight rows a thread in warp-wide strips already";
  EXPECT_EQ(lanes_of(backward(96, 768)), kWarpSize);
  EXPECT_EQ(lanes_of(backward(255, 4096)), kWarpSize) << "128 strips: nearly every SM has one";
  EXPECT_EQ(lanes_of(backward(192, 4000)), kWarpSize);
  PlannerTable warp_wide = without_tall_strips();
  warp_wide.tiled_min_strip_lanes = kWarpSize;
  EXPECT_EQ(lanes_of(backward(200, 2000)), kWarpSize) << "63 strips: most SMs have one";
  PlannerTable narrow = without_tall_strips();
  narrow.tiled_narrow_strips_min_rows = 0;
  narrow.tiled_narrow_max_strips_percent = narrow.tiled256_narrow_max_strips_percent = 100;
  for (int lanes : {32, 16, 8}) {
    narrow.tiled_min_strip_lanes = lanes;
    for (const Problem& p : {backward(192, 1024, DType::BF16, {true, true, true}), backward(32, 512),
                             backward(700, 640, DType::F32), backward(7, 1001)}) {
      const Plan wide = normkit::plan(p, h200, Strategy::Tiled, warp_wide);
      const Plan plan = normkit::plan(p, h200, Strategy::Tiled, narrow);
      SCOPED_TRACE(plan.describe());
      EXPECT_EQ(wide.columns.block_x, kWarpSize);
      // every strip count here is below the SM count at 32 and at 16 lanes: down to the table's lanes
      EXPECT_EQ(plan.columns.block_x, lanes);
      EXPECT_EQ(plan.columns.col_blocks, (p.cols + lanes - 1) / lanes);
      EXPECT_EQ(plan.columns.block_x * plan.columns.block_y, wide.columns.block_x * wide.columns.block_y)
          << "the block keeps its threads";
      EXPECT_EQ(plan.columns.band, wide.columns.band);
      if (plan.columns.band != TileBand::Tile256)
        EXPECT_GE(plan.columns.rows_per_iteration(), p.rows) << "one block iteration below Tile-256";
      EXPECT_EQ(plan.one_launch, wide.one_launch);
      EXPECT_EQ(plan.describe().find(" lanes=") != std::string::npos, lanes != kWarpSize);
    }
  }
  // the built-in shares of the SM count (25 %, Tile-256 50 %) with 8 lanes allowed: a strip count
  // above the share stays as it is
  PlannerTable eight = without_tall_strips();
  eight.tiled_min_strip_lanes = 8;
  EXPECT_EQ(lanes_of(backward(192, 8192), eight), kWarpSize);
  EXPECT_EQ(lanes_of(backward(192, 1024), eight), 16);
  EXPECT_EQ(lanes_of(backward(192, 512), eight), 8);
  EXPECT_EQ(lanes_of(backward(600, 2048), eight), 16);
  EXPECT_EQ(lanes_of(backward(600, 1024), eight), 8);
  // below tiled_narrow_strips_min_rows none narrow
  EXPECT_EQ(lanes_of(backward(128, 1024), eight), kWarpSize);
  EXPECT_EQ(lanes_of(backward(129, 1024), eight), 16);
  narrow.tiled_min_strip_lanes = 8;
  // vectorised strips and the other strategies keep theirs
  const Plan vectorised = normkit::plan(backward(256, 16384, DType::BF16), h200, Strategy::Tiled, narrow);
  EXPECT_EQ(vectorised.columns.vec, 8);
  EXPECT_EQ(vectorised.columns.block_x, kWarpSize);
  EXPECT_EQ(normkit::plan(backward(4096, 1024), h200, Strategy::TwoPass, narrow).columns.block_x, kWarpSize);
  EXPECT_EQ(normkit::plan(backward(1, 1024), h200, Strategy::Simple, narrow).columns.block_x,
            normkit::plan(backward(1, 1024), h200, Strategy::Simple).columns.block_x);
  // gamma/beta alone: narrowed strips count as what they are against two-pass, below
  // column_vec_two_pass_min_rows rows (two_pass_min_rows_per_narrow_strip, the measured crossovers)
  const auto auto_gb = [&](std::int64_t m, std::int64_t n, DType d = DType::BF16,
                           const PlannerTable& t = without_tall_strips()) {
    return normkit::plan(backward(m, n, d), h200, Strategy::Auto, t).strategy;
  };
  EXPECT_EQ(auto_gb(384, 264), Strategy::Tiled);
  EXPECT_EQ(auto_gb(512, 512), Strategy::Tiled);
  EXPECT_EQ(auto_gb(768, 768, DType::F32), Strategy::Tiled);
  EXPECT_EQ(auto_gb(896, 1536), Strategy::Tiled);
  EXPECT_EQ(auto_gb(1024, 768), Strategy::TwoPass);
  EXPECT_EQ(auto_gb(1024, 1024), Strategy::TwoPass);
  EXPECT_EQ(auto_gb(768, 512), Strategy::TwoPass) << "32 narrowed strips x 24 rows";
  EXPECT_EQ(auto_gb(512, 512, DType::BF16, warp_wide), Strategy::TwoPass) << "warp-wide: 16 strips x 16 rows";
  // the keys: lanes 8, 16 or a warp
  const std::string path = ::testing::TempDir() + "normkit_strip_lanes_table.txt";
  { std::ofstream(path) << "tiled_min_strip_lanes = 8\ntiled_narrow_strips_min_rows = 64\n"
                           "tiled_narrow_max_strips_percent = 40\ntiled256_narrow_max_strips_percent = 60\n"; }
  const PlannerTable loaded = load_planner_table(path);
  EXPECT_EQ(loaded.tiled_min_strip_lanes, 8);
  EXPECT_EQ(loaded.tiled_narrow_strips_min_rows, 64);
  EXPECT_EQ(loaded.tiled_narrow_max_strips_percent, 40);
  EXPECT_EQ(loaded.tiled256_narrow_max_strips_percent, 60);
  { std::ofstream(path) << "tiled_min_strip_lanes = 12\n"; }
  EXPECT_THROW(load_planner_table(path), Error);
  std::remove(path.c_str());
}

TEST(Planner, ColumnStripsAreVectorisedOnlyWhereMeasuredFaster) {
  const PlannerTable t = without_tall_strips();  // the warp-wide strips' rule
  const DeviceFacts h200 = DeviceFacts::h200();
  auto vec = [&](std::int64_t m, std::int64_t n, Strategy s) {
    return normkit::plan(backward(m, n, DType::BF16), h200, s, t).columns.vec;
  };
  // narrow rows: 3-4 vectorised strips starve the GPU -> scalar strips, for tiled at any M ...
  EXPECT_EQ(vec(64, 1024, Strategy::Tiled), 1);
  EXPECT_EQ(vec(1 << 20, 768, Strategy::Tiled), 1);
  // ... and for two-pass until its row parts refill the grid
  EXPECT_EQ(vec(t.column_vec_two_pass_min_rows - 1, 1024, Strategy::TwoPass), 1);
  EXPECT_EQ(vec(t.column_vec_two_pass_min_rows, 1024, Strategy::TwoPass), 8);
  // a strip narrower than 32 lanes x 8 columns leaves lanes idle: scalar
  EXPECT_EQ(vec(1 << 20, 64, Strategy::TwoPass), 1);
  // wide rows: vectorised for both
  EXPECT_EQ(vec(7, t.column_vec_min_cols, Strategy::Tiled), 8);
  EXPECT_EQ(vec(7, t.column_vec_min_cols / 2, Strategy::Tiled), 1);
  EXPECT_EQ(vec(1024, t.column_vec_min_cols, Strategy::TwoPass), 8);
}

// Tall vectorised strips (PlannerTable::tiled_tall_max_strips, docs/NOTES.md entry 94): on 16-byte
// vectorised rows from 256 rows with dX (384 without), fewer 16-byte lanes than a warp, at most 64
// strips; auto takes them (with dX: in one launch) up to 2048 rows and 4 MiB of x.
TEST(Planner, TallStripsTakeTiledWhereMeasuredFaster) {
  const DeviceFacts h200 = DeviceFacts::h200();
  const Mask full{true, true, true}, gb{false, true, true};
  auto auto_plan = [&](std::int64_t m, std::int64_t n, DType dt, Mask mask) {
    return plan(backward(m, n, dt, mask), h200);
  };
  // bert, fp16 with dX: 96 vectors -> 2 lanes, 48 strips; 256 thread rows; dX beside them, 2 items
  const Plan bert = auto_plan(1024, 768, DType::F16, full);
  EXPECT_EQ(bert.strategy, Strategy::Tiled) << bert.describe();
  EXPECT_TRUE(bert.one_launch);
  EXPECT_TRUE(bert.columns.tall_strips());
  EXPECT_EQ(bert.columns.vec, 8);
  EXPECT_EQ(bert.columns.block_x, 2);
  EXPECT_EQ(bert.columns.block_y, 256);
  EXPECT_EQ(bert.columns.col_blocks, 48);
  EXPECT_EQ(bert.columns.rows_per_thread, 4);  // 256 x 4 rows cover M in one block iteration
  EXPECT_EQ(bert.row.items, 2);
  EXPECT_EQ(bert.row.threads_per_row * bert.row.rows_per_block, bert.columns.block_x * bert.columns.block_y);
  // gamma/beta alone, bf16 N = 4096: 512 vectors -> 8 lanes, 64 strips of 64 thread rows. 1024 x 4096 is
  // 8 MiB of x, past tiled_tall_max_bytes: tall when tiled is asked for; auto takes them at 512 x 4096 (4 MiB)
  const Plan gb_tiled = plan(backward(1024, 4096, DType::BF16, gb), h200, Strategy::Tiled);
  EXPECT_EQ(gb_tiled.strategy, Strategy::Tiled);
  EXPECT_TRUE(gb_tiled.columns.tall_strips());
  EXPECT_EQ(gb_tiled.columns.block_x, 8);
  EXPECT_EQ(gb_tiled.columns.block_y, 64);
  EXPECT_EQ(gb_tiled.columns.col_blocks, 64);
  EXPECT_FALSE(gb_tiled.one_launch);
  EXPECT_FALSE(auto_plan(1024, 4096, DType::BF16, gb).columns.tall_strips());
  const Plan gb_auto = auto_plan(512, 4096, DType::BF16, gb);
  EXPECT_EQ(gb_auto.strategy, Strategy::Tiled);
  EXPECT_TRUE(gb_auto.columns.tall_strips());
  EXPECT_EQ(gb_auto.columns.col_blocks, 64);
  EXPECT_FALSE(gb_auto.one_launch);
  // the boundaries: 4 MiB of x, 2048 rows, 256 rows with dX, 384 without
  const Plan at_bytes = auto_plan(2048, 1024, DType::BF16, full);
  EXPECT_EQ(at_bytes.strategy, Strategy::Tiled);
  EXPECT_TRUE(at_bytes.columns.tall_strips());
  EXPECT_TRUE(at_bytes.one_launch);
  EXPECT_NE(auto_plan(2048, 1032, DType::BF16, full).strategy, Strategy::Tiled);  // a vector past 4 MiB
  EXPECT_NE(auto_plan(2049, 512, DType::BF16, full).strategy, Strategy::Tiled);
  EXPECT_TRUE(plan(backward(2048, 4096, DType::BF16, full), h200, Strategy::Tiled).one_launch);  // asked: any N
  EXPECT_FALSE(plan(backward(2049, 512, DType::BF16, full), h200, Strategy::Tiled).one_launch);
  EXPECT_FALSE(auto_plan(255, 1024, DType::BF16, full).columns.tall_strips());
  EXPECT_FALSE(plan(backward(255, 1024, DType::BF16, full), h200, Strategy::Tiled).columns.tall_strips());
  EXPECT_TRUE(plan(backward(256, 1024, DType::BF16, full), h200, Strategy::Tiled).columns.tall_strips());
  EXPECT_FALSE(auto_plan(383, 1024, DType::BF16, gb).columns.tall_strips());
  EXPECT_FALSE(plan(backward(383, 1024, DType::BF16, gb), h200, Strategy::Tiled).columns.tall_strips());
  const Plan gb_at_rows = auto_plan(384, 1024, DType::BF16, gb);
  EXPECT_EQ(gb_at_rows.strategy, Strategy::Tiled);
  EXPECT_TRUE(gb_at_rows.columns.tall_strips());
  // rows that are not 16-byte vectorised keep the bands' strips
  EXPECT_FALSE(auto_plan(1024, 1001, DType::F16, full).columns.tall_strips());
  EXPECT_FALSE(plan(backward(1024, 1001, DType::F16, full), h200, Strategy::Tiled).columns.tall_strips());
  // fp32: 4 columns a lane, 192 vectors -> 4 lanes, 48 strips
  const Plan fp32 = auto_plan(1024, 768, DType::F32, full);
  EXPECT_EQ(fp32.strategy, Strategy::Tiled);
  EXPECT_TRUE(fp32.columns.tall_strips());
  EXPECT_TRUE(fp32.one_launch);
  EXPECT_EQ(fp32.columns.vec, 4);
  EXPECT_EQ(fp32.columns.block_x, 4);
  EXPECT_EQ(fp32.columns.col_blocks, 48);
  // the table turns them off: the previous rule (fused, one full launch) again
  EXPECT_EQ(plan(backward(1024, 768, DType::F16, full), h200, Strategy::Auto, without_tall_strips()).strategy,
            Strategy::Fused);
  EXPECT_FALSE(plan(backward(1024, 768, DType::F16, full), h200, Strategy::Tiled, without_tall_strips())
                   .columns.tall_strips());
  // too few strips stay with two-pass: 8 (N = 64) with dX, fewer than 32 without (tiled_tall_*min_strips)
  const Plan gb_narrow = normkit::plan(backward(1024, 64, DType::BF16, {false, true, true}), DeviceFacts::h200());
  EXPECT_NE(gb_narrow.strategy, Strategy::Tiled) << gb_narrow.describe();
  const Plan gb_256 = normkit::plan(backward(1024, 256, DType::BF16, {false, true, true}), DeviceFacts::h200());
  EXPECT_TRUE(gb_256.strategy == Strategy::Tiled && gb_256.columns.tall_strips()) << gb_256.describe();
  const Plan dx_narrow = normkit::plan(backward(1024, 64, DType::BF16, {true, true, true}), DeviceFacts::h200());
  EXPECT_NE(dx_narrow.strategy, Strategy::Tiled) << dx_narrow.describe();  // 8 strips (tiled_tall_min_strips)
  const Plan dx_128 = normkit::plan(backward(1024, 128, DType::BF16, {true, true, true}), DeviceFacts::h200());
  EXPECT_TRUE(dx_128.strategy == Strategy::Tiled && dx_128.one_launch && dx_128.columns.tall_strips())
      << dx_128.describe();
  // gamma/beta alone on tall strips that fill the GPU (tiled_tall_gb_full_grid_percent): at any M and
  // size. bf16 N = 16384: 2048 vectors -> 16 lanes, 128 strips (97 % of 132 SMs); fused before.
  ASSERT_EQ(default_planner_table().tiled_tall_gb_full_grid_percent, 96);
  for (const std::int64_t m : {384, 16384, 1 << 20}) {
    const Plan wide = auto_plan(m, 16384, DType::BF16, gb);
    EXPECT_EQ(wide.strategy, Strategy::Tiled) << m << ": " << wide.describe();
    EXPECT_TRUE(wide.columns.tall_strips()) << m;
    EXPECT_EQ(wide.columns.block_x, 16) << m;
    EXPECT_EQ(wide.columns.col_blocks, 128) << m;
  }
  const Plan wide_fp32 = auto_plan(16384, 8192, DType::F32, gb);  // 2048 vectors of 4: 128 strips
  EXPECT_TRUE(wide_fp32.strategy == Strategy::Tiled && wide_fp32.columns.tall_strips()) << wide_fp32.describe();
  // 96 strips (N = 12288, 73 %) and 64 (N = 8192) do not fill it; with dX the rule does not apply
  EXPECT_EQ(auto_plan(16384, 12288, DType::BF16, gb).strategy, Strategy::Fused);
  EXPECT_EQ(auto_plan(16384, 8192, DType::BF16, gb).strategy, Strategy::Fused);
  EXPECT_EQ(auto_plan(16384, 16384, DType::BF16, full).strategy, Strategy::Fused);
  PlannerTable no_full_grid;
  no_full_grid.tiled_tall_gb_full_grid_percent = 0;
  EXPECT_EQ(plan(backward(16384, 16384, DType::BF16, gb), h200, Strategy::Auto, no_full_grid).strategy, Strategy::Fused);
  // a device of fewer SMs is filled by fewer strips: 64 strips on 66 SMs
  DeviceFacts half = h200;
  half.sm_count = 66;
  EXPECT_EQ(plan(backward(16384, 8192, DType::BF16, gb), half).strategy, Strategy::Tiled);
  // Beyond one wave (132 strips of 8 rows a thread: one block an SM) only with a last wave of at least
  // tiled_tall_gb_min_last_wave_percent (40) of one: 136 / 144 / 160 strips (N = 17408 / 18432 / 20480,
  // 3 / 9 / 21 %) keep two-pass (H100: 1.02x fused, 0.89-0.92x tiled); 192 (N = 24576, 45 %), 256 (94 %)
  // and 264 (two whole waves) take tiled.
  ASSERT_EQ(default_planner_table().tiled_tall_gb_min_last_wave_percent, 40);
  ASSERT_EQ(tall_strip_blocks_per_sm(kTallStripMaxRowsPerThread), 1);
  for (const std::int64_t n : {17408, 18432, 20480}) {
    const Plan p = auto_plan(16384, n, DType::BF16, gb);
    EXPECT_EQ(p.strategy, Strategy::TwoPass) << n << ": " << p.describe();
  }
  for (const std::int64_t n : {24576, 32768, 33792}) {
    const Plan p = auto_plan(16384, n, DType::BF16, gb);
    EXPECT_TRUE(p.strategy == Strategy::Tiled && p.columns.tall_strips()) << n << ": " << p.describe();
  }
  // on fewer than tiled_tall_short_wave_min_rows (4096) rows a strip's walk is short: tiled still
  ASSERT_EQ(default_planner_table().tiled_tall_short_wave_min_rows, 4096);
  for (const std::int64_t m : {384, 1024, 2048}) {
    const Plan p = auto_plan(m, 20480, DType::BF16, gb);
    EXPECT_TRUE(p.strategy == Strategy::Tiled && p.columns.tall_strips()) << m << ": " << p.describe();
  }
  // where the mixed rule takes tiled (4096 rows, below fused_gb_min_rows), two-pass instead
  for (const std::int64_t n : {17408, 18432, 20480})
    EXPECT_EQ(auto_plan(4096, n, DType::BF16, gb).strategy, Strategy::TwoPass) << n;
  const Plan fp32_192 = auto_plan(4096, 12288, DType::F32, gb);  // 3072 vectors of 4: 192 strips (45 %)
  EXPECT_TRUE(fp32_192.strategy == Strategy::Tiled && fp32_192.columns.tall_strips()) << fp32_192.describe();
  PlannerTable any_last_wave;
  any_last_wave.tiled_tall_gb_min_last_wave_percent = 0;
  EXPECT_EQ(plan(backward(16384, 20480, DType::BF16, gb), h200, Strategy::Auto, any_last_wave).strategy,
            Strategy::Tiled);
  // at 2 rows a thread (the table's cap) two blocks an SM: 160 strips are one wave of 264 slots
  PlannerTable two_rows = default_planner_table();
  two_rows.tiled_tall_strip_max_rows_per_thread = 2;
  ASSERT_EQ(tall_strip_blocks_per_sm(2), 2);
  EXPECT_EQ(plan(backward(16384, 20480, DType::BF16, gb), h200, Strategy::Auto, two_rows).strategy, Strategy::Tiled);
}

// ExecConfig::table reaches the planner of a call (the bench's --tune times plans with it).
TEST(PlannerTable, ExecConfigTableIsThePlannersTableForThatCall) {
  const std::int64_t m = default_planner_table().fused_min_rows, n = 64;  // fused by rows alone (default)
  std::vector<float> x(std::size_t(m * n), 0.5f), dy(std::size_t(m * n), 0.25f), dx(std::size_t(m * n));
  std::vector<float> mean(std::size_t(m), 0.f), rstd(std::size_t(m), 1.f), w(n, 1.f), dw(n), db(n);
  LayerNormBackwardArgs a;
  a.dy = ConstRows{dy.data(), DType::F32, m, n};
  a.x = ConstRows{x.data(), DType::F32, m, n};
  a.mean = ConstVec{mean.data(), DType::F32, m};
  a.rstd = ConstVec{rstd.data(), DType::F32, m};
  a.weight = ConstVec{w.data(), DType::F32, n};
  a.dx = Rows{dx.data(), DType::F32, m, n};
  a.dweight = Vec{dw.data(), DType::F32, n};
  a.dbias = Vec{db.data(), DType::F32, n};
  ExecConfig config{Device::Cpu};
  EXPECT_EQ(plan_layer_norm_backward(a, config).strategy, Strategy::Fused);
  PlannerTable unfused;
  unfused.fused_enabled = false;
  config.table = &unfused;
  EXPECT_NE(plan_layer_norm_backward(a, config).strategy, Strategy::Fused);
  EXPECT_EQ(plan_layer_norm_backward(a, config).strategy,
            normkit::plan(backward(m, n, DType::F32, {true, true, true}), DeviceFacts{}, Strategy::Auto, unfused).strategy);
}

TEST(PlannerTable, RoundTripsThroughItsTextFormat) {
  PlannerTable t;
  t.simple_max_rows = 3;
  t.two_pass_min_rows_per_part = 96;
  t.fused_enabled = false;
  t.fused_single_launch = true;
  t.fused_min_bytes = 12345;
  t.fused_bytes_min_rows = 4321;
  t.fused_split_min_rows_per_cluster = 5;
  t.fused_single_launch_min_grid_percent = 42;
  t.fused_min_row_bytes = 2222;
  t.fp32_fused_min_row_bytes = 3333;
  t.ln_fused_mid_rows_min_row_bytes = 444;
  t.ln_fused_mid_rows_max_row_bytes = 4444;
  t.ln_fused_mid_rows_min_bytes = 44444;
  t.two_pass_min_rows = 99;
  t.two_pass_min_rows_per_strip = 7;
  t.two_pass_min_rows_per_strip_with_dx = 11;
  t.fused_min_rows = 777;
  t.fused_gb_min_rows = 555;
  t.fused_cluster_max_elements = 4242;
  t.fused_cluster_max_blocks = 4;
  t.fused_cluster_max_cols = 333;
  t.programmatic_launch = false;
  t.column_vec_min_cols = 4096;
  t.column_vec_two_pass_min_rows = 100;
  t.fused_unaligned_max_cols = 5;
  t.simple_min_cols = 99999;
  t.row_block_threads = 512;
  t.row_pipeline_stages = 3;
  t.row_split_max = 4;
  t.tiled_full_grid_percent = 55;
  t.fused_split_max = 2;
  t.small_grid_blocks = 3;
  t.forward_small_grid_blocks = 5;
  t.small_grid_items_target = 1;
  t.small_grid_block_threads = 128;
  t.short_row_max_vectors = 2;
  t.forward_short_row_items_target = 4;
  t.fused_short_row_items_target = 2;
  t.rms_forward_one_item_min_vectors = 77;
  t.fused_short_row_min_rows = 55;
  t.fused_short_row_dx_min_bytes = 1234;
  t.rms_fused_short_row_dx_min_bytes = 4321;
  t.fused_gb_max_split = 4;
  t.one_launch_items_target = 2;
  t.row_stage_bytes_per_sm = 12345;
  t.forward_split_max = 3;
  t.forward_split_min_vectors = 77;
  t.forward_split_ln_max_thread_elements = 99;
  t.forward_split_wide_items_min_vectors = 4321;
  t.forward_split_wide_items_min_rows = 99;
  t.forward_split_wide_min_vectors = 12345;
  t.fused_wide_min_bytes = 1 << 20;
  t.rms_fused_wide_min_bytes = 3 << 20;
  t.simple_few_rows_max = 3;
  t.simple_few_rows_min_cols = 777;
  t.ln_simple_few_wide_rows_max = 6;
  t.ln_simple_few_wide_rows_min_cols = 8888;
  t.rms_forward_packed_min_bytes = 4097;
  t.forward_packed_items_target = 4;
  t.forward_packed_block_threads = 128;
  const std::string path = ::testing::TempDir() + "normkit_table.txt";
  { std::ofstream(path) << format_planner_table(t); }
  const PlannerTable back = load_planner_table(path);
  EXPECT_EQ(format_planner_table(back), format_planner_table(t));
  std::remove(path.c_str());
}

// The H100 SXM has a built-in table of its own, chosen by the device's name and SM count; every other GPU
// (and the CPU path) plans with the H200's.
TEST(PlannerTable, BuiltinTableOfTheDevice) {
  EXPECT_EQ(builtin_table_for("NVIDIA H100 80GB HBM3", 132), BuiltinTable::H100Sxm);
  EXPECT_EQ(builtin_table_for("NVIDIA H100 80GB HBM3", 114), BuiltinTable::H200);  // not the GPU it was measured on
  EXPECT_EQ(builtin_table_for("NVIDIA H100 PCIe", 114), BuiltinTable::H200);
  EXPECT_EQ(builtin_table_for("NVIDIA H100 NVL", 132), BuiltinTable::H200);
  EXPECT_EQ(builtin_table_for("NVIDIA H200", 132), BuiltinTable::H200);
  EXPECT_EQ(builtin_table_for("", 0), BuiltinTable::H200);
  EXPECT_STREQ(builtin_table_name(BuiltinTable::H100Sxm), "H100 SXM");
  EXPECT_STREQ(builtin_table_name(BuiltinTable::H200), "H200");
  EXPECT_EQ(DeviceFacts{}.builtin_table, BuiltinTable::H200);
  EXPECT_EQ(DeviceFacts::h100_sxm().builtin_table, BuiltinTable::H100Sxm);

  // The H100's table is the H200's but for the keys planner.cpp's h100_sxm_table documents.
  const auto lines = [](const PlannerTable& t) {
    std::vector<std::string> out;
    std::istringstream in(format_planner_table(t));
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') out.push_back(line);
    return out;
  };
  const std::vector<std::string> h200 = lines(builtin_planner_table(BuiltinTable::H200));
  const std::vector<std::string> h100 = lines(builtin_planner_table(BuiltinTable::H100Sxm));
  EXPECT_EQ(h200, lines(PlannerTable{}));
  ASSERT_EQ(h200.size(), h100.size());
  std::vector<std::string> changed;
  for (std::size_t i = 0; i < h100.size(); ++i)
    if (h100[i] != h200[i]) changed.push_back(h100[i]);
  EXPECT_EQ(changed, (std::vector<std::string>{"tiled_tall_min_strips = 9", "tiled_tall_few_max_rows = 1024",
                                               "rms_forward_packed_min_bytes = 4193280", "fused_short_row_min_rows = 32768",
                                               "fused_cached_split_max = 16"}));
}

// Without ExecConfig::table (and without NORMKIT_PLANNER_TABLE, which CTest leaves unset here), a plan
// for a device takes that device's built-in table: the plans its keys move differ, the rest agree.
TEST(PlannerTable, PlanTakesTheDevicesBuiltinTable) {
  if (std::getenv("NORMKIT_PLANNER_TABLE") != nullptr && *std::getenv("NORMKIT_PLANNER_TABLE") != '\0')
    GTEST_SKIP() << "NORMKIT_PLANNER_TABLE replaces the built-in tables";
  const DeviceFacts h200 = DeviceFacts::h200(), h100 = DeviceFacts::h100_sxm();
  EXPECT_EQ(&default_planner_table(h100), &builtin_planner_table(BuiltinTable::H100Sxm));
  EXPECT_EQ(&default_planner_table(h200), &builtin_planner_table(BuiltinTable::H200));
  EXPECT_EQ(&default_planner_table(), &builtin_planner_table(BuiltinTable::H200));
  EXPECT_EQ(planner_table_source(h100), "built-in (H100 SXM)");
  EXPECT_EQ(planner_table_source(h200), "built-in (H200)");
  // a row of 131072 bf16 columns, full backward: 2-item blocks over a cluster of 16 on the H100, the wide
  // layout over 8 on the H200 (entries 92, 102)
  const Problem wide = backward(2048, 131072, DType::BF16, {true, true, true});
  const Plan wide_h100 = plan(wide, h100), wide_h200 = plan(wide, h200);
  EXPECT_EQ(wide_h100.strategy, Strategy::Fused);
  EXPECT_EQ(wide_h100.row.split, 16);
  EXPECT_EQ(wide_h100.row.items, 2);
  EXPECT_EQ(wide_h200.row.split, 8) << wide_h200.describe();
  EXPECT_EQ(plan(wide, h100, Strategy::Auto, builtin_planner_table(BuiltinTable::H200)).describe(), wide_h200.describe());
  // gamma/beta of 16384 rows of 64 bf16 columns: fused on the H200 (fused_short_row_min_rows 16384), not on
  // the H100 (32768)
  const Problem short_rows = backward(16384, 64, DType::BF16);
  EXPECT_EQ(plan(short_rows, h200).strategy, Strategy::Fused);
  EXPECT_NE(plan(short_rows, h100).strategy, Strategy::Fused);
  // a full backward of 1024 rows of 96 bf16 columns (12 tall strips): tiled on tall strips on the H100 only
  const Problem few_strips = backward(1024, 96, DType::BF16, {true, true, true});
  EXPECT_EQ(plan(few_strips, h100).strategy, Strategy::Tiled);
  EXPECT_NE(plan(few_strips, h200).strategy, Strategy::Tiled);
  // 8 strips (64 bf16 columns): tall strips on the H100 up to 1024 rows (tiled_tall_few_max_rows), not beyond
  EXPECT_EQ(plan(backward(1024, 64, DType::BF16, {true, true, true}), h100).strategy, Strategy::Tiled);
  EXPECT_NE(plan(backward(1025, 64, DType::BF16, {true, true, true}), h100).strategy, Strategy::Tiled);
  EXPECT_NE(plan(backward(1024, 64, DType::BF16, {true, true, true}), h200).strategy, Strategy::Tiled);
  // a shape none of the H100's keys touch plans alike
  const Problem llm = backward(131072, 4096, DType::BF16, {true, true, true});
  EXPECT_EQ(plan(llm, h100).describe(), plan(llm, h200).describe());
}

TEST(PlannerTable, MalformedFileNamesTheLine) {
  const std::string path = ::testing::TempDir() + "normkit_bad_table.txt";
  // loading `content` must throw normkit::Error whose message holds every one of `parts`
  auto expect_error = [&](const std::string& content, std::initializer_list<const char*> parts) {
    { std::ofstream(path) << content; }
    try {
      load_planner_table(path);
      ADD_FAILURE() << "must throw: " << content;
    } catch (const Error& e) {
      for (const char* part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error("# comment\nsimple_max_rows = 4\nno_such_key = 1\n", {"line 3", "no_such_key"});
  expect_error("row_block_threads = 300\n", {"row_block_threads"});
  expect_error("row_pipeline_stages = 9\n", {"row_pipeline_stages"});
  expect_error("forward_packed_block_threads = 1024\n", {"forward_packed_block_threads", "512"});
  expect_error("forward_packed_block_threads = 100\n", {"forward_packed_block_threads", "power of two"});
  expect_error("fused_cluster_max_blocks = 16\n", {"fused_cluster_max_blocks"});  // beyond the portable cluster size
  expect_error("fused_min_elements = 2097152\n", {"fused_min_bytes"});  // an older table's key says what replaced it
  // values beyond their field's range are refused, not cast (2^32 + 1 became 1 in an int)
  expect_error("two_pass_target_blocks_per_sm = 4294967297\n", {"line 1", "two_pass_target_blocks_per_sm", "2147483647"});
  expect_error("row_blocks_per_sm = 2147483648\n", {"row_blocks_per_sm", "at most"});
  expect_error("fused_enabled = 2\n", {"fused_enabled", "0 or 1"});
  EXPECT_THROW(load_planner_table(path + ".missing"), Error);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace normkit
