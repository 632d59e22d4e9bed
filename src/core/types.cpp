// Names and sizes of the public enums (types.h, plan.h). The planner itself lives in src/planner/.
#include <string>

#include "normkit/plan.h"
#include "normkit/types.h"

namespace normkit {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
  }
  // A DType outside the enum can only come from a cast; validation reports it by name, and a
  // size of 0 here would silently turn buffer arithmetic into nonsense.
  throw Error("normkit: unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::F64: return "f64";
  }
  return "unknown";
}

const char* strategy_name(Strategy strategy) {
  switch (strategy) {
    case Strategy::Auto: return "auto";
    case Strategy::Simple: return "simple";
    case Strategy::Tiled: return "tiled";
    case Strategy::TwoPass: return "two_pass";
    case Strategy::Fused: return "fused";
  }
  return "unknown";
}

Strategy parse_strategy(const std::string& name) {
  for (Strategy s : {Strategy::Auto, Strategy::Simple, Strategy::Tiled, Strategy::TwoPass, Strategy::Fused})
    if (name == strategy_name(s)) return s;
  throw Error("normkit: argument 'strategy' is \"" + name +
              "\", expected one of auto, simple, tiled, two_pass, fused");
}

const char* op_name(Op op) {
  switch (op) {
    case Op::LayerNormForward: return "layer_norm_forward";
    case Op::LayerNormBackward: return "layer_norm_backward";
    case Op::RmsNormForward: return "rms_norm_forward";
    case Op::RmsNormBackward: return "rms_norm_backward";
  }
  return "unknown";
}

const char* band_name(TileBand band) {
  // Spelled as in the seed's benchmark tables, so plan descriptions can be matched against them.
  switch (band) {
    case TileBand::None: return "none";
    case TileBand::Tile8: return "Tile-8";
    case TileBand::Tile64: return "Tile-64";
    case TileBand::Tile128: return "Tile-128";
    case TileBand::Tile256: return "Tile-256";
  }
  return "unknown";
}

}  // namespace normkit
