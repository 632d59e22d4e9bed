// Edge shapes (M = 1, N = 1, M = 0), non-contiguous rows, output-mask variants x strategies, odd N
// and unaligned rows, undefined weight, large eps. Every case runs forward and backward on the GPU
// and compares with the float64 reference.
#include "harness.h"

namespace normkit::gputest {
namespace {

using DT = DType;

// ---- M = 1 and N = 1 ----

/// N = 1 is degenerate: LayerNorm's x_hat is exactly 0 (dx = 0, dweight = 0 in the reference) and
/// RMSNorm's dx = rstd * g * (1 - x_hat^2) cancels two O(1) terms (x_hat^2 = x^2 / (x^2 + eps)), so
/// its reference is ~1e-6 while fp32 arithmetic on the O(1) terms leaves ~1e-7 absolute error. The
/// error is then measured against the terms' scale: a floor of sqrt(M) (O(1) per element) under
/// ||ref|| (the inputs are O(1)). A wrong or unwritten element still fails.
double n1_floor(const Spec& spec) {
  return spec.N == 1 ? std::sqrt(double(std::max<std::int64_t>(spec.M, 1))) : 1e-30;
}

class EdgeShape : public testing::TestWithParam<Spec> {};

TEST_P(EdgeShape, ForwardAndBackwardMatchReference) {
  const Spec& spec = GetParam();
  check_forward_and_backward(spec, n1_floor(spec));
}

INSTANTIATE_TEST_SUITE_P(
    Edge, EdgeShape,
    testing::Values(ln_spec("ln_M1_N768_f16", 1, 768, DT::F16), ln_spec("ln_M1_N4096_bf16", 1, 4096, DT::BF16),
                    ln_spec("ln_M1_N1001_f32", 1, 1001, DT::F32), ln_spec("ln_M1_N1_f16", 1, 1, DT::F16),
                    ln_spec("ln_M100_N1_f16", 100, 1, DT::F16), ln_spec("ln_M4096_N1_f32", 4096, 1, DT::F32),
                    ln_spec("ln_M131072_N1_bf16", 131072, 1, DT::BF16), rms_spec("rms_M1_N768_f16", 1, 768, DT::F16),
                    rms_spec("rms_M1_N4096_bf16", 1, 4096, DT::BF16), rms_spec("rms_M1_N1_f16", 1, 1, DT::F16),
                    rms_spec("rms_M100_N1_f32", 100, 1, DT::F32), rms_spec("rms_M4096_N1_f16", 4096, 1, DT::F16)),
    spec_name);

// ---- M = 0: outputs empty, dweight/dbias exactly zero ----

class EmptyRows : public testing::TestWithParam<Spec> {};

TEST_P(EmptyRows, GradientsAreZerosAndNothingElseIsWritten) {
  const Spec& spec = GetParam();
  const auto hc = make_host_case(spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  // Forward: nothing to write; y/mean/rstd buffers (one element + guards) stay poisoned.
  {
    const ForwardOut f = gpu_forward(*hc, dc);
    EXPECT_EQ(unpoisoned_bytes(f.y, 0, f.y.count()), 0) << "forward wrote y for M = 0";
    EXPECT_EQ(unpoisoned_bytes(f.rstd, 0, f.rstd.count()), 0) << "forward wrote rstd for M = 0";
    if (!spec.rms) EXPECT_EQ(unpoisoned_bytes(f.mean, 0, f.mean.count()), 0) << "forward wrote mean for M = 0";
  }
  const RefBackward ref = reference_backward(*hc);  // zeros
  for (Strategy s : all_strategies())
    for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}, Mask{true, false, false}}) {
      SCOPED_TRACE(strategy_id(s) + " " + mask_id(mask));
      const BackwardOut out = gpu_backward(*hc, dc, mask, s, test_stream());
      if (!out.ran) continue;
      if (mask.dx) EXPECT_EQ(unpoisoned_bytes(out.dx, 0, out.dx.count()), 0) << "dx written for M = 0";
      for (const HostBuffer* g : {&out.dweight, &out.dbias}) {
        if (g->count() == 0) continue;
        for (std::int64_t i = 0; i < spec.N; ++i)
          ASSERT_EQ(g->get(i), 0.0) << "gradient element " << i << " of an M = 0 call must be 0";
        EXPECT_EQ(unpoisoned_bytes(*g, spec.N, spec.N + kGuard), 0) << "gradient written beyond N";
      }
      expect_backward_matches(*hc, out, ref, 1.0);
    }
}

