// Internal: the float64 CPU reference for all four ops. Clarity over speed: every sum is a plain
// float64 loop. It is the oracle of every GPU test and the CPU path of the public API.
#pragma once

#include "core/problem.h"

namespace normkit::detail {

/// Preconditions: validate(p, Device::Cpu) passed. Inputs of any dtype are read as float64; outputs
/// are rounded once to their dtype (round to nearest even for fp16/bf16).
void reference_forward(const ForwardProblem& p);
void reference_backward(const BackwardProblem& p);

}  // namespace normkit::detail
