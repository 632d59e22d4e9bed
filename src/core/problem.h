// Internal: one description of a forward or backward call shared by LayerNorm and RMSNorm, so the
// validation, the CPU reference and the CUDA dispatch each exist once.
#pragma once

#include <optional>

#include "normkit/normkit.h"

namespace normkit::detail {

struct ForwardProblem {
  bool rms = false;
  ConstRows x;
  std::optional<ConstVec> weight;
  std::optional<ConstVec> bias;  // always empty for RMSNorm
  double eps = 0;
  Rows y;
  std::optional<Vec> mean;       // LayerNorm only
  Vec rstd;

  std::int64_t rows() const { return x.rows; }
  std::int64_t cols() const { return x.cols; }
};

struct BackwardProblem {
  bool rms = false;
  ConstRows dy;
  ConstRows x;
  std::optional<ConstVec> mean;  // LayerNorm only
  ConstVec rstd;
  std::optional<ConstVec> weight;
  std::optional<Rows> dx;
  std::optional<Vec> dweight;
  std::optional<Vec> dbias;      // LayerNorm only

  std::int64_t rows() const { return x.rows; }
  std::int64_t cols() const { return x.cols; }
  Mask mask() const { return {dx.has_value(), dweight.has_value(), dbias.has_value()}; }
  /// dtype of weight/dweight/dbias (W); the activation dtype when none is present.
  DType weight_dtype() const;
};

ForwardProblem to_problem(const LayerNormForwardArgs& a);
ForwardProblem to_problem(const RmsNormForwardArgs& a);
BackwardProblem to_problem(const LayerNormBackwardArgs& a);
BackwardProblem to_problem(const RmsNormBackwardArgs& a);

/// Whether validation asks the CUDA runtime where each pointer lives (ExecConfig::caller_checked_pointers).
enum class PointerQuery : bool { Skip, Ask };

/// Throws normkit::Error (naming the argument, expected vs actual) on any invalid argument.
/// Writes nothing.
void validate(const ForwardProblem& p, Device device, PointerQuery pointers);
void validate(const BackwardProblem& p, Device device, PointerQuery pointers);

/// The planner's view of a validated call.
Problem planner_problem(const ForwardProblem& p);
Problem planner_problem(const BackwardProblem& p);

}  // namespace normkit::detail
