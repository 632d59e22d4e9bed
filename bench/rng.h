// normkit-bench: counter-based pseudo-random normal values, identical on host and device, so a
// buffer's contents depend only on (seed, index) and never on how the fill was parallelised.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define NKB_HD __host__ __device__ __forceinline__
#else
#define NKB_HD inline
#endif

namespace nkbench {

NKB_HD std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/// A standard-normal value for element `index` of the stream `seed` (Box-Muller on two 24-bit
/// uniforms drawn from one 64-bit hash).
NKB_HD float normal_at(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t h = splitmix64(seed * 0x100000001b3ULL ^ splitmix64(index));
  const float u1 = (float((h >> 40) & 0xffffffULL) + 1.0f) * (1.0f / 16777217.0f);  // (0, 1]
  const float u2 = float((h >> 16) & 0xffffffULL) * (1.0f / 16777216.0f);          // [0, 1)
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853071795864f * u2);
}

/// Host conversions, round to nearest even (the device side uses CUDA's intrinsics).
inline std::uint16_t host_float_to_bf16(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return std::uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}

inline std::uint16_t host_float_to_half(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  const std::uint16_t sign = std::uint16_t((u >> 16) & 0x8000u);
  u &= 0x7fffffffu;
  if (u >= 0x7f800000u) return std::uint16_t(sign | 0x7c00u | (u > 0x7f800000u ? 0x200u : 0u));
  if (u >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (u < 0x38800000u) {                                       // below the smallest normal half
    if (u < 0x33000000u) return sign;                          // below half the smallest subnormal
    const std::uint32_t exp = u >> 23;
    const std::uint32_t mant = (u & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - exp;  // value / 2^-24 = mant * 2^(exp - 126)
    const std::uint32_t rounded = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    std::uint32_t r = rounded;
    if (rem > half || (rem == half && (rounded & 1u))) ++r;
    return std::uint16_t(sign | r);
  }
  std::uint32_t r = u - 0x38000000u;  // rebias exponent 127 -> 15
  r += 0xfffu + ((r >> 13) & 1u);
  return std::uint16_t(sign | (r >> 13));
}

}  // namespace nkbench
