// Dispatch coverage: the seed's test_configs_cover_all_tile_branches (every TileBand under forced
// Tiled, several strategies under auto), the dispatch bands (M = 32, 96, 192, 1024), the band
// boundaries (63/64, 127/128, 255/256), the two-pass cut-over found by scanning the planner with
// fused disabled, two-pass at huge M, the fused backward as one thread-block cluster, and the
// forward's small-grid walk at each group width -- each run on the GPU and compared with the reference.
#include <set>

#include "harness.h"

namespace normkit::gputest {
namespace {

using DT = DType;

/// The seed's bands: Tile-8 (M < 64), Tile-64, Tile-128, Tile-256 (M >= 256).
TileBand seed_band(std::int64_t m) {
  if (m < 64) return TileBand::Tile8;
  if (m < 128) return TileBand::Tile64;
  if (m < 256) return TileBand::Tile128;
  return TileBand::Tile256;
}

std::string band_id(TileBand b) {
  switch (b) {
    case TileBand::None: return "none";
    case TileBand::Tile8: return "tile8";
    case TileBand::Tile64: return "tile64";
    case TileBand::Tile128: return "tile128";
    case TileBand::Tile256: return "tile256";
  }
  return "unknown";
}

Problem planner_problem(Op op, std::int64_t m, std::int64_t n, DType t, Mask mask) {
  Problem p;
  p.op = op;
  p.rows = m;
  p.cols = n;
  p.dtype = t;
  p.weight_dtype = t;
  p.mask = mask;
  if (is_rms(op)) p.mask.dbias = false;
  p.rows_vector_aligned = (n * std::int64_t(dtype_size(t))) % 16 == 0;
  return p;
}

TEST(Dispatch, ConfigsCoverAllTileBranches) {
  const DeviceFacts facts = current_device_facts();
  PlannerTable no_fused = default_planner_table();
  no_fused.fused_enabled = false;
  std::set<TileBand> bands;
  std::set<Strategy> auto_default, auto_any;
  std::set<Strategy> supported_somewhere;
  for (Op op : {Op::LayerNormBackward, Op::RmsNormBackward})
    for (DType t : {DT::F16, DT::BF16, DT::F32})
      for (Mask mask : {Mask{true, true, true}, Mask{false, true, true}, Mask{false, true, false}})
        for (std::int64_t m : {1, 8, 9, 32, 63, 64, 96, 127, 128, 192, 255, 256, 1024, 4096, 131072})
          for (std::int64_t n : {1, 64, 512, 768, 1024, 4096, 8192, 65536, 262144}) {
            const Problem p = planner_problem(op, m, n, t, mask);
            SCOPED_TRACE(std::string(op_name(op)) + " M=" + std::to_string(m) + " N=" + std::to_string(n) + " " +
                         dtype_id(t) + " mask=" + mask_id(p.mask));
            for (Strategy s : all_strategies())
              if (strategy_supported(p, s)) supported_somewhere.insert(s);
            ASSERT_TRUE(strategy_supported(p, Strategy::Tiled));
            const Plan tiled = plan(p, facts, Strategy::Tiled);
            EXPECT_EQ(band_id(tiled.columns.band), band_id(seed_band(m)));
            bands.insert(tiled.columns.band);
            const Plan a = plan(p, facts, Strategy::Auto);
            EXPECT_NE(a.strategy, Strategy::Auto);
            auto_default.insert(a.strategy);
            auto_any.insert(a.strategy);
            auto_any.insert(plan(p, facts, Strategy::Auto, no_fused).strategy);
          }
  for (TileBand b : {TileBand::Tile8, TileBand::Tile64, TileBand::Tile128, TileBand::Tile256})
    EXPECT_TRUE(bands.count(b)) << "forced tiled never produced band " << band_id(b);
  EXPECT_GE(auto_default.size(), 2u) << "auto (default table) chose only one strategy over all shapes";
  for (Strategy s : {Strategy::Simple, Strategy::Tiled, Strategy::TwoPass, Strategy::Fused}) {
    EXPECT_TRUE(supported_somewhere.count(s)) << strategy_id(s) << " is supported by no shape";
    EXPECT_TRUE(auto_any.count(s)) << "auto never chooses " << strategy_id(s)
                                   << " (default table or fused disabled)";
  }
}

// ---- bands and boundaries: forced Tiled must use the seed band and match the reference ----

struct BandParam {
  std::int64_t m;
  TileBand band;
};

class DispatchBand : public testing::TestWithParam<BandParam> {};

TEST_P(DispatchBand, TiledBandMatchesReference) {
  const BandParam bp = GetParam();
  for (bool rms : {false, true}) {
    const Spec spec = rms ? rms_spec("rms_band_M" + std::to_string(bp.m), bp.m, 768, DT::F16)
                          : ln_spec("band_M" + std::to_string(bp.m), bp.m, 768, DT::F16);
    SCOPED_TRACE(spec.name);
    const auto hc = make_host_case(spec);
    const DeviceCase dc = upload_case(*hc, test_stream());
    const RefBackward ref = reference_backward(*hc);
    for (Mask mask : {spec.full_mask(), Mask{false, true, !rms}}) {
      const BackwardOut out = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream());
      ASSERT_TRUE(out.ran) << "tiled must serve every shape";
      EXPECT_EQ(band_id(out.plan.columns.band), band_id(bp.band)) << "M = " << bp.m;
      // below Tile-256 (blocks of at most 512 threads: up to 16 rows a thread) one block iteration
      // covers M: the strips' loads are one round trip
      if (bp.m < 256) EXPECT_GE(out.plan.columns.rows_per_iteration(), bp.m) << out.plan.describe();
      expect_backward_matches(*hc, out, ref);
    }
    for (Strategy s : all_strategies()) check_backward(*hc, dc, ref, spec.full_mask(), s);
  }
}

std::string band_param_name(const testing::TestParamInfo<BandParam>& info) {
  return "M" + std::to_string(info.param.m) + "_" + band_id(info.param.band);
}

INSTANTIATE_TEST_SUITE_P(Bands, DispatchBand,
                         testing::Values(BandParam{32, TileBand::Tile8}, BandParam{96, TileBand::Tile64},
                                         BandParam{192, TileBand::Tile128}, BandParam{1024, TileBand::Tile256}),
                         band_param_name);
INSTANTIATE_TEST_SUITE_P(Boundaries, DispatchBand,
                         testing::Values(BandParam{63, TileBand::Tile8}, BandParam{64, TileBand::Tile64},
                                         BandParam{127, TileBand::Tile64}, BandParam{128, TileBand::Tile128},
                                         BandParam{255, TileBand::Tile128}, BandParam{256, TileBand::Tile256}),
                         band_param_name);

// ---- the two-pass cut-over ----

class TwoPassCutover : public testing::TestWithParam<std::int64_t> {};

TEST_P(TwoPassCutover, BothSidesMatchReference) {
  const std::int64_t n = GetParam();
  const DeviceFacts facts = current_device_facts();
  PlannerTable no_fused = default_planner_table();
  no_fused.fused_enabled = false;
  const Mask full{true, true, true};
  std::int64_t cut = -1;
  for (std::int64_t m = 1; m <= (std::int64_t(1) << 20); ++m) {
    if (plan(planner_problem(Op::LayerNormBackward, m, n, DT::F16, full), facts, Strategy::Auto, no_fused).strategy ==
        Strategy::TwoPass) {
      cut = m;
      break;
    }
  }
  ASSERT_GT(cut, 1) << "auto with fused disabled never chose two_pass for N = " << n << " up to M = 2^20";
  EXPECT_EQ(strategy_id(plan(planner_problem(Op::LayerNormBackward, cut + 1, n, DT::F16, full), facts,
                             Strategy::Auto, no_fused)
                            .strategy),
            "two_pass")
      << "the cut-over is not a clean boundary at M = " << cut;
  std::printf("[          ] N = %lld: two-pass cut-over (fused disabled) at M = %lld\n", (long long)n, (long long)cut);
  for (std::int64_t m : {cut - 1, cut, cut + 1}) {
    for (bool rms : {false, true}) {
      const std::string name = std::string(rms ? "rms_" : "") + "cutover_N" + std::to_string(n) + "_M" + std::to_string(m);
      const Spec spec = rms ? rms_spec(name, m, n, DT::F16) : ln_spec(name, m, n, DT::F16);
      SCOPED_TRACE(name);
      const auto hc = make_host_case(spec);
      const DeviceCase dc = upload_case(*hc, test_stream());
      const RefBackward ref = reference_backward(*hc);
      for (Strategy s : all_strategies()) {
        check_backward(*hc, dc, ref, spec.full_mask(), s);
        check_backward(*hc, dc, ref, Mask{false, true, !rms}, s);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, TwoPassCutover, testing::Values(64, 1024),
                         [](const testing::TestParamInfo<std::int64_t>& info) {
                           return "N" + std::to_string(info.param);
                         });

// ---- two-pass at huge M: the M-parallel branch ----

class TwoPassHugeM : public testing::TestWithParam<Spec> {};

TEST_P(TwoPassHugeM, MatchesReference) {
  const Spec& spec = GetParam();
  const DeviceFacts facts = current_device_facts();
  PlannerTable no_fused = default_planner_table();
  no_fused.fused_enabled = false;
  EXPECT_EQ(strategy_id(plan(planner_problem(spec.rms ? Op::RmsNormBackward : Op::LayerNormBackward, spec.M, spec.N,
                                             spec.dtype, spec.full_mask()),
                             facts, Strategy::Auto, no_fused)
                            .strategy),
            "two_pass")
      << "the unfused planner should pick two-pass at huge M and narrow N";
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}}) {
    const BackwardOut out = gpu_backward(*hc, dc, mask, Strategy::TwoPass, test_stream());
    ASSERT_TRUE(out.ran);
    EXPECT_GT(out.plan.columns.row_parts, 1) << "two-pass at huge M must split the rows";
    expect_backward_matches(*hc, out, ref);
    check_backward(*hc, dc, ref, mask, Strategy::Auto);
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, TwoPassHugeM,
                         testing::Values(ln_spec("ln_M524288_N64_f16", 524288, 64, DT::F16),
                                         ln_spec("ln_M65537_N1024_bf16", 65537, 1024, DT::BF16),
                                         rms_spec("rms_M524288_N64_f16", 524288, 64, DT::F16)),
                         spec_name);

}  // namespace
}  // namespace normkit::gputest

