// Non-finite inputs: a NaN or an infinity in a row reaches exactly the outputs it reaches in the float64
// reference, and no other. Training relies on both halves: a loss scaler (torch.amp.GradScaler) skips a
// step only if the gradients show the overflow, and one bad row must not poison its neighbours -- rows
// that share a warp, a block's row sums, a stage, or a column strip's partial sums.
#include <cmath>

#include "harness.h"

namespace normkit::gputest {
namespace {

using DT = DType;

/// Where `got` and the reference disagree about finiteness (the count and the first index), and the
/// relative L2 error over the elements both hold finite. Which non-finite value a kernel produces
/// (NaN, +inf or -inf) is not compared: adding the same infinite terms in another order (the kernels'
/// FMA forms, their sum trees) can turn -inf into NaN, and either shows the overflow.
struct FiniteMatch {
  std::int64_t mismatched = 0, first_mismatch = -1, nonfinite = 0;
  double num = 0, den = 0;
  void add(double got, double ref, std::int64_t index) {
    if (std::isfinite(got) != std::isfinite(ref)) {
      if (mismatched++ == 0) first_mismatch = index;
      return;
    }
    if (!std::isfinite(ref)) {
      ++nonfinite;
      return;
    }
    num += (got - ref) * (got - ref);
    den += ref * ref;
  }
  double rel() const { return std::sqrt(num) / std::max(std::sqrt(den), 1e-30); }
  std::string describe() const {
    return std::to_string(mismatched) + " elements finite on one side only (first at logical index " +
           std::to_string(first_mismatch) + "), " + std::to_string(nonfinite) +
           " non-finite on both, rel L2 error of the rest " + std::to_string(rel());
  }
};

FiniteMatch match_matrix(const HostBuffer& got, const Layout& layout, const std::vector<double>& ref) {
  FiniteMatch m;
  for (std::int64_t r = 0; r < layout.rows; ++r)
    for (std::int64_t c = 0; c < layout.cols; ++c)
      m.add(got.get(layout.at(r, c)), ref[std::size_t(r * layout.cols + c)], r * layout.cols + c);
  return m;
}

FiniteMatch match_vector(const HostBuffer& got, std::int64_t n, const std::vector<double>& ref) {
  FiniteMatch m;
  for (std::int64_t i = 0; i < n; ++i) m.add(got.get(i), ref[std::size_t(i)], i);
  return m;
}

void expect_matches(const FiniteMatch& m, double tolerance, const char* what) {
  EXPECT_EQ(m.mismatched, 0) << what << ": " << m.describe();
  EXPECT_GT(m.nonfinite, 0) << what << ": the injected value reached no element (the test lost its point)";
  EXPECT_LE(m.rel(), tolerance) << what << ": " << m.describe();
}

/// Sets element (r, c) of a matrix input of `hc` (x or dy) to `value`.
void inject(HostBuffer& b, const Layout& layout, std::int64_t r, std::int64_t c, double value) {
  b.set(layout.at(r, c), value);
}

struct NonFiniteCase {
  Spec spec;
};
void PrintTo(const NonFiniteCase& c, std::ostream* os) { *os << c.spec.name; }

class NonFinite : public testing::TestWithParam<NonFiniteCase> {};

// x: a NaN in row M/2 and +inf in the last element of the last row. Forward: those rows' y, mean and rstd
// are non-finite as the reference's are (RMSNorm's +inf row: rstd 0, y 0 but at the inf), the other
// rows exact. Backward (statistics recomputed from that x, as a forward would give them): those rows'
// dx, every column's dweight (the NaN row's dy * xhat) -- and dbias, the sum of the finite dy, finite.
TEST_P(NonFinite, NonFiniteXReachesItsRowsOnly) {
  const Spec& spec = GetParam().spec;
  SCOPED_TRACE(testing::PrintToString(spec));
  auto hc = make_host_case(spec);
  inject(hc->x, spec.x_layout(), spec.M / 2, spec.N / 2, std::nan(""));
  inject(hc->x, spec.x_layout(), spec.M - 1, spec.N - 1, INFINITY);
  compute_stats(*hc);
  const DeviceCase dc = upload_case(*hc, test_stream());

  const RefForward fref = reference_forward(*hc);
  const ForwardOut f = gpu_forward(*hc, dc);
  {
    SCOPED_TRACE("forward plan: " + f.plan.describe());
    expect_matches(match_matrix(f.y, spec.out_layout(), fref.y), test::tolerance(spec.dtype), "y");
    if (!spec.rms) expect_matches(match_vector(f.mean, spec.M, fref.mean), 1e-5, "mean");
    expect_matches(match_vector(f.rstd, spec.M, fref.rstd), 1e-5, "rstd");
  }

  const RefBackward ref = reference_backward(*hc);
  for (Strategy s : all_strategies()) {
    const BackwardOut out = gpu_backward(*hc, dc, spec.full_mask(), s, test_stream());
    if (!out.ran) continue;
    SCOPED_TRACE(strategy_id(s) + " plan: " + out.plan.describe());
    expect_matches(match_matrix(out.dx, spec.out_layout(), ref.dx), test::tolerance(spec.dtype), "dx");
    expect_matches(match_vector(out.dweight, spec.N, ref.dweight), test::tolerance(spec.weight_dtype()),
                   "dweight");
    if (spec.bias_present()) {
      const FiniteMatch db = match_vector(out.dbias, spec.N, ref.dbias);
      EXPECT_EQ(db.mismatched + db.nonfinite, 0) << "dbias (sums of finite dy): " << db.describe();
      EXPECT_LE(db.rel(), test::tolerance(spec.weight_dtype())) << "dbias: " << db.describe();
    }
  }
}

// dy: a NaN in the last column of row 0 and -inf in column N/3 of row M/3 (x finite). Those two rows'
// dx, and those two columns of dweight / dbias, are non-finite; every other element is finite and
// matches the reference -- full backward and gamma/beta alone, every strategy.
TEST_P(NonFinite, NonFiniteDyReachesItsRowsAndColumnsOnly) {
  const Spec& spec = GetParam().spec;
  SCOPED_TRACE(testing::PrintToString(spec));
  auto hc = make_host_case(spec);
  inject(hc->dy, spec.dy_layout(), 0, spec.N - 1, std::nan(""));
  inject(hc->dy, spec.dy_layout(), spec.M / 3, spec.N / 3, -INFINITY);
  const DeviceCase dc = upload_case(*hc, test_stream());
  const RefBackward ref = reference_backward(*hc);
  for (Strategy s : all_strategies())
    for (Mask mask : {spec.full_mask(), Mask{false, true, !spec.rms}}) {
      const BackwardOut out = gpu_backward(*hc, dc, mask, s, test_stream());
      if (!out.ran) continue;
      SCOPED_TRACE(strategy_id(s) + " " + mask_id(mask) + " plan: " + out.plan.describe());
      if (mask.dx) expect_matches(match_matrix(out.dx, spec.out_layout(), ref.dx), test::tolerance(spec.dtype), "dx");
      expect_matches(match_vector(out.dweight, spec.N, ref.dweight), test::tolerance(spec.weight_dtype()),
                     "dweight");
      if (mask.dbias)
        expect_matches(match_vector(out.dbias, spec.N, ref.dbias), test::tolerance(spec.weight_dtype()), "dbias");
    }
}

// One shape per row walk: short rows several to a warp, rows cached in registers, staged fused rows,
// unvectorised odd N, the forward's streamed rows (7 x 57352), rows split over a cluster, and the wide
// rows (clusters of 16, the fused walk's deferred sums when fused is forced).
INSTANTIATE_TEST_SUITE_P(
    Propagation, NonFinite,
    testing::Values(NonFiniteCase{ln_spec("nonfinite_ln_M64_N64_f16", 64, 64, DT::F16)},
                    NonFiniteCase{rms_spec("nonfinite_rms_M200_N192_bf16", 200, 192, DT::BF16)},
                    NonFiniteCase{ln_spec("nonfinite_ln_M300_N1024_bf16", 300, 1024, DT::BF16)},
                    NonFiniteCase{ln_spec("nonfinite_ln_M4100_N768_f16", 4100, 768, DT::F16)},
                    NonFiniteCase{rms_spec("nonfinite_rms_M2000_N4096_bf16", 2000, 4096, DT::BF16)},
                    NonFiniteCase{ln_spec("nonfinite_ln_M97_N1000_f32", 97, 1000, DT::F32)},
                    NonFiniteCase{ln_spec("nonfinite_ln_M7_N57352_bf16", 7, 57352, DT::BF16)},
                    NonFiniteCase{ln_spec("nonfinite_ln_M40_N65536_bf16", 40, 65536, DT::BF16)},
                    NonFiniteCase{rms_spec("nonfinite_rms_M24_N262144_bf16", 24, 262144, DT::BF16)},
                    NonFiniteCase{ln_spec("nonfinite_ln_M24_N262144_f16", 24, 262144, DT::F16)}),
    [](const testing::TestParamInfo<NonFiniteCase>& info) { return info.param.spec.name; });

}  // namespace
}  // namespace normkit::gputest
