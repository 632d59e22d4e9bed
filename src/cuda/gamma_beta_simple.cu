// Strategy "simple": one thread per column walks all M rows. Best for tiny M, where any split of
// the rows costs more than it saves.
#include "cuda/column_reduce.cuh"

namespace normkit::cuda {
namespace {

template <typename T, typename W, bool kRms>
__global__ void gamma_beta_simple_kernel(const BackwardParams<T, W> p) {
  allow_dependent_launch();
  const int col = int(blockIdx.x) * int(blockDim.x) + int(threadIdx.x);
  if (col < p.cols) {
    float dgamma[1], dbeta[1];
    accumulate_columns<T, W, kRms, 4, 1>(p, col, 0, p.rows, 0, 1, dgamma, dbeta);
    if (p.dweight != nullptr) p.dweight[col] = from_float<W>(dgamma[0]);
    if (p.dbias != nullptr) p.dbias[col] = from_float<W>(dbeta[0]);
  }
  wait_for_previous_kernel();  // launched next to dX: complete only after it (see common.cuh)
}

}  // namespace

template <typename T, typename W>
void launch_gamma_beta_simple(const BackwardProblem& p, const Plan& plan, bool programmatic, cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const dim3 grid(unsigned(plan.columns.col_blocks)), block(unsigned(plan.columns.block_x));
  launch_kernel(p.rms ? gamma_beta_simple_kernel<T, W, true> : gamma_beta_simple_kernel<T, W, false>, grid, block, 0,
                stream, LaunchMode{programmatic}, "gamma_beta_simple_kernel launch", params);
  check_launch("gamma_beta_simple_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) \
  template void launch_gamma_beta_simple<T, W>(const BackwardProblem&, const Plan&, bool, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