namespace normkit::gputest {
namespace {

// ---- small problems: the fused backward as one thread-block cluster ----

class FusedCluster : public testing::TestWithParam<Spec> {};

TEST_P(FusedCluster, OneClusterLaunchMatchesReferenceWithTheSameBitsEveryRun) {
  const Spec& spec = GetParam();
  // the cluster rule as the d472e85 probe set it (off by default since programmatic launch)
  PlannerTable clusters;
  clusters.fused_cluster_max_elements = 1 << 16;
  clusters.fused_cluster_max_cols = 512;
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}, Mask{false, false, !spec.rms}}) {
    if (!mask.any_gamma_beta()) continue;  // RMSNorm has no dbias
    SCOPED_TRACE(mask_id(mask));
    const BackwardOut first = gpu_backward(*hc, dc, mask, Strategy::Fused, test_stream(), WsMode::Explicit, &clusters);
    ASSERT_TRUE(first.ran) << first.why_not;
    ASSERT_GE(first.plan.cluster_blocks, 2) << "expected a cluster plan: " << first.plan.describe();
    EXPECT_EQ(first.plan.workspace_bytes, 0u);
    expect_backward_matches(*hc, first, ref);
    for (int run = 1; run < 20 && !HasFailure(); ++run)
      expect_same_bits(first, gpu_backward(*hc, dc, mask, Strategy::Fused, test_stream(), WsMode::Explicit, &clusters),
                       "run " + std::to_string(run));
    check_backward(*hc, dc, ref, mask, Strategy::Auto);
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, FusedCluster,
                         testing::Values(ln_spec("cluster_ln_M32_N512_f16", 32, 512, DT::F16),
                                         ln_spec("cluster_ln_M97_N256_bf16", 97, 256, DT::BF16),
                                         rms_spec("cluster_rms_M128_N512_bf16", 128, 512, DT::BF16),
                                         ln_spec("cluster_ln_M255_N64_bf16", 255, 64, DT::BF16),
                                         ln_spec("cluster_ln_M150_N400_f32", 150, 400, DT::F32),
                                         ln_spec("cluster_ln_M1023_N64_f16", 1023, 64, DT::F16),
                                         rms_spec("cluster_rms_M200_N320_f16", 200, 320, DT::F16)),
                         spec_name);

