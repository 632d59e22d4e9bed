// Large problems: the seed's two xfails (huge M with a multi-dim normalized shape; huge M with
// undefined weight and defined bias) as passing tests, bitwise repeatability, wide rows
// (N = 262144 bf16, N = 131072 fp32), M*N > 2^31 elements, and mixed precision (fp32 weight with
// fp16/bf16 activations).
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "harness.h"

namespace normkit::gputest {
namespace {

using DT = DType;

// ---- seed xfail 1: x (100000, 8, 16) normalized over (8, 16), weight (8, 16) ----
// N = 8 * 16 = 128: dweight/dbias must have 128 values (the seed's huge-M branch sized its scratch
// from size(-1) = 16). dweight/dbias are 128-element vectors followed by poisoned guards that
// must stay untouched.

class HugeMMultiDimNormalizedShape : public testing::TestWithParam<Spec> {};

TEST_P(HugeMMultiDimNormalizedShape, GammaBetaHaveNValuesAndMatchReference) {
  const Spec& spec = GetParam();
  Bundle& b = cached_case(spec);
  const RefBackward& ref = b.backward_ref();
  ASSERT_EQ(ref.dweight.size(), 128u);
  for (Strategy s : {Strategy::TwoPass, Strategy::Auto}) {
    const BackwardOut out = gpu_backward(*b.host, b.dev, spec.full_mask(), s, test_stream());
    ASSERT_TRUE(out.ran) << strategy_id(s) << " must serve M = 100000, N = 128";
    if (s == Strategy::TwoPass) EXPECT_GT(out.plan.columns.row_parts, 1);
    expect_backward_matches(*b.host, out, ref);
  }
  for (Strategy s : {Strategy::Simple, Strategy::Tiled, Strategy::Fused})
    check_backward(*b.host, b.dev, ref, spec.full_mask(), s);
  check_forward(*b.host, b.dev, reference_forward(*b.host));
}

// dweight/dbias sized like the last normalized dim (16) instead of N (128) must be rejected with
// normkit::Error naming the argument, before anything is written.
TEST_P(HugeMMultiDimNormalizedShape, GradientOfLastDimSizeIsRejected) {
  const Spec& spec = GetParam();
  Bundle& b = cached_case(spec);
  const DType t = spec.dtype;
  DeviceBuffer dx(std::size_t(spec.M * spec.N) * dtype_size(t)), dw(256 * dtype_size(t)), db(256 * dtype_size(t));
  dx.poison(test_stream());
  dw.poison(test_stream());
  db.poison(test_stream());
  for (int which = 0; which < 2; ++which) {
    LayerNormBackwardArgs a;
    a.dy = ConstRows{b.dev.dy.get(), t, spec.M, spec.N};
    a.x = ConstRows{b.dev.x.get(), t, spec.M, spec.N};
    a.mean = ConstVec{b.dev.mean.get(), DType::F32, spec.M};
    a.rstd = ConstVec{b.dev.rstd.get(), DType::F32, spec.M};
    a.weight = ConstVec{b.dev.weight.get(), t, spec.N};
    a.dx = Rows{dx.get(), t, spec.M, spec.N};
    a.dweight = Vec{dw.get(), t, which == 0 ? 16 : spec.N};
    a.dbias = Vec{db.get(), t, which == 1 ? 16 : spec.N};
    for (Strategy s : {Strategy::TwoPass, Strategy::Auto}) {
      try {
        layer_norm_backward(a, ExecConfig{Device::Cuda, test_stream(), s});
        ADD_FAILURE() << "a 16-element " << (which == 0 ? "dweight" : "dbias") << " for N = 128 was accepted";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(which == 0 ? "dweight" : "dbias"), std::string::npos) << e.what();
      }
    }
  }
  NK_CUDA(cudaStreamSynchronize(test_stream()));
  for (const DeviceBuffer* d : {&dx, &dw, &db}) {
    const HostBuffer h = d->download(t, test_stream());
    EXPECT_EQ(unpoisoned_bytes(h, 0, h.count()), 0) << "a rejected call wrote an output";
  }
}

INSTANTIATE_TEST_SUITE_P(SeedXfail, HugeMMultiDimNormalizedShape,
                         testing::Values(ln_spec("ln_M100000_8x16_f16", 100000, 8 * 16, DT::F16),
                                         ln_spec("ln_M100000_8x16_f32", 100000, 8 * 16, DT::F32)),
                         spec_name);

// ---- seed xfail 2: huge M, weight undefined, bias defined: dbias has N values, dweight absent ----

class HugeMUndefinedWeight : public testing::TestWithParam<Spec> {};

TEST_P(HugeMUndefinedWeight, DbiasHasNValuesAndMatchesReference) {
  const Spec& spec = GetParam();
  ASSERT_FALSE(spec.has_weight);
  ASSERT_TRUE(spec.bias_present());
  Bundle& b = cached_case(spec);
  const RefBackward& ref = b.backward_ref();
  check_forward(*b.host, b.dev, reference_forward(*b.host));
  for (Strategy s : all_strategies()) {
    for (Mask mask : {Mask{true, false, true}, Mask{false, false, true}}) {
      SCOPED_TRACE(strategy_id(s) + " " + mask_id(mask));
      const BackwardOut out = gpu_backward(*b.host, b.dev, mask, s, test_stream());
      if (s == Strategy::TwoPass || s == Strategy::Auto) ASSERT_TRUE(out.ran);
      if (!out.ran) continue;
      EXPECT_EQ(out.dweight.count(), 0);
      ASSERT_EQ(out.dbias.count(), spec.N + kGuard);
      expect_backward_matches(*b.host, out, ref);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SeedXfail, HugeMUndefinedWeight,
                         testing::Values(
                             [] {
                               Spec s = ln_spec("ln_M100000_N128_noweight_bias_f16", 100000, 128, DT::F16);
                               s.has_weight = false;
                               return s;
                             }(),
                             [] {
                               Spec s = ln_spec("ln_M100000_N128_noweight_bias_bf16", 100000, 128, DT::BF16);
                               s.has_weight = false;
                               return s;
                             }()),
                         spec_name);

// ---- bitwise repeatability ----

class Repeatability : public testing::TestWithParam<Spec> {};

TEST_P(Repeatability, SameCallTwiceGivesIdenticalBits) {
  const Spec& spec = GetParam();
  Bundle& b = cached_case(spec);
  for (Strategy s : all_strategies())
    for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}}) {
      SCOPED_TRACE(strategy_id(s) + " " + mask_id(mask));
      const BackwardOut first = gpu_backward(*b.host, b.dev, mask, s, test_stream());
      if (!first.ran) continue;
      expect_backward_matches(*b.host, first, b.backward_ref());  // identical bits must also be right
      const BackwardOut second = gpu_backward(*b.host, b.dev, mask, s, test_stream());
      ASSERT_TRUE(second.ran);
      expect_same_bits(first, second, strategy_id(s));
      // The allocating overload gives the same bits as the explicit-workspace one.
      const BackwardOut third = gpu_backward(*b.host, b.dev, mask, s, test_stream(), WsMode::Convenience);
      expect_same_bits(first, third, strategy_id(s) + " (allocating overload)");
    }
}

