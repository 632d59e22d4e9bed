// Strategy "tiled" (the seed's): one block per 32-column strip walks all M rows with block_y
// thread rows, rows_per_thread of them unrolled per step (the band: Tile-8/64/128/256 chosen by M
// in the planner), then reduces its thread rows in shared memory and writes the result directly.
#include "cuda/column_reduce.cuh"

namespace normkit::cuda {
namespace {

template <typename T, typename W, bool kRms, int RPT>
__global__ void __launch_bounds__(1024) gamma_beta_tiled_kernel(const BackwardParams<T, W> p) {
  extern __shared__ float smem[];  // blockDim.x * blockDim.y
  const int col = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  float dgamma = 0.f, dbeta = 0.f;
  accumulate_column<T, W, kRms, RPT>(p, col, 0, p.rows, int(threadIdx.y), int(blockDim.y), dgamma, dbeta);
  dgamma = sum_over_thread_rows(dgamma, smem);
  dbeta = sum_over_thread_rows(dbeta, smem);
  if (threadIdx.y == 0 && col < p.cols) {
    if (p.dweight != nullptr) p.dweight[col] = from_float<W>(dgamma);
    if (p.dbias != nullptr) p.dbias[col] = from_float<W>(dbeta);
  }
}

}  // namespace

template <typename T, typename W>
void launch_gamma_beta_tiled(const BackwardProblem& p, const Plan& plan, cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const ColumnShape& c = plan.columns;
  const dim3 grid(unsigned(c.col_blocks)), block(unsigned(c.block_x), unsigned(c.block_y));
  const std::size_t smem = sizeof(float) * std::size_t(c.block_x) * std::size_t(c.block_y);
  auto launch = [&](auto rpt) {
    if (p.rms)
      gamma_beta_tiled_kernel<T, W, true, rpt()><<<grid, block, smem, stream>>>(params);
    else
      gamma_beta_tiled_kernel<T, W, false, rpt()><<<grid, block, smem, stream>>>(params);
  };
  switch (c.rows_per_thread) {
    case 1: launch(IntConst<1>{}); break;
    case 4: launch(IntConst<4>{}); break;
    case 8: launch(IntConst<8>{}); break;
    default: throw CudaError("normkit: internal error: tiled has no instance for rows_per_thread = " +
                             std::to_string(c.rows_per_thread));
  }
  check_launch("gamma_beta_tiled_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) \
  template void launch_gamma_beta_tiled<T, W>(const BackwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