// ---- the fused backward's finish: one cooperative launch (the default, table key fused_single_launch)
// or the partial reduce as a second launch ----

class FusedGridSync : public testing::TestWithParam<Spec> {};

TEST_P(FusedGridSync, BothFinishesMatchReferenceWithTheSameBitsEveryRun) {
  const Spec& spec = GetParam();
  PlannerTable second_launch;
  second_launch.fused_single_launch = false;
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (const bool single : {true, false}) {
    const PlannerTable* table = single ? &default_planner_table() : &second_launch;
    for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}, Mask{true, false, false}}) {
      SCOPED_TRACE(std::string(single ? "single launch " : "second launch ") + mask_id(mask));
      const BackwardOut first = gpu_backward(*hc, dc, mask, Strategy::Fused, test_stream(), WsMode::Explicit, table);
      ASSERT_TRUE(first.ran) << first.why_not;
      if (mask.any_gamma_beta()) {
        ASSERT_EQ(first.plan.single_launch, single) << first.plan.describe();
        ASSERT_GT(first.plan.partial_rows, 1) << first.plan.describe();
      }
      expect_backward_matches(*hc, first, ref);
      for (int run = 1; run < 20 && !HasFailure(); ++run)
        expect_same_bits(first, gpu_backward(*hc, dc, mask, Strategy::Fused, test_stream(), WsMode::Explicit, table),
                         "run " + std::to_string(run));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, FusedGridSync,
                         testing::Values(ln_spec("gridsync_ln_M4096_N1024_bf16", 4096, 1024, DT::BF16),
                                         rms_spec("gridsync_rms_M20000_N768_f16", 20000, 768, DT::F16),
                                         ln_spec("gridsync_ln_M3001_N1000_f32", 3001, 1000, DT::F32),
                                         ln_spec("gridsync_ln_M65537_N64_bf16", 65537, 64, DT::BF16)),
                         spec_name);

}  // namespace
}  // namespace normkit::gputest

