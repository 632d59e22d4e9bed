// The ceiling a kernel moving the full backward's bytes can reach at each size (docs/NOTES.md entry 71):
// out = a + b in bf16 (read two tensors, write one, 16-byte vectors, grid-stride), the best of six grids,
// CUDA-graph replay of 20 launches a buffer set, sets rotating over more than 3x L2, best of 5 replays,
// against a floor computed as normkit-bench does (bytes / the bandwidth of a 1 GiB D2D cudaMemcpyAsync,
// read + written, best of 10) over the three tensors' bytes only: normkit-bench's full-backward floor adds
// the statistics and weights (0.1-3.4 % more bytes at the shapes measured, the most at 32 x 512 and
// 131072 x 64). No normalization kernel moving these bytes can beat this one; where it
// stays below 90 % of the floor, so must they. Not part of the CMake build: scripts/gpu-check.sh
// ceiling compiles and runs it (nvcc -arch=sm_90 -O3).
#include <cstdio>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)
__global__ void add2(const uint4* a, const uint4* b, uint4* o, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    uint4 x = a[i], y = b[i], r;
    const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
    const __nv_bfloat162* yp = reinterpret_cast<const __nv_bfloat162*>(&y);
    __nv_bfloat162* rp = reinterpret_cast<__nv_bfloat162*>(&r);
    for (int k = 0; k < 4; ++k) rp[k] = __hadd2(xp[k], yp[k]);
    o[i] = r;
  }
}
int main() {
  int sms = 0; CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s; CK(cudaStreamCreate(&s));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  // copy bandwidth: 1 GiB D2D, best of 10
  void *ca, *cb; size_t cbytes = 1ull << 30; CK(cudaMalloc(&ca, cbytes)); CK(cudaMalloc(&cb, cbytes));
  float best = 1e9;
  for (int i = 0; i < 10; ++i) { cudaEventRecord(e0, s); cudaMemcpyAsync(cb, ca, cbytes, cudaMemcpyDeviceToDevice, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1); best = std::min(best, ms); }
  const double bw = 2.0 * cbytes / (best * 1e-3);
  printf("copy bandwidth %.3f TB/s\n", bw / 1e12);
  CK(cudaFree(ca)); CK(cudaFree(cb));
  struct Shape { long long m, n; } shapes[] = {{32, 512}, {96, 768}, {192, 1024}, {1024, 768}, {4096, 1024}, {8192, 768}, {8192, 1000}, {131072, 64}, {16384, 1024}, {16384, 8192}, {131072, 4096}};
  printf("| M x N (bf16) | bytes (3 tensors) | floor (us) | best time (us) | %% of floor | grid |\n|---|---|---|---|---|---|\n");
  for (auto sh : shapes) {
    const long long elems = sh.m * sh.n, vecs = elems / 8;
    const size_t tbytes = size_t(elems) * 2;
    const int sets = int(std::max<long long>(1, (3LL * 60 * 1024 * 1024) / (3 * (long long)tbytes) + 1));
    std::vector<void*> bufs(3 * sets);
    for (auto& p : bufs) CK(cudaMalloc(&p, tbytes));
    for (auto p : bufs) CK(cudaMemset(p, 0, tbytes));
    const double floor_us = 3.0 * tbytes / bw * 1e6;
    float best_us = 1e9; int best_grid = 0;
    for (int grid : {int(std::min<long long>((vecs + 255) / 256, 1 << 20)), sms, 2 * sms, 4 * sms, 8 * sms, 16 * sms}) {
      if (grid <= 0) continue;
      const int calls = 20 * sets;
      cudaGraph_t g; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int c = 0; c < calls; ++c) { int k = c % sets; add2<<<grid, 256, 0, s>>>((uint4*)bufs[3 * k], (uint4*)bufs[3 * k + 1], (uint4*)bufs[3 * k + 2], vecs); }
      CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
      CK(cudaGraphLaunch(ge, s)); CK(cudaStreamSynchronize(s));
      for (int r = 0; r < 5; ++r) {
        cudaEventRecord(e0, s); cudaGraphLaunch(ge, s); cudaEventRecord(e1, s); cudaEventSynchronize(e1);
        float ms; cudaEventElapsedTime(&ms, e0, e1); float us = ms * 1e3f / calls;
        if (us < best_us) { best_us = us; best_grid = grid; }
      }
      cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    }
    printf("| %lld x %lld | %.2f MB | %.2f | %.2f | %.0f%% | %d |\n", sh.m, sh.n, 3.0 * tbytes / 1e6, floor_us, best_us, 100 * floor_us / best_us, best_grid);
    for (auto p : bufs) cudaFree(p);
  }
  return 0;
}
