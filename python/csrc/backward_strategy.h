// The gamma/beta strategy forced by normkit.backward_strategy(): thread-local, read by the C++
// autograd of the forward ops (autograd.cpp) and set from Python through normkit._C.
#pragma once

#include <optional>
#include <string>

namespace normkit_torch {

/// Sets this thread's forced strategy (nullopt: none) and returns the previous one.
std::optional<std::string> set_backward_strategy(std::optional<std::string> strategy);
/// This thread's forced strategy, if any.
std::optional<std::string> backward_strategy();

}  // namespace normkit_torch