INSTANTIATE_TEST_SUITE_P(Edge, EmptyRows,
                         testing::Values(ln_spec("ln_M0_N768_f16", 0, 768, DT::F16),
                                         ln_spec("ln_M0_N1000_f32", 0, 1000, DT::F32),
                                         rms_spec("rms_M0_N4096_bf16", 0, 4096, DT::BF16)),
                         spec_name);

// ---- non-contiguous rows (row_stride > N) for inputs and outputs; gaps must stay poisoned ----

Spec strided(Spec s, std::int64_t pad_x, std::int64_t pad_dy, std::int64_t pad_out) {
  s.pad_x = pad_x;
  s.pad_dy = pad_dy;
  s.pad_out = pad_out;
  return s;
}

class NonContiguous : public testing::TestWithParam<Spec> {};

TEST_P(NonContiguous, ForwardAndBackwardMatchReferenceAndGapsStayPoisoned) { check_forward_and_backward(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Layout, NonContiguous,
    testing::Values(strided(ln_spec("ln_M300_N1000_f16_pad7_13_5", 300, 1000, DT::F16), 7, 13, 5),
                    // padded but still 16-byte aligned rows (vector path with strides)
                    strided(ln_spec("ln_M1024_N768_bf16_pad8", 1024, 768, DT::BF16), 8, 16, 8),
                    strided(ln_spec("ln_M4096_N1024_f32_pad4_12_20", 4096, 1024, DT::F32), 4, 12, 20),
                    strided(ln_spec("ln_M8_N64_f16_pad64", 8, 64, DT::F16), 64, 64, 64),
                    strided(ln_spec("ln_M20000_N64_f16_pad1", 20000, 64, DT::F16), 1, 3, 2),
                    strided(rms_spec("rms_M300_N1000_f16_pad7_13_5", 300, 1000, DT::F16), 7, 13, 5),
                    strided(rms_spec("rms_M1024_N4096_bf16_pad8", 1024, 4096, DT::BF16), 8, 8, 8),
                    strided(rms_spec("rms_M20000_N64_f32_pad3", 20000, 64, DT::F32), 3, 5, 1)),
    spec_name);

// ---- ExecConfig::caller_checked_pointers (the PyTorch binding's setting): the same results ----

class CallerChecked : public testing::TestWithParam<Spec> {};

TEST_P(CallerChecked, ForwardAndBackwardMatchReference) {
  const CallerCheckedPointers no_pointer_queries;
  check_forward_and_backward(GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    Pointers, CallerChecked,
    testing::Values(ln_spec("ln_M4096_N768_f32", 4096, 768, DT::F32),
                    with_weight_dtype(ln_spec("ln_M1024_N768_bf16_w32", 1024, 768, DT::BF16), DT::F32),
                    strided(ln_spec("ln_M300_N1000_f16_pad7_13_5", 300, 1000, DT::F16), 7, 13, 5),
                    rms_spec("rms_M8_N4096_bf16", 8, 4096, DT::BF16)),
    spec_name);

// ---- output-mask variants x every strategy (small M keeps the reference cheap) ----

using MaskParam = std::tuple<Spec, Mask, Strategy>;
class OutputMask : public testing::TestWithParam<MaskParam> {};

TEST_P(OutputMask, SelectsExpectedGrads) {
  const Spec& spec = std::get<0>(GetParam());
  const Mask mask = std::get<1>(GetParam());
  const Strategy strategy = std::get<2>(GetParam());
  Bundle& b = cached_case(spec);
  const BackwardOut out = gpu_backward(*b.host, b.dev, mask, strategy, test_stream());
  if (!out.ran) return;  // unsupported: gpu_backward already required normkit::Error and untouched outputs
  EXPECT_EQ(out.plan.mask.dx, mask.dx);
  EXPECT_EQ(out.plan.mask.dweight, mask.dweight);
  EXPECT_EQ(out.plan.mask.dbias, mask.dbias && !spec.rms);
  EXPECT_EQ(out.dx.count() > 0, mask.dx);
  EXPECT_EQ(out.dweight.count() > 0, mask.dweight);
  EXPECT_EQ(out.dbias.count() > 0, mask.dbias && !spec.rms);
  expect_backward_matches(*b.host, out, b.backward_ref());
}

std::vector<Spec> mask_ln_specs() {
  return {ln_spec("mask_ln_M64_N768_f16", 64, 768, DT::F16), ln_spec("mask_ln_M300_N1024_bf16", 300, 1024, DT::BF16),
          ln_spec("mask_ln_M1000_N512_f32", 1000, 512, DT::F32), ln_spec("mask_ln_M4096_N256_f16", 4096, 256, DT::F16),
          ln_spec("mask_ln_M5_N3000_f16", 5, 3000, DT::F16)};
}
std::vector<Spec> mask_rms_specs() {
  return {rms_spec("mask_rms_M64_N768_f16", 64, 768, DT::F16), rms_spec("mask_rms_M300_N1024_bf16", 300, 1024, DT::BF16),
          rms_spec("mask_rms_M1000_N512_f32", 1000, 512, DT::F32), rms_spec("mask_rms_M4096_N256_f16", 4096, 256, DT::F16)};
}

std::string mask_param_name(const testing::TestParamInfo<MaskParam>& info) {
  return std::get<0>(info.param).name + "_" + mask_id(std::get<1>(info.param)) + "_" +
         strategy_id(std::get<2>(info.param));
}

// LayerNorm: dgamma+dbeta, dgamma only, dbeta only, dX only, all (and dX+dbeta).
INSTANTIATE_TEST_SUITE_P(LayerNorm, OutputMask,
                         testing::Combine(testing::ValuesIn(mask_ln_specs()),
                                          testing::Values(Mask{false, true, true}, Mask{false, true, false},
                                                          Mask{false, false, true}, Mask{true, false, false},
                                                          Mask{true, true, true}, Mask{true, false, true}),
                                          testing::ValuesIn(all_strategies())),
                         mask_param_name);
// RMSNorm: dX only, dweight only, both.
INSTANTIATE_TEST_SUITE_P(RmsNorm, OutputMask,
                         testing::Combine(testing::ValuesIn(mask_rms_specs()),
                                          testing::Values(Mask{true, false, false}, Mask{false, true, false},
                                                          Mask{true, true, false}),
                                          testing::ValuesIn(all_strategies())),
                         mask_param_name);

// ---- odd N and unaligned rows (base pointer offset by one element): the scalar row instances of
// 1-4 elements a thread (N <= 1024), the wide ones of 8 in groups of up to 512 (4095; 1536 and 3584
// where unaligned, vectorised otherwise) and of 1024 (7001; 8192 where unaligned; LayerNorm's forward
// streams them), and streamed rows (4097) ----

using OddParam = std::tuple<bool, std::int64_t, DType, std::int64_t>;  // rms, N, dtype, offset
class OddN : public testing::TestWithParam<OddParam> {};

TEST_P(OddN, ForwardAndBackwardMatchReference) {
  const bool rms = std::get<0>(GetParam());
  const std::int64_t n = std::get<1>(GetParam());
  const DType t = std::get<2>(GetParam());
  const std::int64_t offset = std::get<3>(GetParam());
  const std::string name = std::string(rms ? "rms" : "ln") + "_odd_N" + std::to_string(n) + "_" + dtype_id(t) +
                           "_off" + std::to_string(offset);
  Spec spec = rms ? rms_spec(name, 130, n, t) : ln_spec(name, 130, n, t);
  spec.offset = offset;
  check_forward_and_backward(spec, n1_floor(spec));
}

INSTANTIATE_TEST_SUITE_P(Layout, OddN,
                         testing::Combine(testing::Bool(), testing::Values(1, 3, 1000, 1001, 1536, 3584, 4095, 4097, 7001, 8192),
                                          testing::Values(DT::F16, DT::BF16, DT::F32), testing::Values(0, 1)),
                         [](const testing::TestParamInfo<OddParam>& info) {
                           return std::string(std::get<0>(info.param) ? "rms" : "ln") + "_N" +
                                  std::to_string(std::get<1>(info.param)) + "_" + dtype_id(std::get<2>(info.param)) +
                                  (std::get<3>(info.param) ? "_unaligned" : "_aligned");
                         });

// ---- undefined weight (and bias) at small and huge M ----

Spec no_weight(Spec s, bool bias) {
  s.has_weight = false;
  s.has_bias = bias;
  return s;
}

class UndefinedWeight : public testing::TestWithParam<Spec> {};

TEST_P(UndefinedWeight, ForwardAndBackwardMatchReference) { check_forward_and_backward(GetParam()); }

INSTANTIATE_TEST_SUITE_P(
    Weight, UndefinedWeight,
    testing::Values(no_weight(ln_spec("ln_noweight_nobias_M37_N768_f16", 37, 768, DT::F16), false),
                    no_weight(ln_spec("ln_noweight_bias_M1000_N1024_bf16", 1000, 1024, DT::BF16), true),
                    no_weight(ln_spec("ln_noweight_nobias_M100000_N128_f16", 100000, 128, DT::F16), false),
                    no_weight(ln_spec("ln_noweight_bias_M100000_N768_f32", 100000, 768, DT::F32), true),
                    no_weight(rms_spec("rms_noweight_M37_N768_f16", 37, 768, DT::F16), false),
                    no_weight(rms_spec("rms_noweight_M100000_N128_bf16", 100000, 128, DT::BF16), false)),
    spec_name);

// ---- large eps: 1e-5, 1e-3, 0.1, 1.0 (forward + backward) ----

using EpsParam = std::tuple<bool, double, DType>;
class LargeEps : public testing::TestWithParam<EpsParam> {};

TEST_P(LargeEps, ForwardAndBackwardMatchReference) {
  const bool rms = std::get<0>(GetParam());
  const double eps = std::get<1>(GetParam());
  const DType t = std::get<2>(GetParam());
  const std::string name = std::string(rms ? "rms" : "ln") + "_eps" + std::to_string(eps) + "_" + dtype_id(t);
  Spec spec = rms ? rms_spec(name, 512, 1024, t) : ln_spec(name, 512, 1024, t);
  spec.eps = eps;
  check_forward_and_backward(spec);
}

INSTANTIATE_TEST_SUITE_P(Eps, LargeEps,
                         testing::Combine(testing::Bool(), testing::Values(1e-5, 1e-3, 0.1, 1.0),
                                          testing::Values(DT::F16, DT::F32)),
                         [](const testing::TestParamInfo<EpsParam>& info) {
                           const double eps = std::get<1>(info.param);
                           const std::string e = eps == 1e-5 ? "1em5" : eps == 1e-3 ? "1em3" : eps == 0.1 ? "0p1" : "1";
                           return std::string(std::get<0>(info.param) ? "rms" : "ln") + "_eps" + e + "_" +
                                  dtype_id(std::get<2>(info.param));
                         });

// ---- staged rows: cp.async through shared memory (RowShape::stages), with padded row strides,
// a partial last iteration (M not a multiple of the rows a grid sweep covers) and undefined weight ----

class StagedRows : public testing::TestWithParam<Spec> {};

TEST_P(StagedRows, ForwardAndBackwardMatchReference) {
  const Spec& spec = GetParam();
  // The shape must really be staged for the forward, dX and fused kernels, or this suite covers nothing new.
  Problem p = problem_of(spec, spec.rms ? Op::RmsNormForward : Op::LayerNormForward);
  const DeviceFacts device = current_device_facts();
  // (RMSNorm forwards this large take the packed walk by default, and short rows the short-row walk;
  // check_forward also runs the staged one, under forward_packed_table(false), which takes neither)
  const Plan forward = plan(p, device, Strategy::Auto, forward_packed_table(false));
  EXPECT_GT(forward.row.stages, 0) << "forward not staged: " << forward.describe();
  p.op = spec.rms ? Op::RmsNormBackward : Op::LayerNormBackward;
  EXPECT_GT(plan(p, device, Strategy::Fused).row.stages, 0) << plan(p, device, Strategy::Fused).describe();
  EXPECT_GT(plan(p, device, Strategy::TwoPass).row.stages, 0) << plan(p, device, Strategy::TwoPass).describe();
  check_forward_and_backward(spec);
}

INSTANTIATE_TEST_SUITE_P(
    Staged, StagedRows,
    testing::Values(ln_spec("ln_M20011_N4096_bf16", 20011, 4096, DT::BF16),
                    rms_spec("rms_M20011_N4096_bf16", 20011, 4096, DT::BF16),
                    ln_spec("ln_M9001_N1000_f16", 9001, 1000, DT::F16),
                    padded(ln_spec("ln_M5003_N768_f32_padded", 5003, 768, DT::F32), 4),
                    padded(rms_spec("rms_M7777_N8192_f16_padded", 7777, 8192, DT::F16), 8),
                    no_weight(ln_spec("ln_M6000_N2048_bf16_noweight", 6000, 2048, DT::BF16), false),
                    ln_spec("ln_M262147_N64_bf16", 262147, 64, DT::BF16)),
    spec_name);

// ---- short rows: the forward's short-row walk (RowShape::short_rows), every lane width (1 .. 32
// lanes at a vector a lane, a warp at 2, 4, 8, 16 vectors a lane), rows narrower than their lanes and
// slots (3, 5, 25, 125, 255 vectors), one row, M not a multiple of a block's rows, strided rows, no
// weight, fp32 weights. check_forward runs both walks of these rows (the built-in table's and the
// other), so every case covers the short walk whatever its size ----

class ShortRows : public testing::TestWithParam<Spec> {};

TEST_P(ShortRows, ForwardBothWalksAndBackwardMatchReference) {
  const Spec& spec = GetParam();
  const Problem p = problem_of(spec, spec.rms ? Op::RmsNormForward : Op::LayerNormForward);
  const Plan forward = plan(p, current_device_facts(), Strategy::Auto, forward_short_rows_table(true));
  ASSERT_TRUE(forward.row.short_rows) << forward.describe();
  const std::int64_t vectors = spec.N / std::int64_t(16 / dtype_size(spec.dtype));
  const std::int64_t slots = std::int64_t(forward.row.threads_per_row) * forward.row.items;
  EXPECT_GE(slots, vectors) << forward.describe();
  EXPECT_LT(slots, 2 * vectors) << forward.describe();
  check_forward_and_backward(spec);
}

INSTANTIATE_TEST_SUITE_P(
    Short, ShortRows,
    testing::Values(ln_spec("ln_M1_N64_bf16", 1, 64, DT::BF16),
                    rms_spec("rms_M3001_N8_f16", 3001, 8, DT::F16),
                    ln_spec("ln_M777_N16_bf16", 777, 16, DT::BF16),
                    rms_spec("rms_M1001_N32_bf16", 1001, 32, DT::BF16),
                    ln_spec("ln_M5000_N40_f16", 5000, 40, DT::F16),
                    ln_spec("ln_M999_N24_f16", 999, 24, DT::F16),
                    ln_spec("ln_M2049_N32_f32", 2049, 32, DT::F32),
                    rms_spec("rms_M100_N12_f32", 100, 12, DT::F32),
                    ln_spec("ln_M20000_N4_f32", 20000, 4, DT::F32),
                    padded(ln_spec("ln_M4099_N64_bf16_padded", 4099, 64, DT::BF16), 8),
                    strided(rms_spec("rms_M3000_N64_bf16_pad8_16_24", 3000, 64, DT::BF16), 8, 16, 24),
                    no_weight(ln_spec("ln_noweight_bias_M513_N48_bf16", 513, 48, DT::BF16), true),
                    no_weight(ln_spec("ln_noweight_nobias_M70000_N64_f16", 70000, 64, DT::F16), false),
                    with_weight_dtype(rms_spec("rms_M2000_N64_bf16_w32", 2000, 64, DT::BF16), DT::F32),
                    with_weight_dtype(ln_spec("ln_M3333_N56_f16_w32", 3333, 56, DT::F16), DT::F32),
                    // a warp a row and more: 16 lanes, 32 lanes at 1 (25 of 32 vectors), 2, 4 (125 of
                    // 128) and 8 vectors a lane (255 of 256 fp32)
                    ln_spec("ln_M3001_N128_bf16", 3001, 128, DT::BF16),
                    rms_spec("rms_M2001_N200_bf16", 2001, 200, DT::BF16),
                    ln_spec("ln_M1537_N512_f16", 1537, 512, DT::F16),
                    ln_spec("ln_M4097_N1000_bf16", 4097, 1000, DT::BF16),
                    rms_spec("rms_M1025_N768_f16", 1025, 768, DT::F16),
                    ln_spec("ln_M999_N2048_bf16", 999, 2048, DT::BF16),
                    rms_spec("rms_M701_N1020_f32", 701, 1020, DT::F32),
                    ln_spec("ln_M1_N1024_f32", 1, 1024, DT::F32),
                    strided(ln_spec("ln_M1200_N1024_bf16_pad8_16_24", 1200, 1024, DT::BF16), 8, 16, 24),
                    no_weight(rms_spec("rms_noweight_M3000_N512_bf16", 3000, 512, DT::BF16), false),
                    no_weight(ln_spec("ln_noweight_bias_M800_N1536_f16", 800, 1536, DT::F16), true),
                    with_weight_dtype(ln_spec("ln_M2222_N776_bf16_w32", 2222, 776, DT::BF16), DT::F32),
                    // 16 vectors a lane: 257 and 512 vectors, fp32, strides, no weight, fp32 weights
                    ln_spec("ln_M1001_N2056_bf16", 1001, 2056, DT::BF16),
                    rms_spec("rms_M777_N4096_f16", 777, 4096, DT::F16),
                    ln_spec("ln_M513_N2048_f32", 513, 2048, DT::F32),
                    strided(ln_spec("ln_M300_N4096_bf16_pad8_16_24", 300, 4096, DT::BF16), 8, 16, 24),
                    no_weight(ln_spec("ln_noweight_bias_M400_N3000_f16", 400, 3000, DT::F16), true),
                    with_weight_dtype(rms_spec("rms_M333_N3960_bf16_w32", 333, 3960, DT::BF16), DT::F32)),
    spec_name);

// ---- one row a block: the forward's one-row-a-block walk (RowShape::block_rows), every instance
// (64 .. 512 threads at 1, 2 and 4 vectors a thread, the LayerNorm ones that hold their row packed
// included; the narrower blocks take 2 and 4 vectors under a larger forward_block_rows_items_target),
// rows that fill their slots and rows that leave most of a block's last warps idle (33 of 64 vectors,
// 513 of 1024, 1025 and 1537 of 2048), each weight / bias
// combination, fp32 weights, strided rows. Each case asserts the instance it was chosen for, matches
// the reference and repeats its bits; check_forward then runs it and the walk it stands in for ----

struct BlockRowsCase {
  Spec spec;
  int items_target;  // PlannerTable::forward_block_rows_items_target
  int threads, items;
};
void PrintTo(const BlockRowsCase& c, std::ostream* os) { *os << c.spec.name; }

class BlockRows : public testing::TestWithParam<BlockRowsCase> {};

TEST_P(BlockRows, EveryInstanceMatchesReference) {
  const BlockRowsCase& c = GetParam();
  PlannerTable table = forward_block_rows_table(true);
  table.forward_block_rows_items_target = c.items_target;
  const auto hc = make_host_case(c.spec);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefForward ref = reference_forward(*hc);
  const ForwardOut out = gpu_forward(*hc, dc, test_stream(), &table);
  ASSERT_TRUE(out.plan.row.block_rows) << out.plan.describe();
  ASSERT_EQ(out.plan.row.threads_per_row, c.threads) << out.plan.describe();
  ASSERT_EQ(out.plan.row.items, c.items) << out.plan.describe();
  expect_forward_matches(*hc, out, ref);
  expect_same_bits(out, gpu_forward(*hc, dc, test_stream(), &table), "second call");
  check_forward(*hc, dc, ref);
}

Spec weight_alone(Spec s) {
  s.has_bias = false;
  return s;
}

INSTANTIATE_TEST_SUITE_P(
    Block, BlockRows,
    testing::Values(BlockRowsCase{ln_spec("ln_M7_N264_bf16", 7, 264, DT::BF16), 1, 64, 1},
                    BlockRowsCase{rms_spec("rms_M5_N200_f32", 5, 200, DT::F32), 1, 64, 1},
                    BlockRowsCase{weight_alone(ln_spec("ln_weight_alone_M33_N768_f16", 33, 768, DT::F16)), 1, 128, 1},
                    BlockRowsCase{with_weight_dtype(rms_spec("rms_M16_N1032_bf16_w32", 16, 1032, DT::BF16), DT::F32), 1,
                                  256, 1},
                    BlockRowsCase{no_weight(ln_spec("ln_noweight_bias_M9_N2048_f32", 9, 2048, DT::F32), true), 1, 512, 1},
                    BlockRowsCase{padded(ln_spec("ln_M3_N4104_bf16_padded", 3, 4104, DT::BF16), 8), 1, 512, 2},
                    BlockRowsCase{rms_spec("rms_M4_N8192_f16", 4, 8192, DT::F16), 1, 512, 2},
                    BlockRowsCase{with_weight_dtype(ln_spec("ln_M2_N12296_f16_w32", 2, 12296, DT::F16), DT::F32), 1, 512, 4},
                    BlockRowsCase{rms_spec("rms_M3_N16384_bf16", 3, 16384, DT::BF16), 1, 512, 4},
                    BlockRowsCase{no_weight(ln_spec("ln_noweight_nobias_M64_N1024_bf16", 64, 1024, DT::BF16), false), 1,
                                  128, 1},
                    BlockRowsCase{strided(ln_spec("ln_M100_N2048_bf16_pad8_16_24", 100, 2048, DT::BF16), 8, 16, 24), 2,
                                  128, 2},
                    BlockRowsCase{ln_spec("ln_M10_N1000_f16", 10, 1000, DT::F16), 2, 64, 2},
                    BlockRowsCase{ln_spec("ln_M11_N1600_bf16", 11, 1600, DT::BF16), 4, 64, 4},
                    BlockRowsCase{rms_spec("rms_M6_N4096_bf16", 6, 4096, DT::BF16), 4, 128, 4},
                    BlockRowsCase{rms_spec("rms_M12_N1024_f32", 12, 1024, DT::F32), 2, 128, 2},
                    BlockRowsCase{ln_spec("ln_M13_N4096_f16", 13, 4096, DT::F16), 2, 256, 2},
                    BlockRowsCase{rms_spec("rms_M14_N8192_bf16", 14, 8192, DT::BF16), 4, 256, 4},
                    // the LayerNorm 16-bit instances that hold their row packed (kHoldPackedRow)
                    BlockRowsCase{ln_spec("ln_M9_N8200_bf16", 9, 8200, DT::BF16), 1, 512, 4},
                    BlockRowsCase{ln_spec("ln_M7_N6152_f16", 7, 6152, DT::F16), 4, 256, 4}),
    [](const testing::TestParamInfo<BlockRowsCase>& info) { return info.param.spec.name; });

// ---- LayerNorm rows far from zero: every forward walk's statistics keep their precision. Rows offset
// by ~90 standard deviations (or the opposite way beside an outlier column at +3000, as in transformer
// activations): a one-pass E[x^2] - mean^2 would lose ~1e-3 of the variance to cancellation, 100x the
// statistics' tolerance (the walks sum x, then (x - mean)^2; docs/NOTES.md entry 54 measured a
// one-chain merge of the lanes' moments, slower, not kept). Further offsets cost any fp32 forward its
// y tolerance: the mean itself is then rounded by more than 1e-5 of a standard deviation. The
// one-row-a-block walk at 1, 2 and 4 vectors a thread, and the walks it stands in for (check_forward) ----

struct OffsetRowsCase {
  Spec spec;
  int items_target;  // PlannerTable::forward_block_rows_items_target
  double center, halfwidth, outlier;
};
void PrintTo(const OffsetRowsCase& c, std::ostream* os) { *os << c.spec.name; }

class OffsetRows : public testing::TestWithParam<OffsetRowsCase> {};

TEST_P(OffsetRows, LayerNormStatisticsKeepTheirPrecision) {
  const OffsetRowsCase& c = GetParam();
  PlannerTable table = forward_block_rows_table(true);
  table.forward_block_rows_items_target = c.items_target;
  auto hc = make_host_case(c.spec);
  const Spec& s = c.spec;
  // Even rows around +center, odd rows around -1.05 center with an outlier column (7) at +outlier.
  fill_random(hc->x, s.x_layout(), seed_of(s.name) ^ 5, c.center, c.halfwidth);
  for (std::int64_t r = 1; r < s.M; r += 2) {
    for (std::int64_t j = 0; j < s.N; ++j) {
      const std::int64_t i = r * (s.N + s.pad_x) + s.offset + j;
      hc->x.set(i, hc->x.get(i) - 1.05 * c.center);
    }
    hc->x.set(r * (s.N + s.pad_x) + s.offset + 7, c.outlier);
  }
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefForward ref = reference_forward(*hc);
  const ForwardOut out = gpu_forward(*hc, dc, test_stream(), &table);
  ASSERT_TRUE(out.plan.row.block_rows) << out.plan.describe();
  expect_forward_matches(*hc, out, ref);
  expect_same_bits(out, gpu_forward(*hc, dc, test_stream(), &table), "second call");
  check_forward(*hc, dc, ref);
}

INSTANTIATE_TEST_SUITE_P(
    Offset, OffsetRows,
    testing::Values(OffsetRowsCase{ln_spec("ln_M6_N1024_f32_at_50", 6, 1024, DT::F32), 1, 50.0, 1.0, 3000.0},
                    OffsetRowsCase{ln_spec("ln_M6_N776_f32_at_50", 6, 776, DT::F32), 2, 50.0, 1.0, 3000.0},
                    OffsetRowsCase{ln_spec("ln_M5_N4104_f32_at_50", 5, 4104, DT::F32), 4, 50.0, 1.0, 3000.0},
                    OffsetRowsCase{ln_spec("ln_M4_N768_bf16_at_100", 4, 768, DT::BF16), 2, 100.0, 4.0, 3000.0},
                    OffsetRowsCase{ln_spec("ln_M4_N12296_f16_at_100", 4, 12296, DT::F16), 4, 100.0, 2.0, 3000.0},
                    OffsetRowsCase{ln_spec("ln_M3_N8192_bf16_at_100", 3, 8192, DT::BF16), 4, 100.0, 2.0, 3000.0}),
    [](const testing::TestParamInfo<OffsetRowsCase>& info) { return info.param.spec.name; });

}  // namespace
}  // namespace normkit::gputest