namespace normkit::gputest {
namespace {

// ---- dX and tiled gamma/beta as one launch (Plan::one_launch, PlannerTable::one_launch_max_elements) ----

class OneLaunch : public testing::TestWithParam<Spec> {};

TEST_P(OneLaunch, MatchesReferenceAndTheTwoLaunchesGammaBetaBitForBit) {
  const Spec& spec = GetParam();
  PlannerTable two_launches;
  two_launches.one_launch_max_elements = 0;
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (Mask mask : {spec.full_mask(), Mask{true, true, false}, Mask{true, false, !spec.rms}}) {
    if (!mask.any_gamma_beta()) continue;  // RMSNorm has no dbias
    SCOPED_TRACE(mask_id(mask));
    const BackwardOut one = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream());
    ASSERT_TRUE(one.ran) << one.why_not;
    ASSERT_TRUE(one.plan.one_launch) << "expected one launch: " << one.plan.describe();
    expect_backward_matches(*hc, one, ref);
    // The column strips are the same in both plans: dgamma / dbeta keep their bits. dX is laid out
    // over the tiled block in one launch (the row sums may add in another order), so it is held to
    // the reference above.
    const BackwardOut two = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &two_launches);
    ASSERT_FALSE(two.plan.one_launch) << two.plan.describe();
    EXPECT_TRUE(one.dweight.bytes == two.dweight.bytes) << "dweight: one launch vs dX + tiled";
    EXPECT_TRUE(one.dbias.bytes == two.dbias.bytes) << "dbias: one launch vs dX + tiled";
    if (one.plan.row.threads_per_row == two.plan.row.threads_per_row && one.plan.row.items == two.plan.row.items)
      EXPECT_TRUE(one.dx.bytes == two.dx.bytes) << "dx: the same row layout in both plans";
    for (int run = 1; run < 5 && !HasFailure(); ++run)
      expect_same_bits(one, gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream()), "run " + std::to_string(run));
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, OneLaunch,
                         testing::Values(ln_spec("onelaunch_ln_M32_N512_f16", 32, 512, DT::F16),
                                         ln_spec("onelaunch_ln_M96_N768_f16", 96, 768, DT::F16),
                                         ln_spec("onelaunch_ln_M192_N1024_bf16", 192, 1024, DT::BF16),
                                         rms_spec("onelaunch_rms_M77_N1000_bf16", 77, 1000, DT::BF16),
                                         ln_spec("onelaunch_ln_M1_N64_f32", 1, 64, DT::F32),
                                         ln_spec("onelaunch_ln_M120_N2048_f32", 120, 2048, DT::F32),
                                         with_weight_dtype(ln_spec("onelaunch_ln_M9_N4096_bf16_w32", 9, 4096, DT::BF16),
                                                           DT::F32),
                                         padded(rms_spec("onelaunch_rms_M63_N256_f16_padded", 63, 256, DT::F16), 8),
                                         // Tile-128 strips of 16 rows a thread (one block iteration)
                                         rms_spec("onelaunch_rms_M255_N512_f32", 255, 512, DT::F32),
                                         padded(ln_spec("onelaunch_ln_M129_N768_f16_padded", 129, 768, DT::F16), 8)),
                         spec_name);

