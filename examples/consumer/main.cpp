// The README's example: LayerNorm forward of 4 rows of 8 floats on the CPU path.
#include <normkit/normkit.h>
#include <cstdio>
#include <vector>

int main() {
  const int M = 4, N = 8;
  std::vector<float> x(M * N), y(M * N), mean(M), rstd(M);
  for (int i = 0; i < M * N; ++i) x[i] = float(i % 7) - 3.f;
  normkit::LayerNormForwardArgs args;
  args.x = {x.data(), normkit::DType::F32, M, N};
  args.y = {y.data(), normkit::DType::F32, M, N};
  args.mean = {mean.data(), normkit::DType::F32, M};
  args.rstd = {rstd.data(), normkit::DType::F32, M};
  normkit::layer_norm_forward(args, {normkit::Device::Cpu});  // Device::Cuda + a stream on a GPU
  std::printf("row 0: mean %.4f rstd %.4f y[0] %.4f\n", mean[0], rstd[0], y[0]);
  return (mean[0] == mean[0] && rstd[0] > 0.f) ? 0 : 1;
}
