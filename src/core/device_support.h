// Internal: what this build can run on. The kernels are compiled for the architectures the build names
// (CMAKE_CUDA_ARCHITECTURES, or TORCH_CUDA_ARCH_LIST for the Python package; sm_90 by default); a GPU
// outside them has no kernel image, and the CUDA runtime's own words for that ("no kernel image is
// available") say neither which GPUs the build serves nor how to rebuild.
#pragma once

#include <string>

namespace normkit::detail {

/// The error for a GPU this build has no kernels for: names the device and its compute capability, the
/// architectures built (`built_arch_list` as nvcc's __CUDA_ARCH_LIST__ spells it, e.g. "800,900"; empty
/// when unknown) and how to rebuild for it.
std::string no_kernels_for_device_message(const std::string& device_name, int major, int minor,
                                          const std::string& built_arch_list);

}  // namespace normkit::detail
