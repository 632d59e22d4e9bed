// The float64 reference: every input is read as double, every sum is a plain double loop, every
// output is rounded once to its dtype. Backward uses the mean/rstd it is given (as ATen does), so
// it is the exact gradient of the forward that produced them.
#include "cpu/reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace normkit::detail {
namespace {

double load(const void* base, DType dtype, std::int64_t index) {
  switch (dtype) {
    case DType::F32: {
      float v;
      std::memcpy(&v, static_cast<const unsigned char*>(base) + index * 4, 4);
      return v;
    }
    case DType::F64: {
      double v;
      std::memcpy(&v, static_cast<const unsigned char*>(base) + index * 8, 8);
      return v;
    }
    case DType::F16: {
      std::uint16_t v;
      std::memcpy(&v, static_cast<const unsigned char*>(base) + index * 2, 2);
      return half_to_float(v);
    }
    case DType::BF16: {
      std::uint16_t v;
      std::memcpy(&v, static_cast<const unsigned char*>(base) + index * 2, 2);
      return bf16_to_float(v);
    }
  }
  return 0;
}

/// double -> float with round-to-odd: truncate toward zero and set the last bit when inexact.
/// Rounding that float to fp16/bf16 (nearest even) then equals rounding the double directly,
/// because float keeps more than two extra bits over either format. Plain double -> float -> half
/// would round twice and can be off by one ulp on ties.
float round_to_odd_float(double v) {
  const float nearest = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(nearest) == v) return nearest;
  // A finite v beyond the float range rounds to inf; truncating gives FLT_MAX (odd already), which
  // both 16-bit formats round to inf as they should.
  const float truncated =
      std::fabs(static_cast<double>(nearest)) > std::fabs(v) ? std::nextafter(nearest, 0.0f) : nearest;
  return bits_to_float(float_to_bits(truncated) | 1u);
}

void store(void* base, DType dtype, std::int64_t index, double value) {
  unsigned char* bytes = static_cast<unsigned char*>(base);
  switch (dtype) {
    case DType::F32: {
      const float v = static_cast<float>(value);
      std::memcpy(bytes + index * 4, &v, 4);
      return;
    }
    case DType::F64:
      std::memcpy(bytes + index * 8, &value, 8);
      return;
    case DType::F16: {
      const std::uint16_t v = float_to_half(round_to_odd_float(value));
      std::memcpy(bytes + index * 2, &v, 2);
      return;
    }
    case DType::BF16: {
      const std::uint16_t v = float_to_bf16(round_to_odd_float(value));
      std::memcpy(bytes + index * 2, &v, 2);
      return;
    }
  }
}

/// weight[c] when present, else the identity value of its role (1 for weight, 0 for bias).
double vector_or(const std::optional<ConstVec>& v, std::int64_t index, double absent_value) {
  return v ? load(v->data, v->dtype, index) : absent_value;
}

}  // namespace

void reference_forward(const ForwardProblem& p) {
  const std::int64_t m = p.rows(), n = p.cols();
  // An empty call writes nothing; its rows' width may be any size validation allows (the buffers
  // below are N doubles each: an M = 0 call of 2^61 columns threw std::length_error).
  if (m == 0) return;
  const std::int64_t x_stride = p.x.stride(), y_stride = p.y.stride();
  const std::size_t columns = static_cast<std::size_t>(n);
  std::vector<double> weight(columns), bias(columns), row(columns);
  for (std::int64_t c = 0; c < n; ++c) {
    weight[std::size_t(c)] = vector_or(p.weight, c, 1.0);
    bias[std::size_t(c)] = vector_or(p.bias, c, 0.0);
  }
  for (std::int64_t r = 0; r < m; ++r) {
    for (std::int64_t c = 0; c < n; ++c) row[std::size_t(c)] = load(p.x.data, p.x.dtype, r * x_stride + c);
    double mean = 0, rstd = 0;
    if (p.rms) {
      double sum_squares = 0;
      for (double v : row) sum_squares += v * v;
      rstd = 1.0 / std::sqrt(sum_squares / double(n) + p.eps);
    } else {
      double sum = 0;
      for (double v : row) sum += v;
      mean = sum / double(n);
      // Two passes: the variance of values far from zero stays exact (no E[x^2] - E[x]^2).
      double sum_squared_deviations = 0;
      for (double v : row) sum_squared_deviations += (v - mean) * (v - mean);
      rstd = 1.0 / std::sqrt(sum_squared_deviations / double(n) + p.eps);
    }
    for (std::int64_t c = 0; c < n; ++c) {
      const double xhat = (row[std::size_t(c)] - mean) * rstd;
      store(p.y.data, p.y.dtype, r * y_stride + c, xhat * weight[std::size_t(c)] + bias[std::size_t(c)]);
    }
    if (p.mean) store(p.mean->data, p.mean->dtype, r, mean);
    store(p.rstd.data, p.rstd.dtype, r, rstd);
  }
}

void reference_backward(const BackwardProblem& p) {
  const std::int64_t m = p.rows(), n = p.cols();
  if (m == 0) {  // the sums are empty: zero gradients, without the N-double buffers (see the forward)
    if (p.dweight)
      for (std::int64_t c = 0; c < n; ++c) store(p.dweight->data, p.dweight->dtype, c, 0.0);
    if (p.dbias)
      for (std::int64_t c = 0; c < n; ++c) store(p.dbias->data, p.dbias->dtype, c, 0.0);
    return;
  }
  const std::int64_t x_stride = p.x.stride(), dy_stride = p.dy.stride();
  const std::size_t columns = static_cast<std::size_t>(n);
  std::vector<double> weight(columns), xhat(columns), dy(columns);
  std::vector<double> dweight_sum(columns, 0.0), dbias_sum(columns, 0.0);
  for (std::int64_t c = 0; c < n; ++c) weight[std::size_t(c)] = vector_or(p.weight, c, 1.0);

  for (std::int64_t r = 0; r < m; ++r) {
    const double mean = p.mean ? load(p.mean->data, p.mean->dtype, r) : 0.0;
    const double rstd = load(p.rstd.data, p.rstd.dtype, r);
    double sum_g = 0, sum_g_xhat = 0;  // g = dy * weight
    for (std::size_t c = 0; c < columns; ++c) {
      const std::int64_t col = std::int64_t(c);
      xhat[c] = (load(p.x.data, p.x.dtype, r * x_stride + col) - mean) * rstd;
      dy[c] = load(p.dy.data, p.dy.dtype, r * dy_stride + col);
      const double g = dy[c] * weight[c];
      sum_g += g;
      sum_g_xhat += g * xhat[c];
      dweight_sum[c] += dy[c] * xhat[c];
      dbias_sum[c] += dy[c];
    }
    if (p.dx) {
      // LayerNorm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)); RMSNorm has no centring term.
      const double mean_g = p.rms ? 0.0 : sum_g / double(n);
      const double mean_g_xhat = sum_g_xhat / double(n);
      const std::int64_t dx_stride = p.dx->stride();
      for (std::size_t c = 0; c < columns; ++c) {
        const double g = dy[c] * weight[c];
        store(p.dx->data, p.dx->dtype, r * dx_stride + std::int64_t(c), rstd * (g - mean_g - xhat[c] * mean_g_xhat));
      }
    }
  }
  for (std::int64_t c = 0; c < n; ++c) {
    if (p.dweight) store(p.dweight->data, p.dweight->dtype, c, dweight_sum[std::size_t(c)]);
    if (p.dbias) store(p.dbias->data, p.dbias->dtype, c, dbias_sum[std::size_t(c)]);
  }
}

}  // namespace normkit::detail