INSTANTIATE_TEST_SUITE_P(Bitwise, Repeatability,
                         testing::Values(ln_spec("repeat_ln_M4096_N1024_f16", 4096, 1024, DT::F16),
                                         ln_spec("repeat_ln_M100000_N128_bf16", 100000, 128, DT::BF16),
                                         rms_spec("repeat_rms_M4096_N1024_bf16", 4096, 1024, DT::BF16)),
                         spec_name);

TEST(Bitwise, FusedTwentyRunsOnALargeCaseAreIdentical) {
  const Spec spec = ln_spec("repeat20_ln_M32768_N4096_bf16", 32768, 4096, DT::BF16);
  Bundle& b = cached_case(spec);
  const BackwardOut first = gpu_backward(*b.host, b.dev, spec.full_mask(), Strategy::Fused, test_stream());
  ASSERT_TRUE(first.ran) << "fused should serve N = 4096 bf16: " << first.why_not;
  expect_backward_matches(*b.host, first, b.backward_ref());
  for (int run = 1; run < 20; ++run) {
    const BackwardOut again = gpu_backward(*b.host, b.dev, spec.full_mask(), Strategy::Fused, test_stream());
    ASSERT_TRUE(again.ran);
    expect_same_bits(first, again, "fused run " + std::to_string(run));
    if (HasFailure()) break;
  }
  drop_cached_case(spec.name);
}

// ---- wide rows ----

class WideRows : public testing::TestWithParam<Spec> {};

/// A planner table under which the forward splits every row it can (LayerNorm 16-bit rows and rows
/// of fewer vectors too, which the built-in table streams): the split forward's every layout is
/// tested, whatever the table picks.
const PlannerTable& split_every_forward_row() {
  static const PlannerTable table = [] {
    PlannerTable t;
    t.forward_split_min_vectors = 1;
    t.forward_split_ln_max_thread_elements = 1 << 20;
    t.forward_block_rows_below_bytes = 0;  // (rows a block holds would take one block a row first)
    return t;
  }();
  return table;
}

/// The same with the wide split blocks for every split row, kWideForwardSplitItems vectors a thread
/// where the planner gives them (RMSNorm and 16-bit LayerNorm rows; PlannerTable::
/// forward_split_wide_min_vectors, forward_split_wide_items_min_vectors / _min_rows): the
/// forward_split_kernel instances of 8 vectors on every row width.
const PlannerTable& split_every_forward_row_wide() {
  static const PlannerTable table = [] {
    PlannerTable t = split_every_forward_row();
    t.forward_split_wide_min_vectors = 1;
    t.forward_split_wide_items_min_vectors = 1;
    t.forward_split_wide_items_min_rows = 0;
    return t;
  }();
  return table;
}

/// The forward on split rows under split_every_forward_row() and split_every_forward_row_wide():
/// against the reference, split as expected, the same bits in repeated calls.
void check_split_forward(const Spec& spec) {
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  for (const PlannerTable* table : {&split_every_forward_row(), &split_every_forward_row_wide()}) {
    const bool wide = table == &split_every_forward_row_wide();
    SCOPED_TRACE(spec.name + (wide ? " forward, every row split, 8 vectors a thread" : " forward, every row split"));
    const ForwardOut out = gpu_forward(*hc, dc, test_stream(), table);
    ASSERT_GT(out.plan.row.split, 1) << out.plan.describe();
    if (wide) {  // (LayerNorm fp32 rows keep kSplitItems: that 8-vector instance spills)
      const bool eight = spec.rms || dtype_size(spec.dtype) == 2;
      EXPECT_EQ(out.plan.row.items, eight ? kWideForwardSplitItems : kSplitItems) << out.plan.describe();
      EXPECT_EQ(out.plan.row.threads_per_row, kWideSplitBlockThreads) << out.plan.describe();
    }
    expect_forward_matches(*hc, out, reference_forward(*hc));
    for (int run = 1; run < 3 && !testing::Test::HasFailure(); ++run)
      expect_same_bits(out, gpu_forward(*hc, dc, test_stream(), table), "split forward run " + std::to_string(run));
    if (testing::Test::HasFailure()) return;
  }
}

