#include "core/device_support.h"

#include <sstream>

namespace normkit::detail {

std::string no_kernels_for_device_message(const std::string& device_name, int major, int minor,
                                          const std::string& built_arch_list) {
  // "800,900" -> "sm_80, sm_90"
  std::string built;
  std::istringstream archs(built_arch_list);
  for (std::string arch; std::getline(archs, arch, ',');) {
    if (arch.size() < 2) continue;
    built += (built.empty() ? "sm_" : ", sm_") + arch.substr(0, arch.size() - 1);
  }
  const std::string cc = std::to_string(major) + std::to_string(minor);
  std::ostringstream os;
  os << "normkit: no kernels for this GPU (" << device_name << ", compute capability " << major << "." << minor
     << ", sm_" << cc << "): this build of normkit holds code for " << (built.empty() ? "other architectures" : built)
     << ". Rebuild it for this GPU: the Python package with TORCH_CUDA_ARCH_LIST=\"" << major << "." << minor
     << "\" pip install ., the C++ library with -DCMAKE_CUDA_ARCHITECTURES=" << cc
     << ". normkit's kernels are measured and tested on sm_90 (H100, H200); elsewhere they run untuned.";
  return os.str();
}

}  // namespace normkit::detail
