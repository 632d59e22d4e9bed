// Backward of both ops against central finite differences of the forward, in float64 through the
// public API: loss = sum(y * g) for a random upstream g, so dL/dy = g is the backward's dy.
// An absent weight (bias) must behave as a weight of ones (bias of zeros): the numerical gradient
// of dweight/dbias is then taken with those explicit values.
#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "cpu_helpers.h"

namespace normkit::test {
namespace {

struct GradCase {
  bool rms;
  std::int64_t n;
  bool has_weight;
  bool has_bias;
};

std::string case_name(const testing::TestParamInfo<GradCase>& info) {
  const GradCase& c = info.param;
  return std::string(c.rms ? "Rms" : "Layer") + "N" + std::to_string(c.n) + (c.has_weight ? "_weight" : "_noweight") +
         (c.has_bias ? "_bias" : "");
}

void PrintTo(const GradCase& c, std::ostream* os) {
  *os << (c.rms ? "rms" : "layer") << " N=" << c.n << " weight=" << c.has_weight << " bias=" << c.has_bias;
}

class GradCheck : public testing::TestWithParam<GradCase> {};

constexpr std::int64_t kRows = 3;
constexpr double kEps = 0.1;  // large enough that a mishandled eps changes the gradients visibly

/// Runs the forward in float64 with explicit weight and bias vectors (empty = absent) and returns
/// y (packed) plus mean (LayerNorm) and rstd.
struct ForwardResult {
  HostMatrix y;
  HostVector mean, rstd;
};
ForwardResult run_forward(bool rms, const HostMatrix& x, const std::optional<HostVector>& weight,
                          const std::optional<HostVector>& bias) {
  ForwardResult out{HostMatrix(DType::F64, x.rows, x.cols), HostVector(DType::F64, x.rows),
                    HostVector(DType::F64, x.rows)};
  std::optional<ConstVec> w, b;
  if (weight) w = weight->cview();
  if (bias) b = bias->cview();
  if (rms) {
    rms_norm_forward({x.cview(), w, kEps, out.y.view(), out.rstd.view()}, kCpu);
  } else {
    layer_norm_forward({x.cview(), w, b, kEps, out.y.view(), out.mean.view(), out.rstd.view()}, kCpu);
  }
  return out;
}

double loss(bool rms, const HostMatrix& x, const std::optional<HostVector>& weight,
            const std::optional<HostVector>& bias, const std::vector<double>& upstream) {
  const std::vector<double> y = run_forward(rms, x, weight, bias).y.values();
  double sum = 0;
  for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * upstream[i];
  return sum;
}

/// Central difference of the loss with respect to each element of `buffer` (one of the inputs
/// captured by `evaluate`).
template <class Evaluate>
std::vector<double> numerical_gradient(HostBuffer& buffer, Evaluate evaluate) {
  constexpr double kStep = 1e-6;
  std::vector<double> grad(std::size_t(buffer.count()));
  for (std::int64_t i = 0; i < buffer.count(); ++i) {
    const double original = buffer.get(i);
    buffer.set(i, original + kStep);
    const double up = evaluate();
    buffer.set(i, original - kStep);
    const double down = evaluate();
    buffer.set(i, original);
    grad[std::size_t(i)] = (up - down) / (2 * kStep);
  }
  return grad;
}

TEST_P(GradCheck, BackwardMatchesFiniteDifferences) {
  const GradCase c = GetParam();
  std::mt19937_64 rng(1234 + c.n * 7 + c.has_weight * 3 + c.has_bias + c.rms * 11);
  HostMatrix x(DType::F64, kRows, c.n);
  x.fill_normal(rng, 0.7, 1.5);
  HostMatrix upstream(DType::F64, kRows, c.n);
  upstream.fill_normal(rng);
  const std::vector<double> g = upstream.values();

  // Explicit parameters for the numerical gradients: random when present, identity when absent.
  HostVector weight_values(DType::F64, c.n), bias_values(DType::F64, c.n);
  if (c.has_weight) {
    weight_values.fill_normal(rng, 1.0, 0.5);
  } else {
    for (std::int64_t i = 0; i < c.n; ++i) weight_values.buffer.set(i, 1.0);
  }
  if (c.has_bias) {
    bias_values.fill_normal(rng);
  } else {
    for (std::int64_t i = 0; i < c.n; ++i) bias_values.buffer.set(i, 0.0);
  }
  const std::optional<HostVector> weight_arg = c.has_weight ? std::optional<HostVector>(weight_values) : std::nullopt;
  const std::optional<HostVector> bias_arg =
      (!c.rms && c.has_bias) ? std::optional<HostVector>(bias_values) : std::nullopt;

  // Analytic gradients: forward for mean/rstd, then backward with every output requested.
  const ForwardResult forward = run_forward(c.rms, x, weight_arg, bias_arg);
  HostMatrix dx(DType::F64, kRows, c.n);
  HostVector dweight(DType::F64, c.n), dbias(DType::F64, c.n);
  std::optional<ConstVec> w;
  if (weight_arg) w = weight_arg->cview();
  if (c.rms) {
    rms_norm_backward({upstream.cview(), x.cview(), forward.rstd.cview(), w, dx.view(), dweight.view()}, kCpu);
  } else {
    layer_norm_backward({upstream.cview(), x.cview(), forward.mean.cview(), forward.rstd.cview(), w, dx.view(),
                         dweight.view(), dbias.view()},
                        kCpu);
  }

  // Numerical gradients always pass explicit weight (and bias for LayerNorm).
  const std::optional<HostVector> no_bias;
  HostMatrix x_probe = x;
  HostVector weight_probe = weight_values, bias_probe = bias_values;
  auto evaluate = [&] {
    return loss(c.rms, x_probe, std::optional<HostVector>(weight_probe),
                c.rms ? no_bias : std::optional<HostVector>(bias_probe), g);
  };
  const std::vector<double> numeric_dx = numerical_gradient(x_probe.buffer, evaluate);
  const std::vector<double> numeric_dweight = numerical_gradient(weight_probe.buffer, evaluate);
  EXPECT_LT(rel_l2_error(dx.values(), numeric_dx), 1e-6);
  EXPECT_LT(rel_l2_error(dweight.values(), numeric_dweight), 1e-6);
  if (!c.rms) {
    const std::vector<double> numeric_dbias = numerical_gradient(bias_probe.buffer, evaluate);
    EXPECT_LT(rel_l2_error(dbias.values(), numeric_dbias), 1e-6);
  }
}

std::vector<GradCase> grad_cases() {
  std::vector<GradCase> cases;
  for (std::int64_t n : {5, 7}) {
    for (bool has_weight : {false, true}) {
      cases.push_back({true, n, has_weight, false});
      for (bool has_bias : {false, true}) cases.push_back({false, n, has_weight, has_bias});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Ops, GradCheck, testing::ValuesIn(grad_cases()), case_name);

}  // namespace
}  // namespace normkit::test
