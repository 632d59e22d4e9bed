// What both C++ files of the extension need of torch.ops.normkit.*: the ops' typed handles, for calls
// through the dispatcher's unboxed call (the eager entry points in ops.cpp, the autograd in
// autograd.cpp), each looked up once; and eps=None's meaning for rms_norm. The schemas themselves are
// ops.cpp's TORCH_LIBRARY block: these signatures must match them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <array>
#include <limits>
#include <optional>
#include <tuple>

namespace normkit_torch {

using Tensor = at::Tensor;
using OptionalTensor = std::optional<Tensor>;

inline const auto& layer_norm_forward_op() {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("normkit::layer_norm_forward", "")
          .typed<std::tuple<Tensor, Tensor, Tensor>(const Tensor&, c10::SymIntArrayRef, const OptionalTensor&,
                                                    const OptionalTensor&, double)>();
  return handle;
}

inline const auto& rms_norm_forward_op() {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("normkit::rms_norm_forward", "")
          .typed<std::tuple<Tensor, Tensor>(const Tensor&, c10::SymIntArrayRef, const OptionalTensor&,
                                            std::optional<double>)>();
  return handle;
}

inline const auto& layer_norm_backward_op() {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("normkit::layer_norm_backward", "")
          .typed<std::tuple<OptionalTensor, OptionalTensor, OptionalTensor>(
              const Tensor&, const Tensor&, c10::SymIntArrayRef, const Tensor&, const Tensor&, const OptionalTensor&,
              const OptionalTensor&, std::array<bool, 3>, c10::string_view)>();
  return handle;
}

inline const auto& rms_norm_backward_op() {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("normkit::rms_norm_backward", "")
          .typed<std::tuple<OptionalTensor, OptionalTensor>(const Tensor&, const Tensor&, c10::SymIntArrayRef,
                                                            const Tensor&, const OptionalTensor&, std::array<bool, 2>,
                                                            c10::string_view)>();
  return handle;
}

/// What rms_norm's eps=None means: the epsilon of the type the row is computed in, as ATen resolves it
/// (rms_norm and _fused_rms_norm: numeric_limits of the op-math type) -- float32's for float16,
/// bfloat16 and float32, float64's for float64. Not torch.finfo(x.dtype).eps, which F.rms_norm's
/// docstring says: torch 2.11 computes bf16 / fp16 rows with 1.19e-7, not 2^-7 / 2^-10 (tested against
/// F.rms_norm in test_ops.py).
inline double default_rms_eps(at::ScalarType t) {
  return t == at::kDouble ? std::numeric_limits<double>::epsilon() : double(std::numeric_limits<float>::epsilon());
}

}  // namespace normkit_torch