// ---- tiled strips narrower than a warp (PlannerTable::tiled_min_strip_lanes; here at any M and
// strip count): 16 and 8 lanes a strip against warp-wide ones, with dX in one launch and without,
// gamma/beta alone, every band, odd N (a last strip with lanes past N), unaligned rows (scalar dX),
// fp32 weights ----

class NarrowStrips : public testing::TestWithParam<Spec> {};

TEST_P(NarrowStrips, MatchReferenceWithTheSameBitsEveryRun) {
  const Spec& spec = GetParam();
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  PlannerTable warp_wide;  // tall strips off: these are the scalar strips' cases
  warp_wide.tiled_min_strip_lanes = kWarpSize;
  warp_wide.tiled_tall_max_strips = 0;
  for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}}) {
    const BackwardOut wide = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &warp_wide);
    ASSERT_TRUE(wide.ran) << wide.why_not;
    ASSERT_EQ(wide.plan.columns.block_x, kWarpSize) << wide.plan.describe();
    expect_backward_matches(*hc, wide, ref);
    const int threads = wide.plan.columns.block_x * wide.plan.columns.block_y;
    for (int lanes : {16, 8}) {
      SCOPED_TRACE(std::to_string(lanes) + " lanes, " + mask_id(mask));
      PlannerTable table;
      table.tiled_tall_max_strips = 0;
      table.tiled_min_strip_lanes = lanes;
      table.tiled_narrow_strips_min_rows = 0;
      table.tiled_narrow_max_strips_percent = table.tiled256_narrow_max_strips_percent = 100;
      const BackwardOut out = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &table);
      ASSERT_TRUE(out.ran) << out.why_not;
      ASSERT_EQ(out.plan.columns.block_x, lanes) << out.plan.describe();
      EXPECT_EQ(out.plan.columns.block_x * out.plan.columns.block_y, threads) << "the block keeps its threads";
      EXPECT_EQ(out.plan.one_launch, wide.plan.one_launch) << out.plan.describe();
      expect_backward_matches(*hc, out, ref);
      for (int run = 1; run < 3 && !HasFailure(); ++run)
        expect_same_bits(out, gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &table),
                         "run " + std::to_string(run));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dispatch, NarrowStrips,
                         testing::Values(ln_spec("narrow_ln_M32_N512_f16", 32, 512, DT::F16),
                                         ln_spec("narrow_ln_M96_N768_bf16", 96, 768, DT::BF16),
                                         rms_spec("narrow_rms_M192_N1024_bf16", 192, 1024, DT::BF16),
                                         ln_spec("narrow_ln_M255_N1000_f32", 255, 1000, DT::F32),
                                         with_weight_dtype(ln_spec("narrow_ln_M700_N640_bf16_w32", 700, 640, DT::BF16),
                                                           DT::F32),
                                         rms_spec("narrow_rms_M7_N1001_f16", 7, 1001, DT::F16),
                                         padded(ln_spec("narrow_ln_M150_N264_f16_padded", 150, 264, DT::F16), 8)),
                         spec_name);

