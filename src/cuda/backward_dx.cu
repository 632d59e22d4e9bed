// dX of LayerNorm / RMSNorm backward, one row group per row: x and dy cached in registers and read
// once (ITEMS > 0), or streamed twice for rows too long to cache (ITEMS == 0). Used by the
// unfused strategies (simple, tiled, two-pass) next to their gamma/beta kernels.
#include "cuda/backward_row.cuh"
#include "cuda/kernels.h"

namespace normkit::cuda {
namespace {

/// Launch bounds of a dX instance: split rows run in blocks of kSplitBlockThreads (two an SM) or, for
/// the longest rows, kWideSplitBlockThreads (one an SM): bounds of the larger block keep the same 128
/// registers a thread that two of the smaller ones have (the instances compile as before).
template <bool kSplit, int ITEMS, int VEC>
constexpr int dx_kernel_max_threads() { return kSplit ? kWideSplitBlockThreads : row_kernel_max_threads(ITEMS, VEC); }
template <bool kSplit, int ITEMS, int VEC>
constexpr int dx_kernel_min_blocks() { return kSplit ? 1 : row_kernel_min_blocks(ITEMS, VEC); }
static_assert(kWideSplitBlockThreads * 1 == kSplitBlockThreads * row_kernel_min_blocks(kSplitItems, /*vec: 16-bit, 16 bytes*/ 8),
              "the wide split block keeps the split instances' register budget");

template <typename T, typename W, bool kRms, bool kStaged, bool kSplit, int ITEMS, int VEC>
__global__ void __launch_bounds__(dx_kernel_max_threads<kSplit, ITEMS, VEC>(), dx_kernel_min_blocks<kSplit, ITEMS, VEC>())
    backward_dx_kernel(const BackwardParams<T, W> p) {
  __shared__ float scratch_buffers[GroupScratch::kFloats];
  GroupScratch scratch(scratch_buffers);
  allow_dependent_launch();  // the gamma/beta kernel (reads only x and dy) may run beside this one
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);
  // A split row (kSplit): this block owns walk.cols columns from walk.col0 of its cluster's rows.
  const RowWalk walk = RowWalk::of_this_block<kSplit>(p.cols, p.split, p.slice_cols);
  const std::int64_t row_step = walk.units * p.rows_per_block;
  const std::int64_t first = walk.unit * p.rows_per_block;

  if constexpr (ITEMS > 0) {
    dx_cached_rows<kStaged, kSplit, kRms, ITEMS, VEC>(p, g, walk, scratch);
  } else {
    // Streaming: pass 1 row sums, pass 2 dx (the second read of x and dy mostly hits L2).
    static_assert(!kSplit, "split rows are register-cached");
    for (std::int64_t base = first; base < p.rows; base += row_step) {
      const std::int64_t r = base + g.index;
      const bool active = r < p.rows;
      float mean = 0.f, rstd = 0.f, sum_g = 0.f, sum_g_xhat = 0.f;
      const T* x_row = p.x.row(active ? r : 0);
      const T* dy_row = p.dy.row(active ? r : 0);
      StreamBuffer<T, VEC> xs, dys;
      auto load = [&](int u, int col) {
        xs.load(u, x_row + col);
        dys.load(u, dy_row + col);
      };
      auto weights = [&](int col, float (&w)[VEC]) {
        if (p.weight != nullptr) {
          load_weight_vec<W, VEC>(p.weight + col, w);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) w[i] = 1.f;
        }
      };
      if (active) {
        row_stats<kRms>(p.mean, p.rstd, r, mean, rstd);
        stream_row<VEC>(g, p.cols, load, [&](int u, int col) {
          float w[VEC];
          weights(col, w);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float gv = __fmul_rn(dys.at(u, i), w[i]);
            sum_g += gv;
            sum_g_xhat += gv * ((xs.at(u, i) - mean) * rstd);  // g * xhat: no (g * (x - mean)) to overflow
          }
        });
      }
      row_group_sum2(sum_g, sum_g_xhat, g.threads, scratch);
      if (active) {
        const DxOfRow<kRms> dx_of(rstd, sum_g, sum_g_xhat, p.inv_cols);
        T* dx_row = p.dx.row(r);
        stream_row<VEC>(g, p.cols, load, [&](int u, int col) {
          float w[VEC], dx[VEC];
          weights(col, w);
#pragma unroll
          for (int i = 0; i < VEC; ++i)
            dx[i] = dx_of(__fmul_rn(dys.at(u, i), w[i]), (xs.at(u, i) - mean) * rstd);
          store_vec<T, VEC>(dx_row + col, dx);
        });
      }
    }
  }
}

}  // namespace

template <typename T, typename W>
BackwardParams<T, W> make_backward_params(const BackwardProblem& p, const Plan& plan) {
  return {{static_cast<const T*>(p.dy.data), p.dy.stride()},
          {static_cast<const T*>(p.x.data), p.x.stride()},
          {p.dx ? static_cast<T*>(p.dx->data) : nullptr, p.dx ? p.dx->stride() : 0},
          p.mean ? static_cast<const float*>(p.mean->data) : nullptr,
          static_cast<const float*>(p.rstd.data),
          p.weight ? static_cast<const W*>(p.weight->data) : nullptr,
          p.dweight ? static_cast<W*>(p.dweight->data) : nullptr,
          p.dbias ? static_cast<W*>(p.dbias->data) : nullptr,
          p.rows(),
          int(p.cols()),
          1.f / float(p.cols()),
          plan.row.threads_per_row,
          plan.row.rows_per_block,
          plan.row.stages,
          plan.row.split,
          plan.row.slice_cols};
}

template <typename T, typename W>
void launch_backward_dx(const BackwardProblem& p, const Plan& plan, cudaStream_t stream) {
  if (p.rows() == 0 || !p.dx) return;
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const dim3 grid(unsigned(plan.row.blocks)), block(unsigned(plan.row.block_threads()));
  const std::size_t smem = std::size_t(plan.row.smem_bytes);
  dispatch_row_shape<T, kMaxRowItems, true, kSplitItems, 0, kMaxScalarRowItems>(plan.row, [&](auto items, auto vec, auto staged, auto split) {
    void (*kernel)(BackwardParams<T, W>) = p.rms ? backward_dx_kernel<T, W, true, staged(), split(), items(), vec()>
                                                 : backward_dx_kernel<T, W, false, staged(), split(), items(), vec()>;
    allow_dynamic_smem(kernel, plan.row.smem_bytes, "backward_dx_kernel shared memory");
    const dim3 blocks = split() ? dim3(cluster_grid(kernel, grid.x, block, smem, plan.row.split)) : grid;
    launch_kernel(kernel, blocks, block, smem, stream, LaunchMode{false, split() ? plan.row.split : 1},
                  "backward_dx_kernel launch", params);
  });
  check_launch("backward_dx_kernel");
}

#define NORMKIT_INSTANTIATE(T, W)                                                                        \
  template BackwardParams<T, W> make_backward_params<T, W>(const BackwardProblem&, const Plan&);         \
  template void launch_backward_dx<T, W>(const BackwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