TEST_P(WideRows, ForwardAndBackwardMatchReference) {
  check_forward_and_backward(GetParam());
  if (HasFailure()) return;
  check_split_forward(GetParam());  // 16 (8 with 8 vectors a thread) blocks a row (unstaged for M = 1, 3, 8)
}

INSTANTIATE_TEST_SUITE_P(Wide, WideRows,
                         testing::Values(ln_spec("ln_M8_N262144_bf16", 8, 262144, DT::BF16),
                                         ln_spec("ln_M1_N262144_bf16", 1, 262144, DT::BF16),
                                         ln_spec("ln_M3_N262144_bf16", 3, 262144, DT::BF16),
                                         ln_spec("ln_M4_N131072_f32", 4, 131072, DT::F32),
                                         ln_spec("ln_M300_N131072_f32", 300, 131072, DT::F32),
                                         rms_spec("rms_M8_N262144_bf16", 8, 262144, DT::BF16),
                                         rms_spec("rms_M4_N131072_f32", 4, 131072, DT::F32)),
                         spec_name);

// ---- rows split over a thread-block cluster (RowShape::split): too long for one block's registers ----

Spec split_strided(Spec s) {
  s.pad_x = 8;
  s.pad_dy = 16;
  s.pad_out = 24;
  return s;
}
Spec split_no_weight(Spec s) {
  s.has_weight = false;
  s.has_bias = false;
  return s;
}

/// One of weight and bias: the split forward reads each under its own test (both, weight alone,
/// bias alone, neither).
Spec split_bias_only(Spec s) {
  s.has_weight = false;
  s.name += "_biasonly";
  return s;
}
Spec split_weight_only(Spec s) {
  s.has_bias = false;
  s.name += "_weightonly";
  return s;
}

/// Weight and bias `elements` into their buffers (Spec::weight_offset).
Spec weights_at(Spec s, std::int64_t elements) {
  s.weight_offset = elements;
  return s;
}

class SplitRows : public testing::TestWithParam<Spec> {};

// The forward, dX and fused split over a cluster; every strategy, full and gamma/beta-only masks,
// against the float64 reference (check_forward_and_backward)
TEST_P(SplitRows, ForwardAndEveryStrategyMatchTheReferenceWithTheSameBitsEveryRun) {
  const Spec& spec = GetParam();
  check_forward_and_backward(spec);
  if (HasFailure()) return;
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  // dX alone through the fused split (no partials: only the cluster's row sums)
  check_backward(*hc, dc, reference_backward(*hc), Mask{true, false, false}, Strategy::Fused, test_stream());
  const BackwardOut first = gpu_backward(*hc, dc, spec.full_mask(), Strategy::Auto, test_stream());
  ASSERT_TRUE(first.ran);
  ASSERT_GT(first.plan.row.split, 1) << "expected dX on split rows: " << first.plan.describe();
  // fused on split rows too (auto takes it on the larger of these; on 16-bit wide rows from 1024 rows or
  // 96 / 48 MiB of x, NOTES entries 59-60: these are fewer), forced: dX, dgamma, dbeta -- for wide rows the walk that
  // keeps its weights in shared memory (16-byte weight slots) or reads them per slot (fp32 weights)
  const BackwardOut fused = gpu_backward(*hc, dc, spec.full_mask(), Strategy::Fused, test_stream());
  ASSERT_TRUE(fused.ran) << fused.why_not;
  ASSERT_GT(fused.plan.row.split, 1) << "expected fused on split rows: " << fused.plan.describe();
  // 2-item split rows no longer defer their cluster sums under the built-in table (NOTES entry 50),
  // but a table still can (fused_deferred_min_split): that walk, against the reference and its bits
  // (wide rows defer under any table: the fused run above was theirs)
  if (fused.plan.row.items == kMaxFusedItems) {
    PlannerTable defer_all;
    defer_all.fused_deferred_min_split = 2;
    const auto run_deferred = [&] {
      return gpu_backward(*hc, dc, spec.full_mask(), Strategy::Fused, test_stream(), WsMode::Explicit, &defer_all);
    };
    const BackwardOut deferred = run_deferred();
    ASSERT_TRUE(deferred.ran) << deferred.why_not;
    EXPECT_EQ(deferred.plan.deferred_sums, deferred.plan.row.stages > 0) << deferred.plan.describe();
    expect_backward_matches(*hc, deferred, reference_backward(*hc));
    expect_same_bits(deferred, run_deferred(), "deferred, second run");
  }
  // the unfused strategies' dX kernel splits them too (rows beyond a portable cluster of its blocks:
  // blocks of kWideSplitBlockThreads threads, PlannerTable::row_split_wide_max)
  const BackwardOut tiled = gpu_backward(*hc, dc, spec.full_mask(), Strategy::Tiled, test_stream());
  ASSERT_TRUE(tiled.ran);
  ASSERT_GT(tiled.plan.row.split, 1) << "expected dX on split rows: " << tiled.plan.describe();
  const std::int64_t row_vectors = spec.N / std::int64_t(16 / dtype_size(spec.dtype));
  const bool wide = row_vectors > std::int64_t(kSplitBlockThreads) * kSplitItems * kMaxSplit;
  EXPECT_EQ(tiled.plan.row.threads_per_row, wide ? kWideSplitBlockThreads : kSplitBlockThreads) << tiled.plan.describe();
  const ForwardOut forward = gpu_forward(*hc, dc);
  // the built-in table splits forward rows of forward_split_min_vectors 16-byte vectors or more
  // (LayerNorm rows of at most forward_split_ln_max_thread_elements elements a thread) and streams the
  // others; every row split: check_split_forward below
  const PlannerTable defaults;
  const int vector_width = 16 / int(dtype_size(spec.dtype));
  const std::int64_t vectors = spec.N / vector_width;
  const bool split_forward = vectors >= defaults.forward_split_min_vectors &&
                             (spec.rms || kSplitItems * vector_width <= defaults.forward_split_ln_max_thread_elements);
  // (rows of up to kBlockRowMaxThreads x kBlockRowMaxItems vectors take one block a row first; 16-bit
  // LayerNorm rows of more than kBlockRowMaxThreads vectors at fewer than kBlockRowMaxItems vectors a
  // thread only in small x)
  const bool wide_ln_16bit = !spec.rms && dtype_size(spec.dtype) == 2 && vectors > kBlockRowMaxThreads;
  const std::int64_t x_bytes = spec.M * spec.N * std::int64_t(dtype_size(spec.dtype));
  const bool four_items = vectors > std::int64_t(kBlockRowMaxThreads) * defaults.forward_block_rows_items_target ||
                          x_bytes >= defaults.ln_forward_block_rows_four_items_min_bytes;
  const bool block_rows = vectors <= std::int64_t(kBlockRowMaxThreads) * kBlockRowMaxItems &&
                          x_bytes < defaults.forward_block_rows_below_bytes &&
                          (!wide_ln_16bit || four_items || x_bytes < defaults.ln_forward_block_rows_wide_below_bytes);
  if (block_rows) {
    EXPECT_TRUE(forward.plan.row.block_rows) << "expected the forward a row a block: " << forward.plan.describe();
  } else if (split_forward) {
    EXPECT_GT(forward.plan.row.split, 1) << "expected the forward on split rows: " << forward.plan.describe();
  } else {
    EXPECT_EQ(forward.plan.row.items, 0) << "expected the forward to stream: " << forward.plan.describe();
  }
  for (int run = 1; run < 20 && !HasFailure(); ++run) {
    expect_same_bits(first, gpu_backward(*hc, dc, spec.full_mask(), Strategy::Auto, test_stream()), "run " + std::to_string(run));
    expect_same_bits(fused, gpu_backward(*hc, dc, spec.full_mask(), Strategy::Fused, test_stream()),
                     "fused run " + std::to_string(run));
    expect_same_bits(tiled, gpu_backward(*hc, dc, spec.full_mask(), Strategy::Tiled, test_stream()),
                     "tiled run " + std::to_string(run));
    expect_same_bits(forward, gpu_forward(*hc, dc), "forward run " + std::to_string(run));
  }
  if (!HasFailure()) check_split_forward(spec);
}

