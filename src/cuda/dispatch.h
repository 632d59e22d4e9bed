// Internal: the host entry points of the CUDA layer, called by src/api.cpp. Everything CUDA-specific
// (kernels, streams, device queries) sits behind these functions; without CUDA (NORMKIT_WITH_CUDA
// off) src/cuda_stub.cpp provides them and they throw CudaError.
#pragma once

#include "core/problem.h"

namespace normkit::detail {

/// Facts of the current device, cached per device ordinal.
DeviceFacts cuda_device_facts();
bool cuda_device_present();

/// Where a pointer lives, when the CUDA runtime can tell. Device memory of another GPU than the current
/// one (the device the call's kernels run on) is told apart: PyTorch refuses such tensors, and a kernel
/// reading one faults or, with peer access enabled, silently crosses the interconnect.
enum class PointerKind { Unknown, Host, Device, OtherDevice };
struct PointerClass {
  PointerKind kind = PointerKind::Unknown;
  int device = -1;          // the GPU holding the memory (Device, OtherDevice)
  int current_device = -1;  // the current GPU (OtherDevice)
};
PointerClass classify_pointer(const void* ptr);

/// Launch the planned kernels on `stream`. Preconditions: validate(p, Device::Cuda) passed and
/// `plan` came from plan(planner_problem(p), ...). `workspace` holds plan.workspace_bytes.
void cuda_forward(const ForwardProblem& p, const Plan& plan, CUstream_st* stream);
void cuda_backward(const BackwardProblem& p, const Plan& plan, void* workspace, CUstream_st* stream);

/// Stream-ordered allocation for the convenience overloads.
void* cuda_alloc_async(std::size_t bytes, CUstream_st* stream);
void cuda_free_async(void* ptr, CUstream_st* stream);

}  // namespace normkit::detail
