// Helpers of the CPU suite: strided host matrices whose row gaps are poisoned, host vectors, an
// independent float64 computation of all four ops written straight from shared/norm-math.md, and
// an element-wise check that an output is its float64 value rounded once to the output dtype.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"

namespace normkit::test {

constexpr ExecConfig kCpu{Device::Cpu};

/// rows x cols elements, consecutive rows `stride` elements apart; everything not set explicitly
/// (including the gap between rows) holds poison.
struct HostMatrix {
  std::int64_t rows = 0, cols = 0, stride = 0;
  HostBuffer buffer;

  HostMatrix(DType dtype, std::int64_t m, std::int64_t n, std::int64_t row_stride = -1)
      : rows(m), cols(n), stride(row_stride < 0 ? n : row_stride), buffer(dtype, std::max<std::int64_t>(m * stride, 0)) {
    poison(buffer);
  }
  DType dtype() const { return buffer.dtype; }
  double get(std::int64_t r, std::int64_t c) const { return buffer.get(r * stride + c); }
  void set(std::int64_t r, std::int64_t c, double v) { buffer.set(r * stride + c, v); }
  void fill_normal(std::mt19937_64& rng, double mean = 0.0, double stddev = 1.0) {
    std::normal_distribution<double> dist(mean, stddev);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) set(r, c, dist(rng));
  }
  /// Row-major packed values (the gap excluded), as decoded from the dtype.
  std::vector<double> values() const {
    std::vector<double> out;
    out.reserve(std::size_t(rows * cols));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) out.push_back(get(r, c));
    return out;
  }
  ConstRows view() const { return {buffer.data(), buffer.dtype, rows, cols, stride}; }
  Rows view() { return {buffer.data(), buffer.dtype, rows, cols, stride}; }
  ConstRows cview() const { return view(); }
  /// Whether every byte outside the rows' first `cols` elements still holds poison.
  bool gaps_untouched() const {
    const std::size_t elem = dtype_size(buffer.dtype);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = cols; c < stride; ++c)
        for (std::size_t b = 0; b < elem; ++b)
          if (buffer.bytes[std::size_t(r * stride + c) * elem + b] != kPoisonByte) return false;
    return true;
  }
};

/// A contiguous vector, poisoned until set.
struct HostVector {
  HostBuffer buffer;
  HostVector(DType dtype, std::int64_t n) : buffer(dtype, n) { poison(buffer); }
  DType dtype() const { return buffer.dtype; }
  std::int64_t size() const { return buffer.count(); }
  void fill_normal(std::mt19937_64& rng, double mean = 0.0, double stddev = 1.0) {
    normkit::test::fill_normal(buffer, rng, mean, stddev);
  }
  std::vector<double> values() const { return buffer.to_double(); }
  ConstVec cview() const { return {buffer.data(), buffer.dtype, buffer.count()}; }
  Vec view() { return {buffer.data(), buffer.dtype, buffer.count()}; }
};

// ---- the independent float64 computation (straight from the formulas) ----

struct ExpectedForward {
  std::vector<double> y, mean, rstd;  // y is M*N packed
};

/// weight/bias empty = absent. x is M*N packed.
inline ExpectedForward expected_forward(bool rms, const std::vector<double>& x, std::int64_t m, std::int64_t n,
                                        const std::vector<double>& weight, const std::vector<double>& bias,
                                        double eps) {
  ExpectedForward out;
  out.y.resize(std::size_t(m * n));
  for (std::int64_t r = 0; r < m; ++r) {
    const double* row = &x[std::size_t(r * n)];
    double mean = 0;
    if (!rms) {
      for (std::int64_t c = 0; c < n; ++c) mean += row[c];
      mean /= double(n);
    }
    double second_moment = 0;  // variance about the mean (LayerNorm) or about 0 (RMSNorm)
    for (std::int64_t c = 0; c < n; ++c) second_moment += (row[c] - mean) * (row[c] - mean);
    second_moment /= double(n);
    const double rstd = 1.0 / std::sqrt(second_moment + eps);
    for (std::int64_t c = 0; c < n; ++c) {
      const double w = weight.empty() ? 1.0 : weight[std::size_t(c)];
      const double b = bias.empty() ? 0.0 : bias[std::size_t(c)];
      out.y[std::size_t(r * n + c)] = (row[c] - mean) * rstd * w + b;
    }
    out.mean.push_back(mean);
    out.rstd.push_back(rstd);
  }
  return out;
}