// Blocks per row (16-bit: 1024 vectors of 8 per block): 65536 -> 8, 57352 -> 8 with a short last
// slice, 16384 -> 2, 12296 -> 2 with unequal slices; fp32 (1024 vectors of 4): 32768 -> 8, 20000 -> 5.
// The fused kernel's wide rows (2048 vectors per block): 262144 16-bit and 131072 fp32 -> 16, 131072
// 16-bit -> 8, 98304 -> 6, 65544 -> 5 with a short last slice (LayerNorm bf16, RMSNorm fp16); only a table
// that raises fused_cached_split_max (an H100's tune) keeps rows that need 15 or 16 2-item blocks 2-item
// over a cluster of 16 (NOTES entries 91-92, CachedSplitBeyondPortable below); the dX kernel splits these
// over blocks of 512 threads (2048 vectors each, the same counts). The forward splits the rows of 8192 vectors or more (65536 16-bit / 32768 fp32 ->
// 8 blocks of 256 threads; wider: blocks of 512 threads, 65544 -> 5 with a short last slice, 131072
// 16-bit -> 8, 262144 -> 16; from 128 rows 262144 -> 8 blocks of 8 vectors a thread, NOTES entry 60),
// strided and with fp32 weights too, and streams the others.
// Slices are whole 128-byte lines (45056 16-bit over 6 blocks: 944 vectors, the last 912), and the
// fused walk takes the cluster size the device holds the most clusters of (H200: 53248 16-bit and
// 28672 fp32 need 7 blocks and take 8, 196608 16-bit needs 12 wide blocks and takes 16; NOTES entry 70).
// M from fewer rows than clusters (7) to many rows per cluster.
INSTANTIATE_TEST_SUITE_P(Split, SplitRows,
                         testing::Values(ln_spec("ln_M300_N65536_bf16", 300, 65536, DT::BF16),
                                         rms_spec("rms_M97_N65536_f16", 97, 65536, DT::F16),
                                         ln_spec("ln_M7_N57352_bf16", 7, 57352, DT::BF16),
                                         ln_spec("ln_M1500_N16384_f16", 1500, 16384, DT::F16),
                                         rms_spec("rms_M513_N12296_bf16", 513, 12296, DT::BF16),
                                         ln_spec("ln_M64_N20000_f32", 64, 20000, DT::F32),
                                         rms_spec("rms_M333_N32768_f32", 333, 32768, DT::F32),
                                         split_strided(ln_spec("ln_M100_N16384_bf16_pad8_16_24", 100, 16384, DT::BF16)),
                                         split_no_weight(ln_spec("ln_M200_N24576_bf16_noweight", 200, 24576, DT::BF16)),
                                         // RMSNorm's 16-bit split rows without a weight (ones in its place), staged
                                         split_no_weight(rms_spec("rms_M120_N65536_bf16_noweight", 120, 65536, DT::BF16)),
                                         split_bias_only(ln_spec("ln_M90_N57352_bf16", 90, 57352, DT::BF16)),
                                         split_weight_only(ln_spec("ln_M90_N24576_f16", 90, 24576, DT::F16)),
                                         // fused wide rows (kFusedWideItems per thread): 16 blocks a row
                                         // (non-portable clusters) and 8 (131072 16-bit, without a weight)
                                         ln_spec("ln_M40_N262144_bf16", 40, 262144, DT::BF16),
                                         rms_spec("rms_M40_N131072_f32", 40, 131072, DT::F32),
                                         split_no_weight(ln_spec("ln_M70_N131072_f16_noweight", 70, 131072, DT::F16)),
                                         ln_spec("ln_M50_N65544_bf16", 50, 65544, DT::BF16),
                                         // RMSNorm's wide rows too: their slots are read without predicates
                                         // (NOTES entry 73), so a short last slice and padding slots matter
                                         rms_spec("rms_M50_N65544_f16", 50, 65544, DT::F16),
                                         // RMSNorm's 16-bit wide rows (deferred sums): fp16; fp32 weights on 196608
                                         // columns (12 blocks' worth over a cluster of 16: padding slots in every
                                         // block); no weight
                                         rms_spec("rms_M40_N262144_f16", 40, 262144, DT::F16),
                                         with_weight_dtype(rms_spec("rms_M30_N196608_bf16_w32", 30, 196608, DT::BF16), DT::F32),
                                         split_no_weight(rms_spec("rms_M24_N262144_bf16_noweight", 24, 262144, DT::BF16)),
                                         ln_spec("ln_M50_N45056_f16", 50, 45056, DT::F16),
                                         rms_spec("rms_M33_N53248_bf16", 33, 53248, DT::BF16),
                                         ln_spec("ln_M40_N28672_f32", 40, 28672, DT::F32),
                                         ln_spec("ln_M20_N196608_bf16", 20, 196608, DT::BF16),
                                         split_strided(ln_spec("ln_M60_N65536_bf16_pad8_16_24", 60, 65536, DT::BF16)),
                                         with_weight_dtype(rms_spec("rms_M64_N65536_bf16_w32", 64, 65536, DT::BF16), DT::F32),
                                         with_weight_dtype(ln_spec("ln_M300_N131072_bf16_w32", 300, 131072, DT::BF16), DT::F32),
                                         // fp32 weights 16 bytes into their buffers: aligned for the 16-byte
                                         // loads the vector rule promises, not for 32 (the forward loads a
                                         // slot's 8 weights ahead as two loads, NOTES entry 74)
                                         weights_at(with_weight_dtype(rms_spec("rms_M64_N65536_bf16_w32_at16", 64, 65536, DT::BF16), DT::F32), 4),
                                         weights_at(with_weight_dtype(ln_spec("ln_M100_N65536_f16_w32_at16", 100, 65536, DT::F16), DT::F32), 4),
                                         // the wide rows' fp32 weights, staged in shared memory as two 16-byte
                                         // chunks a slot (NOTES entry 85), from a 16-byte offset
                                         weights_at(with_weight_dtype(ln_spec("ln_M40_N98304_f16_w32_at16", 40, 98304, DT::F16), DT::F32), 4)),
                         spec_name);

