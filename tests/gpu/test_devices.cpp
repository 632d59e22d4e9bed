// Memory of another GPU than the current one: the C++ API refuses it, naming the argument and the two
// devices, and writes nothing (PyTorch refuses tensors of two devices in one op; a kernel reading such
// memory faults, or with peer access silently crosses the interconnect). Needs two GPUs: skipped on one.
#include <cmath>
#include <cstring>

#include "harness.h"

namespace normkit::gputest {
namespace {

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

/// Restores the current device when a test leaves.
struct CurrentDevice {
  int saved = 0;
  CurrentDevice() { NK_CUDA(cudaGetDevice(&saved)); }
  ~CurrentDevice() { (void)cudaSetDevice(saved); }
};

constexpr std::int64_t kRows = 4, kCols = 64;

/// One float forward's buffers on `device`; y/mean/rstd poisoned, x random-ish (never zeros).
struct ForwardBuffers {
  DeviceBuffer x, y, mean, rstd;
  explicit ForwardBuffers(int device) {
    NK_CUDA(cudaSetDevice(device));
    x = DeviceBuffer(kRows * kCols * sizeof(float));
    y = DeviceBuffer(kRows * kCols * sizeof(float));
    mean = DeviceBuffer(kRows * sizeof(float));
    rstd = DeviceBuffer(kRows * sizeof(float));
    std::vector<float> host(kRows * kCols);
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = 0.25f + 0.01f * float(i % 97);
    NK_CUDA(cudaMemcpy(x.get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    for (DeviceBuffer* b : {&y, &mean, &rstd}) NK_CUDA(cudaMemset(b->get(), test::kPoisonByte, b->bytes()));
    NK_CUDA(cudaDeviceSynchronize());
  }
  LayerNormForwardArgs args(const DeviceBuffer& x_on) const {
    return {ConstRows{x_on.get(), DType::F32, kRows, kCols},
            std::nullopt,
            std::nullopt,
            1e-5,
            Rows{y.get(), DType::F32, kRows, kCols},
            Vec{mean.get(), DType::F32, kRows},
            Vec{rstd.get(), DType::F32, kRows}};
  }
  bool outputs_untouched() const {
    for (const DeviceBuffer* b : {&y, &mean, &rstd}) {
      std::vector<unsigned char> host(b->bytes());
      NK_CUDA(cudaMemcpy(host.data(), b->get(), host.size(), cudaMemcpyDeviceToHost));
      for (unsigned char c : host)
        if (c != test::kPoisonByte) return false;
    }
    return true;
  }
};

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Devices, MemoryOfAnotherGpuIsRefusedNamingTheArgument) {
  if (device_count() < 2) GTEST_SKIP() << "needs two GPUs (" << device_count() << " here)";
  CurrentDevice restore;
  ForwardBuffers on0(0);
  ForwardBuffers on1(1);

  // x on device 1, everything else on device 0, device 0 current: 'x' is named with both devices.
  NK_CUDA(cudaSetDevice(0));
  std::string what = error_of([&] { layer_norm_forward(on0.args(on1.x), ExecConfig{Device::Cuda}); });
  EXPECT_NE(what.find("'x'"), std::string::npos) << what;
  EXPECT_NE(what.find("device 1"), std::string::npos) << what;
  EXPECT_NE(what.find("device 0"), std::string::npos) << what;
  EXPECT_TRUE(on0.outputs_untouched());

  // every pointer on device 0 while device 1 is current: refused too (the kernels would run on 1).
  NK_CUDA(cudaSetDevice(1));
  what = error_of([&] { layer_norm_forward(on0.args(on0.x), ExecConfig{Device::Cuda}); });
  EXPECT_NE(what.find("device 0"), std::string::npos) << what;
  EXPECT_TRUE(on0.outputs_untouched());

  // the same call with its own device current runs and writes every output element.
  NK_CUDA(cudaSetDevice(0));
  EXPECT_EQ(error_of([&] { layer_norm_forward(on0.args(on0.x), ExecConfig{Device::Cuda}); }), "");
  NK_CUDA(cudaDeviceSynchronize());
  std::vector<float> y(kRows * kCols);
  NK_CUDA(cudaMemcpy(y.data(), on0.y.get(), y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (float v : y) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace normkit::gputest
