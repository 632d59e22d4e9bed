// Names and sizes of the public enums: the strings are what logs, bench tables and the Python
// binding print and parse, so each is pinned.
#include <gtest/gtest.h>

#include <string>

#include "normkit/plan.h"
#include "normkit/types.h"

namespace normkit {
namespace {

TEST(Types, DtypeSizesAndNames) {
  EXPECT_EQ(dtype_size(DType::F32), 4u);
  EXPECT_EQ(dtype_size(DType::F16), 2u);
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_STREQ(dtype_name(DType::F32), "f32");
  EXPECT_STREQ(dtype_name(DType::F16), "f16");
  EXPECT_STREQ(dtype_name(DType::BF16), "bf16");
  EXPECT_STREQ(dtype_name(DType::F64), "f64");
  EXPECT_THROW(dtype_size(DType(42)), Error);
}

TEST(Types, StrategyNamesRoundTrip) {
  const struct { Strategy strategy; const char* name; } expected[] = {
      {Strategy::Auto, "auto"},       {Strategy::Simple, "simple"}, {Strategy::Tiled, "tiled"},
      {Strategy::TwoPass, "two_pass"}, {Strategy::Fused, "fused"},
  };
  for (const auto& e : expected) {
    EXPECT_STREQ(strategy_name(e.strategy), e.name);
    EXPECT_EQ(parse_strategy(e.name), e.strategy) << e.name;
  }
}

TEST(Types, ParseStrategyRejectsUnknownNamesNamingThem) {
  for (const char* bad : {"two-pass", "Fused", "", "bogus"}) {
    try {
      parse_strategy(bad);
      ADD_FAILURE() << "accepted \"" << bad << "\"";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'strategy'"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("\"") + bad + "\""), std::string::npos) << message;
    }
  }
}

TEST(Types, OpAndBandNames) {
  EXPECT_STREQ(op_name(Op::LayerNormForward), "layer_norm_forward");
  EXPECT_STREQ(op_name(Op::LayerNormBackward), "layer_norm_backward");
  EXPECT_STREQ(op_name(Op::RmsNormForward), "rms_norm_forward");
  EXPECT_STREQ(op_name(Op::RmsNormBackward), "rms_norm_backward");
  EXPECT_STREQ(band_name(TileBand::None), "none");
  EXPECT_STREQ(band_name(TileBand::Tile8), "Tile-8");
  EXPECT_STREQ(band_name(TileBand::Tile64), "Tile-64");
  EXPECT_STREQ(band_name(TileBand::Tile128), "Tile-128");
  EXPECT_STREQ(band_name(TileBand::Tile256), "Tile-256");
}

}  // namespace
}  // namespace normkit