// ---- the fused wide walk of fp32 weights on 16-bit rows (tail first, NOTES entries 85, 88, 89), once ----
// The walk that stages a row's x and dy behind the slots' 32-byte weights in shared memory, on as few rows
// as give it two whole sweeps of its clusters and a partial third: small enough for compute-sanitizer's
// racecheck (scripts/gpu-check.sh stage racecheck), which the every-strategy SplitRows cases of the same
// walk outlast. The rows are counted from the plan of a tall problem (the clusters the device holds).

class WideFusedFp32Weights : public testing::TestWithParam<Spec> {};

TEST_P(WideFusedFp32Weights, TailFirstWalkMatchesTheReference) {
  Spec spec = GetParam();
  Problem tall = problem_of(spec, spec.rms ? Op::RmsNormBackward : Op::LayerNormBackward);
  tall.rows = 1 << 14;
  const Plan tall_plan = plan(tall, current_device_facts(), Strategy::Fused);
  ASSERT_GT(tall_plan.row.split, 1) << tall_plan.describe();
  const std::int64_t walkers = tall_plan.row.blocks / tall_plan.row.split;
  spec.M = 2 * walkers + walkers / 2 + 1;

  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const BackwardOut out = gpu_backward(*hc, dc, spec.full_mask(), Strategy::Fused, test_stream());
  ASSERT_TRUE(out.ran) << out.why_not;
  // the walk under test: wide slots, staged, deferred sums, 32-byte weight slots, every cluster walking
  EXPECT_EQ(out.plan.row.items, kFusedWideItems) << out.plan.describe();
  EXPECT_GT(out.plan.row.stages, 0) << out.plan.describe();
  EXPECT_TRUE(out.plan.deferred_sums) << out.plan.describe();
  EXPECT_EQ(out.plan.row.vec * std::int64_t(dtype_size(spec.weight_dtype())), 32) << out.plan.describe();
  EXPECT_EQ(out.plan.row.blocks / out.plan.row.split, walkers) << out.plan.describe();
  expect_backward_matches(*hc, out, reference_backward(*hc));
}

// ---- rows beyond a portable cluster of 2-item fused blocks, kept 2-item over clusters of up to 16 ----
// Every row beyond the portable cluster kept 2-item (fused_cached_split_min_beyond_portable = 9; the built-in
// table keeps none, NOTES entry 92, and a table raised to 16 those that need 15 or 16 blocks, entry 91): the
// split walk that caches its terms, over 9..16 ranks (the cluster sums add by lanes there), against the
// reference and its own bits, full and gamma/beta-only masks and dX alone.

