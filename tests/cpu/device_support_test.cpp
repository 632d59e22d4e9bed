// The error a GPU without kernels in this build gets (cuda_device_facts raises it before any launch):
// it must name the device, the architectures built and both ways to rebuild.
#include <gtest/gtest.h>

#include <string>

#include "core/device_support.h"

namespace {

using normkit::detail::no_kernels_for_device_message;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(DeviceSupport, NoKernelsMessageNamesTheDeviceTheBuildAndTheRebuild) {
  const std::string m = no_kernels_for_device_message("NVIDIA A100-SXM4-80GB", 8, 0, "900");
  EXPECT_TRUE(has(m, "NVIDIA A100-SXM4-80GB")) << m;
  EXPECT_TRUE(has(m, "compute capability 8.0, sm_80")) << m;
  EXPECT_TRUE(has(m, "holds code for sm_90.")) << m;
  EXPECT_TRUE(has(m, "TORCH_CUDA_ARCH_LIST=\"8.0\" pip install .")) << m;
  EXPECT_TRUE(has(m, "-DCMAKE_CUDA_ARCHITECTURES=80")) << m;
}

TEST(DeviceSupport, NoKernelsMessageListsEveryBuiltArchitecture) {
  const std::string m = no_kernels_for_device_message("NVIDIA GeForce RTX 4090", 8, 9, "800,900,1000");
  EXPECT_TRUE(has(m, "compute capability 8.9, sm_89")) << m;
  EXPECT_TRUE(has(m, "holds code for sm_80, sm_90, sm_100.")) << m;
  EXPECT_TRUE(has(m, "TORCH_CUDA_ARCH_LIST=\"8.9\"")) << m;
  EXPECT_TRUE(has(m, "-DCMAKE_CUDA_ARCHITECTURES=89")) << m;
  // a build whose list nvcc did not give (an older nvcc) still says what to do
  const std::string unknown = no_kernels_for_device_message("GPU", 7, 5, "");
  EXPECT_TRUE(has(unknown, "holds code for other architectures.")) << unknown;
  EXPECT_TRUE(has(unknown, "-DCMAKE_CUDA_ARCHITECTURES=75")) << unknown;
}

}  // namespace