struct ExpectedBackward {
  std::vector<double> dx, dweight, dbias;
};

/// mean empty for RMSNorm.
inline ExpectedBackward expected_backward(bool rms, const std::vector<double>& dy, const std::vector<double>& x,
                                          const std::vector<double>& mean, const std::vector<double>& rstd,
                                          const std::vector<double>& weight, std::int64_t m, std::int64_t n) {
  ExpectedBackward out;
  out.dx.resize(std::size_t(m * n));
  out.dweight.assign(std::size_t(n), 0.0);
  out.dbias.assign(std::size_t(n), 0.0);
  for (std::int64_t r = 0; r < m; ++r) {
    const double mu = rms ? 0.0 : mean[std::size_t(r)];
    const double s = rstd[std::size_t(r)];
    double mean_g = 0, mean_g_xhat = 0;
    for (std::int64_t c = 0; c < n; ++c) {
      const std::size_t i = std::size_t(r * n + c);
      const double w = weight.empty() ? 1.0 : weight[std::size_t(c)];
      const double xhat = (x[i] - mu) * s;
      mean_g += dy[i] * w / double(n);
      mean_g_xhat += dy[i] * w * xhat / double(n);
      out.dweight[std::size_t(c)] += dy[i] * xhat;
      out.dbias[std::size_t(c)] += dy[i];
    }
    if (rms) mean_g = 0;
    for (std::int64_t c = 0; c < n; ++c) {
      const std::size_t i = std::size_t(r * n + c);
      const double w = weight.empty() ? 1.0 : weight[std::size_t(c)];
      out.dx[i] = s * (dy[i] * w - mean_g - (x[i] - mu) * s * mean_g_xhat);
    }
  }
  return out;
}

/// Significand bits (implicit bit included) of each dtype.
inline int significand_bits(DType t) {
  switch (t) {
    case DType::F32: return 24;
    case DType::F16: return 11;
    case DType::BF16: return 8;
    case DType::F64: return 53;
  }
  return 0;
}

/// Half the smallest subnormal of each dtype: the absolute rounding error near zero.
inline double half_min_subnormal(DType t) {
  switch (t) {
    case DType::F32: return std::ldexp(1.0, -150);
    case DType::F16: return std::ldexp(1.0, -25);
    case DType::BF16: return std::ldexp(1.0, -134);
    case DType::F64: return 0.0;
  }
  return 0;
}

/// Every element of `actual` (decoded from `dtype`) must be `expected` rounded once to `dtype`:
/// within half an ulp, plus 1e-12 of the tensor's scale for the float64 evaluation-order
/// difference between the library and the test. This is stricter than the project's relative L2
/// tolerances, which are not applied here: an output that is legitimately subnormal in fp16
/// (e.g. RMSNorm's dx at N = 1, about eps / x^2) carries a larger relative rounding error.
inline void expect_rounded_from(const std::vector<double>& actual, const std::vector<double>& expected, DType dtype,
                                const std::string& label) {
  ASSERT_EQ(actual.size(), expected.size()) << label;
  double scale = 0;
  for (double e : expected) scale = std::max(scale, std::fabs(e));
  const double relative_half_ulp = std::ldexp(1.0, -significand_bits(dtype));
  int reported = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double bound = relative_half_ulp * std::fabs(expected[i]) + 1e-12 * scale + half_min_subnormal(dtype);
    const bool ok = std::fabs(actual[i] - expected[i]) <= bound;  // false for NaN
    if (!ok && reported++ < 5)
      ADD_FAILURE() << label << "[" << i << "] = " << actual[i] << ", expected " << expected[i] << " rounded to "
                    << dtype_name(dtype) << " (bound " << bound << ")";
  }
}

inline bool all_bytes_poisoned(const HostBuffer& b) {
  return std::all_of(b.bytes.begin(), b.bytes.end(), [](unsigned char v) { return v == kPoisonByte; });
}

}  // namespace normkit::test