class CachedSplitBeyondPortable : public testing::TestWithParam<Spec> {};

TEST_P(CachedSplitBeyondPortable, FusedMatchesTheReferenceWithTheSameBits) {
  const Spec& spec = GetParam();
  PlannerTable cached16;
  cached16.fused_cached_split_max = kMaxFusedSplitBlocks;
  cached16.fused_cached_split_min_beyond_portable = kPortableClusterBlocks + 1;
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (const Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}, Mask{true, false, false}}) {
    SCOPED_TRACE(mask_id(mask));
    const auto run = [&] {
      return gpu_backward(*hc, dc, mask, Strategy::Fused, test_stream(), WsMode::Explicit, &cached16);
    };
    const BackwardOut out = run();
    ASSERT_TRUE(out.ran) << out.why_not;
    EXPECT_EQ(out.plan.row.items, kMaxFusedItems) << out.plan.describe();
    EXPECT_GT(out.plan.row.split, kPortableClusterBlocks) << out.plan.describe();
    expect_backward_matches(*hc, out, ref);
    expect_same_bits(out, run(), "second run");
  }
}

INSTANTIATE_TEST_SUITE_P(
    CachedSplit, CachedSplitBeyondPortable,
    testing::Values(ln_spec("ln_M50_N131072_bf16", 50, 131072, DT::BF16),
                    // 9 blocks' worth (the H200 takes a cluster of 9), fp32 weights kept in registers
                    with_weight_dtype(rms_spec("rms_M37_N65544_f16_w32", 37, 65544, DT::F16), DT::F32),
                    with_weight_dtype(ln_spec("ln_M33_N98304_bf16_w32", 33, 98304, DT::BF16), DT::F32),
                    rms_spec("rms_M40_N65536_f32", 40, 65536, DT::F32),
                    split_strided(ln_spec("ln_M21_N40960_f32_pad8_16_24", 21, 40960, DT::F32)),
                    split_no_weight(rms_spec("rms_M30_N131072_bf16_noweight", 30, 131072, DT::BF16))),
    spec_name);

INSTANTIATE_TEST_SUITE_P(
    WideRows, WideFusedFp32Weights,
    testing::Values(with_weight_dtype(ln_spec("ln_N98304_bf16_w32", 0, 98304, DT::BF16), DT::F32),
                    with_weight_dtype(rms_spec("rms_N262144_f16_w32", 0, 262144, DT::F16), DT::F32),
                    // 12 blocks' worth of slots over a cluster of 16 (padding slots), weights 16 bytes in
                    weights_at(with_weight_dtype(rms_spec("rms_N196608_bf16_w32_at16", 0, 196608, DT::BF16), DT::F32), 4)),
    spec_name);

// ---- mixed precision: fp32 weight/bias/dweight/dbias with fp16/bf16 activations ----

Spec f32_weight(Spec s) { return with_weight_dtype(std::move(s), DT::F32); }

class MixedPrecision : public testing::TestWithParam<Spec> {};

TEST_P(MixedPrecision, ForwardAndBackwardMatchReference) { check_forward_and_backward(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Mixed, MixedPrecision,
    testing::Values(f32_weight(ln_spec("ln_M4096_N1024_bf16_w32", 4096, 1024, DT::BF16)),
                    f32_weight(ln_spec("ln_M8192_N768_f16_w32", 8192, 768, DT::F16)),
                    [] {
                      Spec s = f32_weight(ln_spec("ln_M1000_N1001_f16_w32_unaligned", 1000, 1001, DT::F16));
                      s.offset = 1;
                      return s;
                    }(),
                    [] {
                      Spec s = f32_weight(ln_spec("ln_M2000_N512_bf16_noweight_b32", 2000, 512, DT::BF16));
                      s.has_weight = false;
                      return s;
                    }(),
                    f32_weight(ln_spec("ln_M32_N8192_f16_w32", 32, 8192, DT::F16)),
                    f32_weight(rms_spec("rms_M4096_N1024_bf16_w32", 4096, 1024, DT::BF16)),
                    f32_weight(rms_spec("rms_M8192_N768_f16_w32", 8192, 768, DT::F16))),
    spec_name);

// ---- M * N > 2^31 elements ----
// M = 2^20 + 3, N = 2049, bf16: 2,148,538,371 elements (4.3 GB) per tensor. Every dx element must
// be written (finite); dx and y of sample rows (around the 2^31-byte and 2^31-element offsets and
// the last rows) are compared with the reference; mean/rstd of every row with the CPU forward;
// dweight/dbias with a multithreaded float64 sum over all rows.

/// dweight/dbias over all rows in float64, from the same mean/rstd the GPU used.
void gamma_beta_f64(const HostCase& hc, std::vector<double>& dw, std::vector<double>& db) {
  const Spec& s = hc.spec;
  const std::int64_t n = s.N, grain = 2048;
  const std::int64_t chunks = chunk_count(s.M, grain);
  std::vector<double> pw(std::size_t(chunks * n), 0.0), pb(std::size_t(chunks * n), 0.0);
  const Layout lx = s.x_layout(), ldy = s.dy_layout();
  parallel_chunks(s.M, grain, [&](std::int64_t chunk, std::int64_t r0, std::int64_t r1) {
    double* w = pw.data() + chunk * n;
    double* b = pb.data() + chunk * n;
    for (std::int64_t r = r0; r < r1; ++r) {
      const double mean = s.rms ? 0.0 : hc.mean.get(r), rstd = hc.rstd.get(r);
      for (std::int64_t c = 0; c < n; ++c) {
        const double g = hc.dy.get(ldy.at(r, c));
        w[c] += g * (hc.x.get(lx.at(r, c)) - mean) * rstd;
        b[c] += g;
      }
    }
  });
  dw.assign(std::size_t(n), 0.0);
  db.assign(std::size_t(n), 0.0);
  for (std::int64_t k = 0; k < chunks; ++k)
    for (std::int64_t c = 0; c < n; ++c) {
      dw[std::size_t(c)] += pw[std::size_t(k * n + c)];
      db[std::size_t(c)] += pb[std::size_t(k * n + c)];
    }
}

/// Elements of a packed matrix buffer that are not finite (unwritten elements read as NaN).
std::int64_t non_finite(const HostBuffer& b, std::int64_t count) {
  const std::int64_t grain = std::int64_t(1) << 22;
  std::vector<std::int64_t> parts(std::size_t(chunk_count(count, grain)), 0);
  parallel_chunks(count, grain, [&](std::int64_t chunk, std::int64_t i0, std::int64_t i1) {
    std::int64_t k = 0;
    for (std::int64_t i = i0; i < i1; ++i) k += !std::isfinite(b.get(i));
    parts[std::size_t(chunk)] = k;
  });
  std::int64_t total = 0;
  for (std::int64_t k : parts) total += k;
  return total;
}

void check_rows_of(const HostBuffer& got, std::int64_t n, const std::vector<std::int64_t>& rows,
                   const std::vector<double>& ref_rows, double tol, const char* what) {
  Err e;
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::int64_t c = 0; c < n; ++c)
      e.add(got.get(rows[i] * n + c), ref_rows[i * std::size_t(n) + std::size_t(c)], std::int64_t(i) * n + c);
  EXPECT_LE(e.rel(), tol) << what << " (sample rows): " << e.describe();
}