// ---- tall vectorised strips (PlannerTable::tiled_tall_strip_lanes): 1..16 lanes of 16 bytes and
// kTallStripThreads / lanes thread rows, the warps' thread rows folded by shuffles; with dX in one
// launch (strips first) and in two, gamma/beta alone, every rows-a-thread instance (M = 1 .. several
// block iterations), a last strip with lanes past N, fp32 rows and weights, padded rows ----

class TallStrips : public testing::TestWithParam<Spec> {};

TEST_P(TallStrips, MatchReferenceWithTheSameBitsEveryRunInOneLaunchOrTwo) {
  const Spec& spec = GetParam();
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  const int vec = int(16 / dtype_size(spec.dtype));
  int lanes_run = 0;
  for (int lanes : {1, 2, 4, 8, 16}) {
    if (spec.N < std::int64_t(lanes) * vec) continue;  // no vector for every lane: tall strips not taken
    ++lanes_run;
    PlannerTable one_launch, two_launches;
    one_launch.tiled_tall_strip_lanes = two_launches.tiled_tall_strip_lanes = lanes;
    one_launch.tiled_tall_min_rows = two_launches.tiled_tall_min_rows = 0;
    one_launch.tiled_tall_gb_min_rows = two_launches.tiled_tall_gb_min_rows = 0;
    one_launch.tiled_tall_max_rows = std::int64_t(1) << 40;
    two_launches.tiled_tall_max_rows = 0;
    for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}, Mask{true, false, !spec.rms}, Mask{true, true, false}}) {
      if (!mask.any_gamma_beta()) continue;  // RMSNorm without dweight
      SCOPED_TRACE(std::to_string(lanes) + " lanes, " + mask_id(mask));
      const BackwardOut out = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &one_launch);
      ASSERT_TRUE(out.ran) << out.why_not;
      ASSERT_TRUE(out.plan.columns.tall_strips()) << out.plan.describe();
      ASSERT_EQ(out.plan.columns.block_x, lanes) << out.plan.describe();
      EXPECT_EQ(out.plan.one_launch, mask.dx) << out.plan.describe();
      expect_backward_matches(*hc, out, ref);
      for (int run = 1; run < 3 && !HasFailure(); ++run)
        expect_same_bits(out, gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &one_launch),
                         "run " + std::to_string(run));
      if (!mask.dx) continue;
      const BackwardOut two = gpu_backward(*hc, dc, mask, Strategy::Tiled, test_stream(), WsMode::Explicit, &two_launches);
      ASSERT_TRUE(two.ran) << two.why_not;
      ASSERT_FALSE(two.plan.one_launch) << two.plan.describe();
      expect_backward_matches(*hc, two, ref);
      EXPECT_TRUE(out.dweight.bytes == two.dweight.bytes) << "dweight: one launch vs dX + tiled";
      EXPECT_TRUE(out.dbias.bytes == two.dbias.bytes) << "dbias: one launch vs dX + tiled";
    }
  }
  EXPECT_GT(lanes_run, 0) << "no lane count fits N = " << spec.N;
}

