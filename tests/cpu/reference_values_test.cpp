// Outputs of the public CPU path against the test's own float64 computation (cpu_helpers.h), for
// every dtype, odd widths, optional weight/bias, fp32 weights with 16-bit activations, strided
// inputs and outputs, degenerate shapes, and every backward output mask.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu_helpers.h"

namespace normkit::test {
namespace {

constexpr double kEps = 1e-5;

DType stats_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

struct Case {
  bool rms = false;
  DType dtype = DType::F32;         // T
  DType weight_dtype = DType::F32;  // W
  std::int64_t m = 3, n = 5;
  bool has_weight = true, has_bias = true;
  // row_stride - N of each activation view (0 = packed)
  std::int64_t x_gap = 0, y_gap = 0, dy_gap = 0, dx_gap = 0;
};

std::string describe(const Case& c) {
  std::string s = std::string(c.rms ? "rms" : "layer") + "_" + dtype_name(c.dtype) + "_w" + dtype_name(c.weight_dtype) +
                  "_M" + std::to_string(c.m) + "_N" + std::to_string(c.n);
  if (!c.has_weight) s += "_noweight";
  if (!c.rms && !c.has_bias) s += "_nobias";
  if (c.x_gap || c.y_gap || c.dy_gap || c.dx_gap) s += "_strided";
  return s;
}

/// Forward then backward (all outputs requested) through the public API; every output checked
/// against the independent computation, and the gaps between output rows checked untouched.
void run_and_check(const Case& c) {
  SCOPED_TRACE(describe(c));
  std::mt19937_64 rng(std::hash<std::string>{}(describe(c)));
  const bool has_bias = c.has_bias && !c.rms;

  HostMatrix x(c.dtype, c.m, c.n, c.n + c.x_gap);
  x.fill_normal(rng, 0.5, 2.0);  // a non-zero mean so LayerNorm's centring matters
  HostVector weight(c.weight_dtype, c.n), bias(c.weight_dtype, c.n);
  weight.fill_normal(rng, 1.0, 0.5);
  bias.fill_normal(rng);
  std::optional<ConstVec> weight_arg, bias_arg;
  if (c.has_weight) weight_arg = weight.cview();
  if (has_bias) bias_arg = bias.cview();

  HostMatrix y(c.dtype, c.m, c.n, c.n + c.y_gap);
  HostVector mean(stats_dtype(c.dtype), c.m), rstd(stats_dtype(c.dtype), c.m);
  if (c.rms) {
    rms_norm_forward({x.cview(), weight_arg, kEps, y.view(), rstd.view()}, kCpu);
  } else {
    layer_norm_forward({x.cview(), weight_arg, bias_arg, kEps, y.view(), mean.view(), rstd.view()}, kCpu);
  }

  const std::vector<double> weight_values = c.has_weight ? weight.values() : std::vector<double>{};
  const std::vector<double> bias_values = has_bias ? bias.values() : std::vector<double>{};
  const ExpectedForward fwd = expected_forward(c.rms, x.values(), c.m, c.n, weight_values, bias_values, kEps);
  expect_rounded_from(y.values(), fwd.y, c.dtype, "y");
  if (!c.rms) expect_rounded_from(mean.values(), fwd.mean, stats_dtype(c.dtype), "mean");
  expect_rounded_from(rstd.values(), fwd.rstd, stats_dtype(c.dtype), "rstd");
  EXPECT_TRUE(y.gaps_untouched());
  if (c.rms) {
    EXPECT_TRUE(all_bytes_poisoned(mean.buffer)) << "RMSNorm has no mean to write";
  }

  HostMatrix dy(c.dtype, c.m, c.n, c.n + c.dy_gap);
  dy.fill_normal(rng);
  HostMatrix dx(c.dtype, c.m, c.n, c.n + c.dx_gap);
  HostVector dweight(c.weight_dtype, c.n), dbias(c.weight_dtype, c.n);
  if (c.rms) {
    rms_norm_backward({dy.cview(), x.cview(), rstd.cview(), weight_arg, dx.view(), dweight.view()}, kCpu);
  } else {
    layer_norm_backward({dy.cview(), x.cview(), mean.cview(), rstd.cview(), weight_arg, dx.view(), dweight.view(),
                         dbias.view()},
                        kCpu);
  }
  // Backward consumes the mean/rstd as stored (f32 for 16-bit and f32 activations), like ATen.
  const ExpectedBackward bwd = expected_backward(c.rms, dy.values(), x.values(), c.rms ? std::vector<double>{} : mean.values(),
                                                 rstd.values(), weight_values, c.m, c.n);
  expect_rounded_from(dx.values(), bwd.dx, c.dtype, "dx");
  expect_rounded_from(dweight.values(), bwd.dweight, c.weight_dtype, "dweight");
  if (!c.rms) expect_rounded_from(dbias.values(), bwd.dbias, c.weight_dtype, "dbias");
  EXPECT_TRUE(dx.gaps_untouched());
}

// gtest prints parameters in failure messages; the default would dump the struct's raw bytes.
void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

class Values : public testing::TestWithParam<Case> {};
TEST_P(Values, MatchIndependentFloat64) { run_and_check(GetParam()); }
std::string param_name(const testing::TestParamInfo<Case>& info) { return describe(info.param); }

std::vector<Case> odd_width_cases() {
  std::vector<Case> cases;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (std::int64_t n : {1, 3, 1000, 1536, 3584})
      for (bool rms : {false, true}) {
        Case c;
        c.rms = rms;
        c.dtype = c.weight_dtype = t;
        c.m = 3;
        c.n = n;
        cases.push_back(c);
      }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(OddWidths, Values, testing::ValuesIn(odd_width_cases()), param_name);

std::vector<Case> fp32_weight_cases() {
  std::vector<Case> cases;
  for (DType t : {DType::F16, DType::BF16, DType::F64})
    for (std::int64_t n : {3, 1000})
      for (bool rms : {false, true}) {
        Case c;
        c.rms = rms;
        c.dtype = t;
        c.weight_dtype = DType::F32;
        c.m = 4;
        c.n = n;
        cases.push_back(c);
      }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Fp32Weights, Values, testing::ValuesIn(fp32_weight_cases()), param_name);

std::vector<Case> optional_parameter_cases() {
  std::vector<Case> cases;
  for (DType t : {DType::F32, DType::BF16})
    for (bool has_weight : {false, true}) {
      for (bool has_bias : {false, true}) {
        Case c;
        c.dtype = c.weight_dtype = t;
        c.m = 4;
        c.n = 33;
        c.has_weight = has_weight;
        c.has_bias = has_bias;
        cases.push_back(c);
      }
      Case r;
      r.rms = true;
      r.dtype = r.weight_dtype = t;
      r.m = 4;
      r.n = 33;
      r.has_weight = has_weight;
      r.has_bias = false;
      cases.push_back(r);
    }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(OptionalWeightBias, Values, testing::ValuesIn(optional_parameter_cases()), param_name);

std::vector<Case> strided_cases() {
  std::vector<Case> cases;
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (bool rms : {false, true}) {
      Case c;
      c.rms = rms;
      c.dtype = c.weight_dtype = t;
      c.m = 5;
      c.n = 37;
      c.x_gap = 3;
      c.y_gap = 5;
      c.dy_gap = 2;
      c.dx_gap = 7;
      cases.push_back(c);
    }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(StridedRows, Values, testing::ValuesIn(strided_cases()), param_name);

std::vector<Case> shape_cases() {
  std::vector<Case> cases;
  for (bool rms : {false, true}) {
    Case one_row;
    one_row.rms = rms;
    one_row.m = 1;
    one_row.n = 64;
    cases.push_back(one_row);
    Case one_column;  // LayerNorm: xhat = 0, so y = bias and dx = 0
    one_column.rms = rms;
    one_column.m = 4;
    one_column.n = 1;
    cases.push_back(one_column);
    // x of shape (100, 8, 16) normalized over (8, 16): M = 100, N = 128.
    Case multi_dim;
    multi_dim.rms = rms;
    multi_dim.dtype = DType::BF16;
    multi_dim.weight_dtype = DType::F32;
    multi_dim.m = 100;
    multi_dim.n = 8 * 16;
    cases.push_back(multi_dim);
  }
  return cases;
}
INSTANTIATE_TEST_SUITE_P(Shapes, Values, testing::ValuesIn(shape_cases()), param_name);

// LayerNorm with N = 1: the row is its own mean, so y is exactly the bias and dx exactly zero.
TEST(Values, LayerNormSingleColumnIsBiasAndZeroGradient) {
  HostMatrix x(DType::F32, 2, 1), y(DType::F32, 2, 1), dy(DType::F32, 2, 1), dx(DType::F32, 2, 1);
  x.set(0, 0, 3.0);
  x.set(1, 0, -7.5);
  dy.set(0, 0, 1.25);
  dy.set(1, 0, -2.0);
  HostVector weight(DType::F32, 1), bias(DType::F32, 1), mean(DType::F32, 2), rstd(DType::F32, 2);
  weight.buffer.set(0, 2.0);
  bias.buffer.set(0, 0.5);
  layer_norm_forward({x.cview(), weight.cview(), bias.cview(), kEps, y.view(), mean.view(), rstd.view()}, kCpu);
  EXPECT_EQ(y.values(), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(mean.values(), (std::vector<double>{3.0, -7.5}));
  EXPECT_FLOAT_EQ(float(rstd.buffer.get(0)), float(1.0 / std::sqrt(kEps)));
  HostVector dweight(DType::F32, 1), dbias(DType::F32, 1);
  layer_norm_backward({dy.cview(), x.cview(), mean.cview(), rstd.cview(), weight.cview(), dx.view(), dweight.view(),
                       dbias.view()},
                      kCpu);
  EXPECT_EQ(dx.values(), (std::vector<double>{0.0, 0.0}));
  EXPECT_EQ(dweight.values(), (std::vector<double>{0.0}));
  EXPECT_EQ(dbias.values(), (std::vector<double>{-0.75}));
}

// Outputs are rounded once from float64. x = [1, -1] with eps = 0 gives xhat = [1, -1] exactly, so
// y = +-w + b exactly in float64. With w = 1 + tie and b = 2^-40 (both exact f32 weights), y[0] lies
// just above the midpoint between two 16-bit neighbours: rounding straight from float64 goes up,
// while rounding through float first lands on the midpoint and then ties to even (down).
TEST(Values, SixteenBitOutputsAreRoundedOnceFromFloat64) {
  const struct { DType dtype; int tie_exponent; std::uint16_t above_tie, negative_below_tie; } formats[] = {
      {DType::F16, -11, 0x3C01, 0xBC00},   // midpoint of 0x3C00 and 0x3C01 is 1 + 2^-11
      {DType::BF16, -8, 0x3F81, 0xBF80},   // midpoint of 0x3F80 and 0x3F81 is 1 + 2^-8
  };
  for (const auto& f : formats) {
    SCOPED_TRACE(dtype_name(f.dtype));
    HostMatrix x(f.dtype, 1, 2), y(f.dtype, 1, 2);
    x.set(0, 0, 1.0);
    x.set(0, 1, -1.0);
    HostVector weight(DType::F32, 2), bias(DType::F32, 2), mean(DType::F32, 1), rstd(DType::F32, 1);
    for (std::int64_t c = 0; c < 2; ++c) {
      weight.buffer.set(c, 1.0 + std::ldexp(1.0, f.tie_exponent));
      bias.buffer.set(c, std::ldexp(1.0, -40));
    }
    layer_norm_forward({x.cview(), weight.cview(), bias.cview(), 0.0, y.view(), mean.view(), rstd.view()}, kCpu);
    std::uint16_t bits[2];
    std::memcpy(bits, y.buffer.data(), sizeof bits);
    EXPECT_EQ(bits[0], f.above_tie);
    EXPECT_EQ(bits[1], f.negative_below_tie);
  }
}

// ---- M = 0: no rows. dweight/dbias are zeros; nothing else is written. ----

TEST(EmptyRows, BackwardWritesZeroGradientsAndNothingElse) {
  constexpr std::int64_t n = 7;
  for (bool rms : {false, true}) {
    SCOPED_TRACE(rms ? "rms" : "layer");
    // Non-null buffers behind the empty views: they must stay poisoned.
    HostBuffer dy_storage(DType::F32, 8), x_storage(DType::F32, 8), dx_storage(DType::F32, 8);
    HostBuffer mean_storage(DType::F32, 2), rstd_storage(DType::F32, 2);
    poison(dx_storage);
    poison(dy_storage);
    poison(x_storage);
    HostVector weight(DType::F32, n), dweight(DType::F32, n), dbias(DType::F32, n);
    std::mt19937_64 rng(5);
    weight.fill_normal(rng);
    const ConstRows dy{dy_storage.data(), DType::F32, 0, n};
    const ConstRows x{x_storage.data(), DType::F32, 0, n};
    const Rows dx{dx_storage.data(), DType::F32, 0, n};
    const ConstVec mean{mean_storage.data(), DType::F32, 0}, rstd{rstd_storage.data(), DType::F32, 0};
    if (rms) {
      rms_norm_backward({dy, x, rstd, weight.cview(), dx, dweight.view()}, kCpu);
    } else {
      layer_norm_backward({dy, x, mean, rstd, weight.cview(), dx, dweight.view(), dbias.view()}, kCpu);
      EXPECT_EQ(dbias.values(), std::vector<double>(n, 0.0));
    }
    EXPECT_EQ(dweight.values(), std::vector<double>(n, 0.0));
    EXPECT_TRUE(all_bytes_poisoned(dx_storage));
    if (rms) {
      EXPECT_TRUE(all_bytes_poisoned(dbias.buffer));
    }
  }
}

TEST(EmptyRows, NullDataIsAcceptedForEmptyTensors) {
  constexpr std::int64_t n = 4;
  HostVector dweight(DType::BF16, n), dbias(DType::BF16, n);
  const ConstRows empty{nullptr, DType::BF16, 0, n};
  layer_norm_backward({empty, empty, ConstVec{nullptr, DType::F32, 0}, ConstVec{nullptr, DType::F32, 0}, std::nullopt,
                       Rows{nullptr, DType::BF16, 0, n}, dweight.view(), dbias.view()},
                      kCpu);
  EXPECT_EQ(dweight.values(), std::vector<double>(n, 0.0));
  EXPECT_EQ(dbias.values(), std::vector<double>(n, 0.0));
  // M = 0 and N = 0 together is a valid, empty call.
  layer_norm_forward({ConstRows{nullptr, DType::F32, 0, 0}, std::nullopt, std::nullopt, kEps,
                      Rows{nullptr, DType::F32, 0, 0}, Vec{nullptr, DType::F32, 0}, Vec{nullptr, DType::F32, 0}},
                     kCpu);
}

TEST(EmptyRows, ForwardWritesNothing) {
  HostBuffer y_storage(DType::F16, 16), mean_storage(DType::F32, 4), rstd_storage(DType::F32, 4);
  HostBuffer x_storage(DType::F16, 16);
  for (HostBuffer* b : {&y_storage, &mean_storage, &rstd_storage, &x_storage}) poison(*b);
  HostVector weight(DType::F16, 8);
  std::mt19937_64 rng(6);
  weight.fill_normal(rng);
  layer_norm_forward({ConstRows{x_storage.data(), DType::F16, 0, 8}, weight.cview(), std::nullopt, kEps,
                      Rows{y_storage.data(), DType::F16, 0, 8}, Vec{mean_storage.data(), DType::F32, 0},
                      Vec{rstd_storage.data(), DType::F32, 0}},
                     kCpu);
  rms_norm_forward({ConstRows{x_storage.data(), DType::F16, 0, 8}, weight.cview(), kEps,
                    Rows{y_storage.data(), DType::F16, 0, 8}, Vec{rstd_storage.data(), DType::F32, 0}},
                   kCpu);
  EXPECT_TRUE(all_bytes_poisoned(y_storage));
  EXPECT_TRUE(all_bytes_poisoned(mean_storage));
  EXPECT_TRUE(all_bytes_poisoned(rstd_storage));
}

// ---- output masks: each requested output is fully written and equals the full computation ----

struct MaskFixture {
  static constexpr std::int64_t m = 6, n = 45;
  HostMatrix x{DType::F16, m, n}, dy{DType::F16, m, n};
  HostVector weight{DType::F16, n}, mean{DType::F32, m}, rstd{DType::F32, m};

  explicit MaskFixture(bool rms) {
    std::mt19937_64 rng(rms ? 11 : 12);
    x.fill_normal(rng, 0.3, 1.5);
    dy.fill_normal(rng);
    weight.fill_normal(rng, 1.0, 0.3);
    HostMatrix y(DType::F16, m, n);
    if (rms) {
      rms_norm_forward({x.cview(), weight.cview(), kEps, y.view(), rstd.view()}, kCpu);
    } else {
      layer_norm_forward({x.cview(), weight.cview(), std::nullopt, kEps, y.view(), mean.view(), rstd.view()}, kCpu);
    }
  }

  /// Runs backward with the outputs of `mask`; unrequested ones come back as poisoned buffers.
  struct Outputs {
    HostMatrix dx{DType::F16, m, n};
    HostVector dweight{DType::F16, n}, dbias{DType::F16, n};
  };
  Outputs run(bool rms, Mask mask) const {
    Outputs out;
    const std::optional<Rows> dx = mask.dx ? std::optional<Rows>(out.dx.view()) : std::nullopt;
    const std::optional<Vec> dweight = mask.dweight ? std::optional<Vec>(out.dweight.view()) : std::nullopt;
    const std::optional<Vec> dbias = mask.dbias ? std::optional<Vec>(out.dbias.view()) : std::nullopt;
    if (rms) {
      rms_norm_backward({dy.cview(), x.cview(), rstd.cview(), weight.cview(), dx, dweight}, kCpu);
    } else {
      layer_norm_backward({dy.cview(), x.cview(), mean.cview(), rstd.cview(), weight.cview(), dx, dweight, dbias},
                          kCpu);
    }
    return out;
  }
};

bool has_nan(const HostBuffer& b) {
  for (double v : b.to_double())
    if (std::isnan(v)) return true;
  return false;
}

TEST(OutputMask, EveryCombinationWritesExactlyTheRequestedOutputs) {
  for (bool rms : {false, true}) {
    const MaskFixture fixture(rms);
    const MaskFixture::Outputs full = fixture.run(rms, {true, true, !rms});
    ASSERT_FALSE(has_nan(full.dx.buffer));
    ASSERT_FALSE(has_nan(full.dweight.buffer));
    if (!rms) {
      ASSERT_FALSE(has_nan(full.dbias.buffer));
    }
    for (int bits = 0; bits < 8; ++bits) {
      const Mask mask{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
      if (rms && mask.dbias) continue;  // RMSNorm has no dbias
      SCOPED_TRACE(std::string(rms ? "rms" : "layer") + " mask dx=" + std::to_string(mask.dx) +
                   " dweight=" + std::to_string(mask.dweight) + " dbias=" + std::to_string(mask.dbias));
      const MaskFixture::Outputs got = fixture.run(rms, mask);
      auto check = [](bool requested, const HostBuffer& actual, const HostBuffer& reference, const char* name) {
        if (requested) {
          EXPECT_EQ(actual.bytes, reference.bytes) << name << " differs from the full computation";
        } else {
          EXPECT_TRUE(all_bytes_poisoned(actual)) << name << " was not requested";
        }
      };
      check(mask.dx, got.dx.buffer, full.dx.buffer, "dx");
      check(mask.dweight, got.dweight.buffer, full.dweight.buffer, "dweight");
      check(mask.dbias, got.dbias.buffer, full.dbias.buffer, "dbias");
    }
  }
}

}  // namespace
}  // namespace normkit::test