/// The backward calls of one huge view: a strategy and the outputs it is asked for.
struct HugeCall {
  Strategy strategy;
  bool dx;          ///< false: gamma/beta only (the column kernels alone; no 4 GB dx to fetch and scan)
  bool gamma_beta;  ///< false: dx only (the dX kernel alone)
};

/// One view of the huge case's x / dy bytes as m rows of n bf16 elements (m * n > 2^31), LayerNorm or
/// RMSNorm: the forward under the built-in table (and RMSNorm's packed walk where its rows pack) --
/// mean / rstd of every row against the CPU forward, y of sample rows around the 2^31-byte and
/// 2^31-element offsets and the last rows, every y element written -- then each backward call: dx of
/// the sample rows and every dx element written when asked for, dweight / dbias against a float64 sum
/// over all rows. A forced fused may refuse only rows that are not whole 16-byte vectors.
void check_huge_view(HostCase& hc, DeviceCase& dc, std::int64_t m, std::int64_t n, bool rms,
                     const std::vector<HugeCall>& calls, cudaStream_t stream) {
  ASSERT_GT(m * n, std::int64_t(1) << 31);
  Spec& spec = hc.spec;
  spec.name = std::string(rms ? "rms" : "ln") + "_M" + std::to_string(m) + "_N" + std::to_string(n) + "_bf16";
  SCOPED_TRACE(spec.name);
  spec.M = m;
  spec.N = n;
  spec.rms = rms;
  spec.has_bias = !rms;
  spec.eps = rms ? 1e-6 : 1e-5;
  const Layout vec{1, n, n, 0};
  hc.weight = HostBuffer(DT::BF16, n);
  fill_random(hc.weight, vec, seed_of(spec.name) ^ 3, 1.0, 0.8);
  hc.bias = HostBuffer();
  if (!rms) {
    hc.bias = HostBuffer(DT::BF16, n);
    fill_random(hc.bias, vec, seed_of(spec.name) ^ 4, 0.0, 0.8);
  }
  compute_stats(hc);  // CPU forward, F32 mean/rstd shared by the GPU call and the reference
  dc.weight = DeviceBuffer(hc.weight.bytes.size());
  dc.weight.upload(hc.weight, stream);
  if (!rms) {
    dc.bias = DeviceBuffer(hc.bias.bytes.size());
    dc.bias.upload(hc.bias, stream);
    dc.mean = DeviceBuffer(hc.mean.bytes.size());
    dc.mean.upload(hc.mean, stream);
  }
  dc.rstd = DeviceBuffer(hc.rstd.bytes.size());
  dc.rstd.upload(hc.rstd, stream);

  std::vector<std::int64_t> rows{0,
                                 1,
                                 (std::int64_t(1) << 30) / n - 1,  // around byte offset 2^31 (bf16)
                                 (std::int64_t(1) << 30) / n,
                                 (std::int64_t(1) << 30) / n + 1,
                                 (std::int64_t(1) << 31) / n - 1,  // around element offset 2^31
                                 (std::int64_t(1) << 31) / n,
                                 (std::int64_t(1) << 31) / n + 1,
                                 m - 2,
                                 m - 1};
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  const auto sample = take_rows(hc, rows);

  // forward: mean/rstd of every row, y of the sample rows, every y element written. RMSNorm's
  // aligned views also run its other row walk: the built-in table packs 4 GiB of x
  // (rms_forward_packed_min_bytes), the table without packing takes the staged walk.
  const RefForward forward_ref = reference_forward(*sample);
  const bool aligned = n % 8 == 0;  // 16-byte vectorised bf16 rows
  std::vector<const PlannerTable*> forward_tables{nullptr};
  for (std::size_t t = 0; t < forward_tables.size(); ++t) {
    const PlannerTable* table = forward_tables[t];
    const ForwardOut f = gpu_forward(hc, dc, stream, table);
    SCOPED_TRACE("forward " + f.plan.describe());
    if (rms && n == 2056 && table == nullptr) EXPECT_TRUE(f.plan.row.packed) << "4.3 GB of 2056-column rows pack";
    if (table == nullptr && f.plan.row.packed) forward_tables.push_back(&forward_packed_table(false));
    if (table != nullptr) EXPECT_FALSE(f.plan.row.packed) << "the table without packing";
    EXPECT_EQ(non_finite(f.y, m * n), 0) << "y: unwritten or non-finite elements";
    check_rows_of(f.y, n, rows, forward_ref.y, test::tolerance(DT::BF16), "y");
    const Err er = compare_vector(f.rstd, m, hc.rstd.to_double());
    EXPECT_LE(er.rel(), 1e-5) << "rstd vs CPU forward: " << er.describe();
    if (!rms) {
      const Err em = compare_vector(f.mean, m, hc.mean.to_double());
      EXPECT_LE(em.rel(), 1e-5) << "mean vs CPU forward: " << em.describe();
    }
  }

  const RefBackward sample_ref = reference_backward(*sample);
  std::vector<double> dw, db;
  gamma_beta_f64(hc, dw, db);
  for (const HugeCall& call : calls) {
    const Mask mask{call.dx, call.gamma_beta, call.gamma_beta && !rms};
    SCOPED_TRACE(strategy_id(call.strategy) + " " + mask_id(mask));
    const BackwardOut out = gpu_backward(hc, dc, mask, call.strategy, stream);
    if (!out.ran) {  // unsupported: gpu_backward required normkit::Error
      EXPECT_TRUE(call.strategy == Strategy::Fused && !aligned)
          << "only fused may refuse, and only rows that are not 16-byte vectors: " << out.why_not;
      continue;
    }
    SCOPED_TRACE(out.plan.describe());
    if (call.dx) {
      EXPECT_EQ(non_finite(out.dx, m * n), 0) << "dx: unwritten or non-finite elements";
      check_rows_of(out.dx, n, rows, sample_ref.dx, test::tolerance(DT::BF16), "dx");
    }
    if (!call.gamma_beta) continue;
    const Err ew = compare_vector(out.dweight, n, dw);
    EXPECT_LE(ew.rel(), test::tolerance(DT::BF16)) << "dweight: " << ew.describe();
    EXPECT_EQ(unpoisoned_bytes(out.dweight, n, n + kGuard), 0);
    if (!rms) {
      const Err eb = compare_vector(out.dbias, n, db);
      EXPECT_LE(eb.rel(), test::tolerance(DT::BF16)) << "dbias: " << eb.describe();
      EXPECT_EQ(unpoisoned_bytes(out.dbias, n, n + kGuard), 0);
    }
  }
}