INSTANTIATE_TEST_SUITE_P(Dispatch, TallStrips,
                         testing::Values(ln_spec("tall_ln_M1024_N768_f16", 1024, 768, DT::F16),
                                         rms_spec("tall_rms_M4096_N1024_bf16", 4096, 1024, DT::BF16),
                                         ln_spec("tall_ln_M5000_N1000_bf16", 5000, 1000, DT::BF16),
                                         ln_spec("tall_ln_M1_N512_bf16", 1, 512, DT::BF16),
                                         ln_spec("tall_ln_M130_N264_f16", 130, 264, DT::F16),
                                         ln_spec("tall_ln_M300_N2048_f32", 300, 2048, DT::F32),
                                         with_weight_dtype(rms_spec("tall_rms_M777_N640_bf16_w32", 777, 640, DT::BF16),
                                                           DT::F32),
                                         padded(ln_spec("tall_ln_M2049_N256_f16_padded", 2049, 256, DT::F16), 8)),
                         spec_name);

// The forward's small-grid walk (unstaged, up to 2 vectors a thread; forward.cu) sums a row in one
// form per group width: a warp's butterfly, 2-4 warps reading each other's sums directly, wider groups
// a second butterfly after a block barrier. A case for each width, against the reference, and the
// same bits on a second call; each asserts the layout it was chosen for.
struct SmallGridForwardCase {
  Spec spec;
  int threads_per_row;
};

class SmallGridForward : public testing::TestWithParam<SmallGridForwardCase> {};

TEST_P(SmallGridForward, EveryGroupWidthMatchesReference) {
  const SmallGridForwardCase& c = GetParam();
  const auto hc = make_host_case(c.spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  // (rows of more than a warp's vectors take the one-row-a-block walk on such grids by default)
  const PlannerTable& table = forward_block_rows_table(false);
  const ForwardOut out = gpu_forward(*hc, dc, test_stream(), &table);
  const RowShape& row = out.plan.row;
  ASSERT_EQ(row.threads_per_row, c.threads_per_row) << out.plan.describe();
  ASSERT_TRUE(row.items > 0 && row.items <= 2 && row.stages == 0 && !row.packed && row.split == 1)
      << "expected the unstaged small-grid walk: " << out.plan.describe();
  expect_forward_matches(*hc, out, reference_forward(*hc));
  expect_same_bits(out, gpu_forward(*hc, dc, test_stream(), &table), "second call");
}

INSTANTIATE_TEST_SUITE_P(Dispatch, SmallGridForward,
                         testing::Values(SmallGridForwardCase{ln_spec("smallgrid_ln_M32_N512_f16", 32, 512, DT::F16), 32},
                                         SmallGridForwardCase{rms_spec("smallgrid_rms_M96_N768_bf16", 96, 768, DT::BF16), 64},
                                         SmallGridForwardCase{ln_spec("smallgrid_ln_M40_N2048_bf16", 40, 2048, DT::BF16), 128},
                                         SmallGridForwardCase{rms_spec("smallgrid_rms_M33_N2048_f16", 33, 2048, DT::F16), 128},
                                         SmallGridForwardCase{ln_spec("smallgrid_ln_M40_N1024_f32", 40, 1024, DT::F32), 128},
                                         SmallGridForwardCase{ln_spec("smallgrid_ln_M40_N4096_bf16", 40, 4096, DT::BF16), 256}),
                         [](const testing::TestParamInfo<SmallGridForwardCase>& info) { return info.param.spec.name; });

}  // namespace
}  // namespace normkit::gputest
