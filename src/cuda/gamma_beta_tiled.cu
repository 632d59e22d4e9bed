// Strategy "tiled" (the seed's): one block per column strip (32 lanes of vec columns each) walks all
// M rows with block_y thread rows, rows_per_thread of them unrolled per step (the band:
// Tile-8/64/128/256 chosen by M in the planner), then reduces its thread rows in shared memory and
// writes the result directly.
#include "cuda/column_reduce.cuh"

namespace normkit::cuda {
namespace {

template <typename T, typename W, bool kRms, int RPT, int VEC>
__global__ void __launch_bounds__(1024) gamma_beta_tiled_kernel(const BackwardParams<T, W> p) {
  extern __shared__ float smem[];  // 2 * VEC * blockDim.x * blockDim.y
  allow_dependent_launch();
  const int strip = int(blockIdx.x) * int(blockDim.x) * VEC;
  const int col = strip + int(threadIdx.x) * VEC;
  float dgamma[VEC], dbeta[VEC];
  accumulate_columns<T, W, kRms, RPT, VEC>(p, col, 0, p.rows, int(threadIdx.y), int(blockDim.y), dgamma, dbeta);
  sum_over_thread_rows<VEC>(dgamma, dbeta, p.dweight != nullptr, p.dbias != nullptr, smem, [&](int which, int c, float total) {
    if (strip + c < p.cols) (which == 0 ? p.dweight : p.dbias)[strip + c] = from_float<W>(total);
  });
  wait_for_previous_kernel();  // launched next to dX: complete only after it (see common.cuh)
}

}  // namespace

template <typename T, typename W>
void launch_gamma_beta_tiled(const BackwardProblem& p, const Plan& plan, bool programmatic, cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const ColumnShape& c = plan.columns;
  const dim3 grid(unsigned(c.col_blocks)), block(unsigned(c.block_x), unsigned(c.block_y));
  const std::size_t smem = column_block_smem(c);
  auto launch = [&](auto rpt, auto vec) {
    void (*kernel)(BackwardParams<T, W>) =
        p.rms ? gamma_beta_tiled_kernel<T, W, true, rpt(), vec()> : gamma_beta_tiled_kernel<T, W, false, rpt(), vec()>;
    allow_dynamic_smem(kernel, std::int64_t(smem), "gamma_beta_tiled_kernel shared memory");  // 64 KB at 32 x 32 x vec8
    launch_kernel(kernel, grid, block, smem, stream, LaunchMode{programmatic}, "gamma_beta_tiled_kernel launch", params);
  };
  constexpr int kVec = int(16 / sizeof(T));
  const auto fail = [&] {
    throw CudaError("normkit: internal error: tiled has no instance for rows_per_thread = " +
                    std::to_string(c.rows_per_thread) + ", vec = " + std::to_string(c.vec));
  };
  if (c.vec == 1) {
    switch (c.rows_per_thread) {
      case 1: launch(IntConst<1>{}, IntConst<1>{}); break;
      case 4: launch(IntConst<4>{}, IntConst<1>{}); break;
      case 8: launch(IntConst<8>{}, IntConst<1>{}); break;
      default: fail();
    }
  } else if (c.vec == kVec) {
    switch (c.rows_per_thread) {
      case 1: launch(IntConst<1>{}, IntConst<kVec>{}); break;
      case 2: launch(IntConst<2>{}, IntConst<kVec>{}); break;
      default: fail();
    }
  } else {
    fail();
  }
  check_launch("gamma_beta_tiled_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) \
  template void launch_gamma_beta_tiled<T, W>(const BackwardProblem&, const Plan&, bool, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
