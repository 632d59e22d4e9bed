// Test helpers shared by the CPU and GPU suites: host buffers of any normkit dtype, fresh random
// fills, poison, relative L2 error against a float64 reference, and per-dtype tolerances.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "normkit/normkit.h"

namespace normkit::test {

/// A host buffer of `count` elements of `dtype`.
struct HostBuffer {
  DType dtype = DType::F32;
  std::vector<unsigned char> bytes;
  HostBuffer() = default;
  HostBuffer(DType t, std::int64_t count) : dtype(t), bytes(std::size_t(count) * dtype_size(t)) {}
  std::int64_t count() const { return std::int64_t(bytes.size() / dtype_size(dtype)); }
  void* data() { return bytes.data(); }
  const void* data() const { return bytes.data(); }

  double get(std::int64_t i) const {
    switch (dtype) {
      case DType::F32: { float v; std::memcpy(&v, &bytes[i * 4], 4); return v; }
      case DType::F64: { double v; std::memcpy(&v, &bytes[i * 8], 8); return v; }
      case DType::F16: { std::uint16_t v; std::memcpy(&v, &bytes[i * 2], 2); return detail::half_to_float(v); }
      case DType::BF16: { std::uint16_t v; std::memcpy(&v, &bytes[i * 2], 2); return detail::bf16_to_float(v); }
    }
    return 0;
  }
  void set(std::int64_t i, double x) {
    switch (dtype) {
      case DType::F32: { float v = float(x); std::memcpy(&bytes[i * 4], &v, 4); break; }
      case DType::F64: { std::memcpy(&bytes[i * 8], &x, 8); break; }
      case DType::F16: { std::uint16_t v = detail::float_to_half(float(x)); std::memcpy(&bytes[i * 2], &v, 2); break; }
      case DType::BF16: { std::uint16_t v = detail::float_to_bf16(float(x)); std::memcpy(&bytes[i * 2], &v, 2); break; }
    }
  }
  std::vector<double> to_double() const {
    std::vector<double> out(static_cast<std::size_t>(count()));
    for (std::int64_t i = 0; i < count(); ++i) out[std::size_t(i)] = get(i);
    return out;
  }
};

/// Fresh random values: normal(mean, stddev), never all zeros.
inline void fill_normal(HostBuffer& b, std::mt19937_64& rng, double mean = 0.0, double stddev = 1.0) {
  std::normal_distribution<double> dist(mean, stddev);
  for (std::int64_t i = 0; i < b.count(); ++i) b.set(i, dist(rng));
}

/// A byte pattern that decodes to NaN in every float dtype (0xFF bytes): an element left unwritten
/// is detected by any comparison.
constexpr unsigned char kPoisonByte = 0xFF;
inline void poison(HostBuffer& b) { std::memset(b.bytes.data(), kPoisonByte, b.bytes.size()); }

/// Relative L2 error ||a - ref|| / max(||ref||, tiny). NaN/inf anywhere in `a` where `ref` is finite
/// returns +inf (so a NaN never passes).
inline double rel_l2_error(const std::vector<double>& a, const std::vector<double>& ref) {
  if (a.size() != ref.size()) return INFINITY;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(ref[i])) { if (!std::isnan(a[i])) return INFINITY; continue; }
    if (!std::isfinite(a[i])) return INFINITY;
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

/// Tolerances on relative L2 error vs float64 (shared/norm-math.md): fp32 1e-5, fp16 2e-3, bf16 1e-2.
inline double tolerance(DType t) {
  switch (t) {
    case DType::F32: return 1e-5;
    case DType::F16: return 2e-3;
    case DType::BF16: return 1e-2;
    case DType::F64: return 1e-12;
  }
  return 0;
}

}  // namespace normkit::test