/// The huge case: M = 2^20 + 3 rows of N = 2049 bf16, 2,148,538,371 elements (4.3 GB) a tensor, of
/// which the tests take views of other widths (elements / n rows of n). Skips without the device memory.
class Huge : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::int64_t M = (std::int64_t(1) << 20) + 3, N = 2049;
    std::size_t free_bytes = 0, total_bytes = 0;
    NK_CUDA(cudaMemGetInfo(&free_bytes, &total_bytes));
    const std::size_t tensor = std::size_t(M * N) * 2;
    if (free_bytes < 4 * tensor + (std::size_t(1) << 30))
      GTEST_SKIP() << "needs " << 4 * tensor / (1 << 20) << " MiB of device memory, " << free_bytes / (1 << 20)
                   << " MiB free";
    hc = make_host_case(ln_spec("ln_M1048579_N2049_bf16", M, N, DT::BF16));
    dc = upload_case(*hc, stream);
    elements = M * N;
  }
  void check_view(std::int64_t n, bool rms, const std::vector<HugeCall>& calls) {
    check_huge_view(*hc, dc, elements / n, n, rms, calls, stream);
  }

  cudaStream_t stream = test_stream();
  std::unique_ptr<HostCase> hc;
  DeviceCase dc;
  std::int64_t elements = 0;
};

TEST_F(Huge, MoreThan2Pow31Elements) {
  // N = 2049 (rows not 16-byte aligned: fused cannot serve it and must throw) and N = 2056 (aligned
  // rows: the vectorised and fused paths). Besides auto and fused, the column kernels forced, gamma/beta
  // only (their dx is the dX kernel auto runs): tiled, two-pass and simple over 2^20 rows; and on the
  // aligned rows dx alone (the dX kernel without gamma/beta).
  std::vector<HugeCall> calls{{Strategy::Auto, true, true},
                              {Strategy::Fused, true, true},
                              {Strategy::Tiled, false, true},
                              {Strategy::TwoPass, false, true},
                              {Strategy::Simple, false, true}};
  for (bool rms : {false, true}) check_view(2049, rms, calls);
  calls.push_back({Strategy::Auto, true, false});
  for (bool rms : {false, true}) check_view(2056, rms, calls);
}

// The short and the widest rows past 2^31 elements, on the same bytes: 64 columns (the forward's
// short-row walk, fused rows of a few lanes) and 262144 (the forward's 8-vector split rows, the fused
// wide walk over clusters of 16 with its weights in shared memory, and the dX kernel split 16 ways under
// tiled). Separate from MoreThan2Pow31Elements so that a re-run can leave out either (both take minutes of
// host-side reference work).
TEST_F(Huge, ShortAndWideRowsMoreThan2Pow31Elements) {
  for (bool rms : {false, true}) {
    check_view(64, rms, {{Strategy::Auto, true, true}, {Strategy::Fused, true, true}});
    check_view(262144, rms, {{Strategy::Auto, true, true}, {Strategy::Fused, true, true}, {Strategy::Tiled, true, true}});
  }
}

}  // namespace
}  // namespace normkit::gputest
