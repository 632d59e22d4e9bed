// Host fp16/bf16 conversions (core/half.h) against known bit patterns, plus exhaustive checks:
// every finite 16-bit value round-trips, and every midpoint between neighbours rounds to the even one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/half.h"

namespace normkit::detail {
namespace {

float from_bits(std::uint32_t u) { return bits_to_float(u); }
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Half, EncodesKnownValues) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(-2.5f), 0xC100);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);          // largest finite
  EXPECT_EQ(float_to_half(0.1f), 0x2E66);
  EXPECT_EQ(float_to_half(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(float_to_half(1023 * std::ldexp(1.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(float_to_half(1e-8f), 0x0000);              // below half the smallest subnormal
  EXPECT_EQ(float_to_half(1e6f), 0x7C00);               // overflow -> inf
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xFC00);
}

TEST(Half, RoundsTiesToEven) {
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // between 0x3C00 and 0x3C01
  EXPECT_EQ(float_to_half(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // between 0x3C01 and 0x3C02
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);             // between 0 and 0x0001
  EXPECT_EQ(float_to_half(3 * std::ldexp(1.0f, -25)), 0x0002);         // between 0x0001 and 0x0002
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);  // below the 65504/65536 midpoint
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // the midpoint: 0x7BFF is odd, so it rounds to inf
}

TEST(Half, DecodesKnownValues) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC100), -2.5f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x3555), 0.333251953125f);
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x03FF), 1023 * std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x0200), std::ldexp(1.0f, -15));
  EXPECT_EQ(float_to_bits(half_to_float(0x8000)), 0x80000000u);
  EXPECT_EQ(half_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7C01)));
}

TEST(Half, NanStaysNan) {
  const std::uint16_t quiet = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(quiet & 0x7C00, 0x7C00);
  EXPECT_NE(quiet & 0x03FF, 0);
  // A NaN whose payload sits only in the low float bits must not collapse to inf.
  const std::uint16_t low_payload = float_to_half(from_bits(0x7F800001u));
  EXPECT_EQ(low_payload & 0x7C00, 0x7C00);
  EXPECT_NE(low_payload & 0x03FF, 0);
}

TEST(Half, EveryValueRoundTripsAndMidpointsRoundToEven) {
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float f = half_to_float(std::uint16_t(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half(f), h) << std::hex << h;
  }
  for (std::uint32_t h = 0; h < 0x7BFF; ++h) {
    const float low = half_to_float(std::uint16_t(h)), high = half_to_float(std::uint16_t(h + 1));
    const float mid = (low + high) / 2;  // exact: 12 significant bits
    const std::uint16_t even = std::uint16_t(h % 2 == 0 ? h : h + 1);
    ASSERT_EQ(float_to_half(mid), even) << std::hex << h;
    ASSERT_EQ(float_to_half(-mid), 0x8000 | even) << std::hex << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, 0.0f)), h) << std::hex << h;
    ASSERT_EQ(float_to_half(std::nextafter(mid, kInf)), h + 1) << std::hex << h;
  }
}

TEST(BFloat16, EncodesKnownValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(-2.5f), 0xC020);
  EXPECT_EQ(float_to_bf16(65504.0f), 0x4780);  // 65504 needs 11 bits: rounds up to 65536
  EXPECT_EQ(float_to_bf16(3.14159265f), 0x4049);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest bf16
  EXPECT_EQ(float_to_bf16(from_bits(0x00010000u)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_bf16(from_bits(0x00008000u)), 0x0000);  // tie between 0 and 0x0001
  EXPECT_EQ(float_to_bf16(from_bits(0x00018000u)), 0x0002);  // tie between 0x0001 and 0x0002
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808000u)), 0x3F80);  // 1 + 2^-8: tie, even below
  EXPECT_EQ(float_to_bf16(from_bits(0x3F818000u)), 0x3F82);  // 1 + 3 * 2^-8: tie, even above
  EXPECT_EQ(float_to_bf16(from_bits(0x3F808001u)), 0x3F81);  // just above the tie
}

TEST(BFloat16, NanStaysNanAndDecodes) {
  EXPECT_EQ(float_to_bf16(from_bits(0x7FC00000u)), 0x7FC0);
  EXPECT_EQ(float_to_bf16(from_bits(0x7F800001u)), 0x7FC0);  // payload only in dropped bits: quieted
  EXPECT_EQ(float_to_bf16(from_bits(0xFF800001u)), 0xFFC0);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC020), -2.5f);
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16_to_float(0x7F80), std::numeric_limits<float>::infinity());
}

TEST(BFloat16, EveryValueRoundTripsAndMidpointsRoundToEven) {
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = bf16_to_float(std::uint16_t(b));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), b) << std::hex << b;
  }
  for (std::uint32_t b = 0; b < 0x7F7F; ++b) {
    const float low = bf16_to_float(std::uint16_t(b)), high = bf16_to_float(std::uint16_t(b + 1));
    const float mid = low + (high - low) / 2;  // exact (9 significant bits); low + high would overflow at the top
    const std::uint16_t even = std::uint16_t(b % 2 == 0 ? b : b + 1);
    ASSERT_EQ(float_to_bf16(mid), even) << std::hex << b;
    ASSERT_EQ(float_to_bf16(-mid), 0x8000 | even) << std::hex << b;
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, 0.0f)), b) << std::hex << b;
    ASSERT_EQ(float_to_bf16(std::nextafter(mid, kInf)), b + 1) << std::hex << b;
  }
}

}  // namespace
}  // namespace normkit::detail
