// normkit: LayerNorm and RMSNorm forward/backward with the semantics of PyTorch's
// aten::native_layer_norm(_backward) and aten::_fused_rms_norm(_backward).
//
// Shapes: M rows (product of the leading dims) of N elements (product of the normalized dims; a
// multi-dim normalized shape is just a larger N). M = 0 is an empty call (dweight/dbias are zeros);
// N = 0 with M > 0 is rejected (a normalized row needs an element; the PyTorch ops answer it as ATen
// does, without a call). Activations x, y, dy, dx share one dtype T
// (F32, F16, BF16 on CUDA; also F64 on CPU). weight/bias/dweight/dbias share one dtype W, which is
// T or F32. mean/rstd are F32 per row (F64 when T is F64).
//
// Every call validates all arguments before touching any output and throws normkit::Error naming
// the offending argument. Outputs must not share a byte with an input or with each other (in-place
// calls are rejected: some plans read an input after other blocks wrote outputs); views that only
// interleave in one buffer, e.g. [x | y] in each row, are fine. Device calls run asynchronously on
// ExecConfig::stream, on the current CUDA device (cudaSetDevice): memory of another GPU is refused, as
// PyTorch refuses tensors of two devices in one op.
#pragma once

#include <optional>

#include "normkit/plan.h"
#include "normkit/types.h"

namespace normkit {

struct LayerNormForwardArgs {
  ConstRows x;                     ///< [M, N]
  std::optional<ConstVec> weight;  ///< [N]; absent = 1
  std::optional<ConstVec> bias;    ///< [N]; absent = 0
  double eps = 1e-5;
  Rows y;                          ///< [M, N], dtype of x
  Vec mean;                        ///< [M], F32
  Vec rstd;                        ///< [M], F32
};

/// Requested outputs are the ones present (PyTorch's output_mask).
struct LayerNormBackwardArgs {
  ConstRows dy;                    ///< [M, N]
  ConstRows x;                     ///< [M, N]
  ConstVec mean;                   ///< [M], F32
  ConstVec rstd;                   ///< [M], F32
  std::optional<ConstVec> weight;  ///< [N]; absent = 1 in dx
  std::optional<Rows> dx;          ///< [M, N]
  std::optional<Vec> dweight;      ///< [N] = sum over rows of dy * xhat (allowed without weight)
  std::optional<Vec> dbias;        ///< [N] = sum over rows of dy (exists even without weight)
};

struct RmsNormForwardArgs {
  ConstRows x;
  std::optional<ConstVec> weight;
  double eps = 1e-6;  ///< PyTorch's eps=None means finfo(x.dtype).eps: the caller resolves it
  Rows y;
  Vec rstd;
};

struct RmsNormBackwardArgs {
  ConstRows dy;
  ConstRows x;
  ConstVec rstd;
  std::optional<ConstVec> weight;
  std::optional<Rows> dx;
  std::optional<Vec> dweight;
};

// ---- forward (no workspace) ----
void layer_norm_forward(const LayerNormForwardArgs& args, const ExecConfig& config = {});
void rms_norm_forward(const RmsNormForwardArgs& args, const ExecConfig& config = {});

// ---- backward ----
/// Bytes of device workspace the call needs (0 on CPU). Validates the arguments.
std::size_t layer_norm_backward_workspace_size(const LayerNormBackwardArgs& args, const ExecConfig& config = {});
std::size_t rms_norm_backward_workspace_size(const RmsNormBackwardArgs& args, const ExecConfig& config = {});

/// With caller-owned workspace (at least *_workspace_size bytes, 16-byte aligned): no allocation,
/// safe inside CUDA graph capture.
void layer_norm_backward(const LayerNormBackwardArgs& args, const ExecConfig& config, Workspace workspace);
void rms_norm_backward(const RmsNormBackwardArgs& args, const ExecConfig& config, Workspace workspace);

/// Convenience: allocates the workspace itself (stream-ordered) and frees it after the call.
void layer_norm_backward(const LayerNormBackwardArgs& args, const ExecConfig& config = {});
void rms_norm_backward(const RmsNormBackwardArgs& args, const ExecConfig& config = {});

/// The plan a call would run (for benchmarks, tests and logging). Validates the arguments.
Plan plan_layer_norm_backward(const LayerNormBackwardArgs& args, const ExecConfig& config = {});
Plan plan_rms_norm_backward(const RmsNormBackwardArgs& args, const ExecConfig& config = {});
Plan plan_layer_norm_forward(const LayerNormForwardArgs& args, const ExecConfig& config = {});
Plan plan_rms_norm_forward(const RmsNormForwardArgs& args, const ExecConfig& config = {});

/// Facts of the current CUDA device (throws CudaError without one) and whether normkit was built
/// with CUDA and sees a device.
DeviceFacts current_device_facts();
bool cuda_available();
bool built_with_cuda();

}  // namespace normkit
