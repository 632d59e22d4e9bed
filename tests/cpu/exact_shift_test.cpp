// The property the split 16-bit rows' FMA xhat relies on (core/exact_shift.h, RowXhat in
// src/cuda/row_layout.cuh): for a mean that is any fp16 or bf16 value -- a constant row's mean -- and any
// rstd a LayerNorm row can have, mean * rstd' is exact in fp32 with rstd' = exact_shift_rstd_bits(...), so
// the kernels' xhat = fma(x, rstd', -fl(mean * rstd')) is exactly 0 at x == mean; and rstd' is within
// 2^-12 of rstd. Every finite 16-bit value against a spread of rstd values (products in fp32's normal range).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/exact_shift.h"
#include "core/half.h"

namespace normkit::detail {
namespace {

float shortened(float mean, float rstd) { return bits_to_float(exact_shift_rstd_bits(float_to_bits(mean), float_to_bits(rstd))); }

// rstd = 1 / sqrt(var + eps): from eps = 1e-12 (1e6) down to variances of 1e6 (1e-3), log-spread, plus
// the constant row's own 1 / sqrt(1e-5) and 1.
std::vector<float> rstd_values() {
  std::vector<float> out = {1.f, 1.f / std::sqrt(1e-5f), std::nextafter(1.f, 2.f), std::nextafter(2.f, 1.f)};
  std::mt19937 rng(20261205);
  std::uniform_real_distribution<double> log_rstd(std::log(1e-3), std::log(1e6));
  for (int i = 0; i < 60; ++i) out.push_back(float(std::exp(log_rstd(rng))));
  return out;
}

// The fp32 value of every finite 16-bit value of one format.
template <typename Decode>
std::vector<float> every_finite(Decode decode) {
  std::vector<float> out;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    const float v = decode(std::uint16_t(h));
    if (std::isfinite(v)) out.push_back(v);
  }
  return out;
}

void expect_exact_shift(const std::vector<float>& means, const char* format) {
  std::int64_t residuals_without = 0;
  for (float rstd : rstd_values()) {
    for (float mean : means) {
      // Products outside fp32's normal range are left out (bf16 means only: beyond ~1e33 or below ~1e-35
      // with these rstd): such a row's sum overflows before any xhat, or the residual is below 2^-126.
      const double exact = std::fabs(double(mean) * double(rstd));
      if (mean != 0.f && (exact < std::ldexp(1.0, -126) || exact >= std::ldexp(1.0, 127))) continue;
      const float r = shortened(mean, rstd);
      const float product = mean * r;
      ASSERT_EQ(double(product), double(mean) * double(r)) << format << " mean " << mean << " rstd " << rstd;
      ASSERT_EQ(std::fma(mean, r, -product), 0.f) << format << " mean " << mean << " rstd " << rstd;
      ASSERT_LE(r, rstd);
      ASSERT_GT(double(r), double(rstd) * (1.0 - std::ldexp(1.0, -12))) << format << " rstd " << rstd;
      // what the shortening is for: the plain product is often rounded, and its residual is then the xhat
      if (std::fma(mean, rstd, -(mean * rstd)) != 0.f) ++residuals_without;
    }
  }
  EXPECT_GT(residuals_without, 0) << format << ": no case needed the shortening (the test would not fail)";
}

TEST(ExactShift, EveryFp16MeanTimesTheShortenedRstdIsExact) { expect_exact_shift(every_finite(half_to_float), "fp16"); }
TEST(ExactShift, EveryBf16MeanTimesTheShortenedRstdIsExact) { expect_exact_shift(every_finite(bf16_to_float), "bf16"); }

TEST(ExactShift, MeansOfMoreBitsKeepTheirRstd) {
  // a mean with any of its 13 low significand bits set is not a 16-bit value: rstd stays as it is
  for (float mean : {1.0f + std::ldexp(1.0f, -23), 0.1f, -3.14159f, 1e-3f, 40960.0f + 0.0078125f})
    for (float rstd : rstd_values())
      if (float_to_bits(mean) & kExactMeanLowBits) EXPECT_EQ(shortened(mean, rstd), rstd) << mean;
  EXPECT_NE(float_to_bits(0.1f) & kExactMeanLowBits, 0u);
  // and the 11-bit boundary: 1 + 2^-10 (11 bits) shortens, 1 + 2^-11 (12 bits) does not
  EXPECT_NE(shortened(1.0f + std::ldexp(1.0f, -10), 1.2345678f), 1.2345678f);
  EXPECT_EQ(shortened(1.0f + std::ldexp(1.0f, -11), 1.2345678f), 1.2345678f);
}

}  // namespace
}  // namespace normkit::detail
