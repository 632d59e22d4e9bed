// Constant rows: LayerNorm of a row whose elements are all c has mean c and xhat 0, so y is the bias
// exactly -- what PyTorch's Welford statistics give and what a user's first check of a drop-in norm
// looks at. A mean an ulp off makes every xhat of the row ulp(c) * rstd instead, with rstd near
// 1 / sqrt(eps) for such a row: y = b - 0.019 w at 1000 columns of 1000.0 (the kernels' sum * (1 / N)
// before row_mean). Neighbouring rows are random, so rows that share a warp, a block or a cluster
// with a constant one are checked against the reference too.
#include <cmath>

#include "harness.h"

namespace normkit::gputest {
namespace {

using DT = DType;

// Representable in bf16 and f16, and n * c exact in fp32 for the row lengths below (few significant
// bits), so that the row's sum is exact and its mean must be c itself.
constexpr double kValues[] = {1000.0, -3.5, 0.75, 40960.0, 96.0, -12.0};
constexpr int kValueCount = int(sizeof(kValues) / sizeof(kValues[0]));

/// Every third row constant (row r = 3k holds kValues[k % 6]), the others as make_host_case drew them.
std::vector<std::pair<std::int64_t, double>> make_constant_rows(HostCase& hc) {
  std::vector<std::pair<std::int64_t, double>> rows;
  const Layout layout = hc.spec.x_layout();
  for (std::int64_t r = 0; r < hc.spec.M; r += 3) {
    const double c = kValues[(r / 3) % kValueCount];
    for (std::int64_t col = 0; col < hc.spec.N; ++col) hc.x.set(layout.at(r, col), c);
    rows.emplace_back(r, c);
  }
  return rows;
}

class ConstantRows : public testing::TestWithParam<Spec> {};

TEST_P(ConstantRows, MeanIsTheValueAndYIsTheBias) {
  const Spec& spec = GetParam();
  SCOPED_TRACE(testing::PrintToString(spec));
  auto hc = make_host_case(spec);
  const auto constant = make_constant_rows(*hc);
  compute_stats(*hc);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefForward ref = reference_forward(*hc);
  const Layout out = spec.out_layout();
  const double rstd_of_constant = 1.0 / std::sqrt(spec.eps);

  // The built-in walk and the ones the tables force where the shape allows them.
  const std::pair<const char*, const PlannerTable*> tables[] = {
      {"built-in", nullptr},
      {"short rows", &forward_short_rows_table(true)},
      {"one row a block", &forward_block_rows_table(true)},
      {"one row a block, packed", &forward_packed_block_rows_table(true)},
      {"no short rows", &forward_short_rows_table(false)},
  };
  for (const auto& [label, table] : tables) {
    const ForwardOut f = gpu_forward(*hc, dc, test_stream(), table);
    SCOPED_TRACE(std::string(label) + " table, plan: " + f.plan.describe());
    expect_forward_matches(*hc, f, ref);
    // Split 16-bit rows form xhat as one FMA, x * rstd - fl(mean * rstd) (row_layout.cuh, RowXhat: the
    // walk is bound by its instructions), whose value at x == mean is the rounding residual of mean *
    // rstd, not 0, unless that product is exact: RowXhat shortens rstd for a mean of <= 11 significant
    // bits (a constant 16-bit row's), so every walk gives y == b exactly.
    for (const auto& [r, c] : constant) {
      ASSERT_EQ(f.mean.get(r), c) << "mean of constant row " << r;
      EXPECT_NEAR(f.rstd.get(r), rstd_of_constant, 1e-5 * rstd_of_constant) << "rstd of constant row " << r;
      int reported = 0;
      for (std::int64_t col = 0; col < spec.N && reported < 3; ++col) {
        const double b = spec.bias_present() ? hc->bias.get(col) : 0.0;
        const double y = f.y.get(out.at(r, col));
        if (!(y == b)) {
          ADD_FAILURE() << "row " << r << " (all " << c << "), column " << col << ": y = " << y << ", expected the bias "
                        << b << " exactly";
          ++reported;
        }
      }
    }
  }
}

// The backward of the same rows, every strategy: a constant row's xhat is 0, so it adds nothing to
// dgamma and its dx is rstd (g - mean(g)). The split 16-bit rows form xhat as an FMA there too, given only
// mean and rstd (RowXhat::exact_shift_rstd makes mean * rstd exact for means of 16-bit values); without
// it dgamma was 6.9 % (rel. L2) off at 40 x 65536 bf16 and 6.3 % at 24 x 262144 fp16 (H200, 3c15a4b).
TEST_P(ConstantRows, BackwardMatchesTheReference) {
  const Spec& spec = GetParam();
  SCOPED_TRACE(testing::PrintToString(spec));
  auto hc = make_host_case(spec);
  make_constant_rows(*hc);
  compute_stats(*hc);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (Strategy s : all_strategies()) {
    SCOPED_TRACE(strategy_name(s));
    check_backward(*hc, dc, ref, spec.full_mask(), s);
  }
}

// One shape per forward walk: short rows (several a warp), rows cached in registers (fp32, and 16-bit
// rows a block holds), rows that are not vectorised (odd N), streamed rows (7 x 57352), rows split over
// a cluster (fp32: exact xhat; 16-bit: the FMA form), the widest split rows; with and without a bias.
// Values up to 40960 make the FMA form's residual large (y = b + 0.5 w at a353a4b, before any rule).
INSTANTIATE_TEST_SUITE_P(
    Walks, ConstantRows,
    testing::Values(ln_spec("constant_ln_M3000_N64_f16", 3000, 64, DT::F16),
                    ln_spec("constant_ln_M97_N1000_f32", 97, 1000, DT::F32),
                    ln_spec("constant_ln_M600_N4096_bf16", 600, 4096, DT::BF16),
                    ln_spec("constant_ln_M50_N1001_f16", 50, 1001, DT::F16),
                    ln_spec("constant_ln_M7_N57352_bf16", 7, 57352, DT::BF16),
                    ln_spec("constant_ln_M30_N24576_f32", 30, 24576, DT::F32),
                    ln_spec("constant_ln_M40_N65536_bf16", 40, 65536, DT::BF16),
                    ln_spec("constant_ln_M24_N262144_f16", 24, 262144, DT::F16),
                    [] {
                      Spec s = ln_spec("constant_ln_M200_N1000_bf16_nobias", 200, 1000, DT::BF16);
                      s.has_bias = false;
                      return s;
                    }()),
    spec_name);

}  // namespace
}  // namespace normkit::gputest
