// Internal: host-side fp16/bf16 <-> float conversions (round to nearest even), with no CUDA headers,
// for the CPU reference and for tests.
#pragma once

#include <cstdint>
#include <cstring>

namespace normkit::detail {

inline float bits_to_float(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline std::uint32_t float_to_bits(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_float(std::uint16_t h) { return bits_to_float(std::uint32_t(h) << 16); }
inline std::uint16_t float_to_bf16(float f) {
  std::uint32_t u = float_to_bits(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return std::uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return std::uint16_t(u >> 16);
}

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));  // inf / nan
  if (exp == 0) {
    if (mant == 0) return bits_to_float(sign);
    // subnormal: normalise
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_to_float(sign | (std::uint32_t(127 - 15 - e) << 23) | (mant << 13));
  }
  return bits_to_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

inline std::uint16_t float_to_half(float f) {
  std::uint32_t u = float_to_bits(f);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return std::uint16_t(sign | 0x7c00u | (u > 0x7f800000u ? 0x200u : 0u));
  if (u >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (u < 0x38800000u) {  // subnormal or zero in fp16
    if (u < 0x33000000u) return sign;  // < 2^-25 rounds to 0
    const std::uint32_t exp = u >> 23, mant = (u & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126 - exp;  // 14..24
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return std::uint16_t(sign | h);
  }
  std::uint32_t h = ((u >> 13) - (112u << 10));
  const std::uint32_t rem = u & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return std::uint16_t(sign | h);
}

}  // namespace normkit::detail
