// The CUDA layer's entry points for a build without CUDA (NORMKIT_WITH_CUDA off): every device
// call fails with a clear CudaError; pointers are never classified (no runtime to ask).
#include "cuda/dispatch.h"

namespace normkit::detail {
namespace {
[[noreturn]] void no_cuda() {
  throw CudaError("normkit was built without CUDA: use ExecConfig{Device::Cpu} or rebuild with nvcc available");
}
}  // namespace

DeviceFacts cuda_device_facts() { no_cuda(); }
bool cuda_device_present() { return false; }
PointerClass classify_pointer(const void*) { return {}; }
void cuda_forward(const ForwardProblem&, const Plan&, CUstream_st*) { no_cuda(); }
void cuda_backward(const BackwardProblem&, const Plan&, void*, CUstream_st*) { no_cuda(); }
void* cuda_alloc_async(std::size_t, CUstream_st*) { no_cuda(); }
void cuda_free_async(void*, CUstream_st*) { no_cuda(); }
}  // namespace normkit::detail
