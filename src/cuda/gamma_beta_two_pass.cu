// Strategy "two_pass": pass 1, a 2-D grid (column strips x row slices) where each block sums its
// slice of rows for its strip into fp32 partials [parts, N] (one array per requested output);
// pass 2 reduces the partials column-wise in a fixed order and casts. The partials are sized from
// N, the row length -- never from the weight's shape -- and exist for dbias without a weight (the
// seed's bug cannot happen here).
#include "cuda/column_reduce.cuh"

namespace normkit::cuda {
namespace {

template <typename T, typename W, bool kRms, int RPT, int VEC>
__global__ void __launch_bounds__(1024)
    two_pass_partials_kernel(const BackwardParams<T, W> p, float* partials, std::int64_t parts, std::int64_t rows_per_part) {
  extern __shared__ float smem[];  // 2 * VEC * blockDim.x * blockDim.y
  allow_dependent_launch();  // pass 2 may be scheduled now; it waits for these partials itself
  const int strip = int(blockIdx.x) * int(blockDim.x) * VEC;
  const int col = strip + int(threadIdx.x) * VEC;
  const std::int64_t part = blockIdx.y;
  const std::int64_t row_begin = part * rows_per_part;
  const std::int64_t row_end = row_begin + rows_per_part < p.rows ? row_begin + rows_per_part : p.rows;
  float dgamma[VEC], dbeta[VEC];
  accumulate_columns<T, W, kRms, RPT, VEC>(p, col, row_begin, row_end, int(threadIdx.y), int(blockDim.y), dgamma, dbeta);
  // partial arrays in gamma_beta_outputs order: dweight (when requested), then dbias
  float* const row = partials + part * p.cols + strip;
  const std::int64_t array_size = parts * p.cols;
  const std::int64_t dbias_array = p.dweight != nullptr ? 1 : 0;
  // (two-pass strips are a warp wide or scalar, never tall: planner.cpp, column_strips)
  sum_over_thread_rows<VEC, false>(dgamma, dbeta, p.dweight != nullptr, p.dbias != nullptr, smem, int(threadIdx.x),
                                   int(threadIdx.y), int(blockDim.x), int(blockDim.y), [&](int which, int c, float total) {
    if (strip + c < p.cols) row[(which == 0 ? 0 : dbias_array) * array_size + c] = total;
  });
  wait_for_previous_kernel();  // launched next to dX: complete only after it (see common.cuh)
}

}  // namespace

template <typename T, typename W>
void launch_gamma_beta_two_pass(const BackwardProblem& p, const Plan& plan, float* partials, bool programmatic,
                                cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const ColumnShape& c = plan.columns;
  const dim3 grid(unsigned(c.col_blocks), unsigned(c.row_parts)), block(unsigned(c.block_x), unsigned(c.block_y));
  const std::size_t smem = column_block_smem(c);
  auto launch = [&](auto rpt, auto vec) {
    void (*kernel)(BackwardParams<T, W>, float*, std::int64_t, std::int64_t) =
        p.rms ? two_pass_partials_kernel<T, W, true, rpt(), vec()> : two_pass_partials_kernel<T, W, false, rpt(), vec()>;
    allow_dynamic_smem(kernel, std::int64_t(smem), "two_pass_partials_kernel shared memory");
    launch_kernel(kernel, grid, block, smem, stream, LaunchMode{programmatic}, "two_pass_partials_kernel launch", params, partials,
                  c.row_parts, c.rows_per_part);
  };
  constexpr int kVec = int(16 / sizeof(T));
  if (c.vec == 1 && c.rows_per_thread == 4) launch(IntConst<4>{}, IntConst<1>{});
  else if (c.vec == kVec && c.rows_per_thread == 2) launch(IntConst<2>{}, IntConst<kVec>{});
  else
    throw CudaError("normkit: internal error: two-pass has no instance for rows_per_thread = " +
                    std::to_string(c.rows_per_thread) + ", vec = " + std::to_string(c.vec));
  check_launch("two_pass_partials_kernel");

  launch_reduce_partials<T, W>(params, partials, c.row_parts, c, plan.programmatic_launch, stream);
}

#define NORMKIT_INSTANTIATE(T, W) \
  template void launch_gamma_beta_two_pass<T, W>(const BackwardProblem&, const Plan&, float*, bool, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
