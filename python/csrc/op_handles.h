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

/// torch.finfo(dtype).eps: what rms_norm's eps=None means, as in F.rms_norm.
inline double finfo_eps(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return 0.0009765625;   // 2^-10
    case at::kBFloat16: return 0.0078125;  // 2^-7
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    default: return std::numeric_limits<float>::epsilon();
  }
}

}  // namespace normkit_torch
