// Strategy "tiled" (the seed's): one block per column strip (block_x lanes of vec columns each: a warp,
// or 16 / 8 lanes where the planner narrows scalar strips, PlannerTable::tiled_min_strip_lanes) walks all
// M rows with block_y thread rows, rows_per_thread of them unrolled per step (the band:
// Tile-8/64/128/256 chosen by M in the planner), then reduces its thread rows in shared memory and
// writes the result directly. On vectorised rows from a few hundred rows on the strips are tall (1..16
// lanes of 16 bytes, 512 / lanes thread rows: ColumnShape::tall_strips, PlannerTable::tiled_tall_max_strips),
// which gives N = 768..4096 some 48-64 strips and a block iteration hundreds of rows.
// Small problems with dX (Plan::one_launch) run the dX rows and the
// column strips as the blocks of one launch (dx_and_tiled_kernel): the two only read x and dy, so
// they need no order, and the second launch was ~0.7 us of a ~2.6 us call at 32 x 512.
#include "cuda/column_reduce.cuh"

namespace normkit::cuda {
namespace {

/// One column strip of the tiled strategy (strip index `strip_index`), summed over all M rows by a
/// block of bx lanes x by thread rows (bx: a warp, or fewer where the planner narrows the strips,
/// PlannerTable::tiled_min_strip_lanes, or makes them tall: kTall), this thread (tx, ty): writes dgamma /
/// dbeta of the strip's columns.
template <typename T, typename W, bool kRms, int RPT, int VEC, bool kTall>
__device__ __forceinline__ void tiled_strip(const BackwardParams<T, W>& p, int strip_index, int tx, int ty, int bx,
                                            int by, float* smem) {
  const int strip = strip_index * bx * VEC;
  const int col = strip + tx * VEC;
  float dgamma[VEC], dbeta[VEC];
  accumulate_columns<T, W, kRms, RPT, VEC>(p, col, 0, p.rows, ty, by, dgamma, dbeta);
  sum_over_thread_rows<VEC, kTall>(dgamma, dbeta, p.dweight != nullptr, p.dbias != nullptr, smem, tx, ty, bx, by,
                                   [&](int which, int c, float total) {
                                     if (strip + c < p.cols) (which == 0 ? p.dweight : p.dbias)[strip + c] = from_float<W>(total);
                                   });
}

/// Blocks of at most kTiledLongUnrollMaxThreads threads for the long unrolls (scalar 16 rows, tall
/// vectorised strips' 4 and 8): their loads need more than the 64 registers of a 1024-thread block.
template <int RPT, int VEC>
constexpr int tiled_max_threads() {
  return RPT > 8 || (VEC > 1 && RPT > 2) ? kTiledLongUnrollMaxThreads : 1024;
}

template <typename T, typename W, bool kRms, int RPT, int VEC, bool kTall>
__global__ void __launch_bounds__(tiled_max_threads<RPT, VEC>()) gamma_beta_tiled_kernel(const BackwardParams<T, W> p) {
  extern __shared__ float smem[];  // 2 * VEC * blockDim.x * blockDim.y
  allow_dependent_launch();
  tiled_strip<T, W, kRms, RPT, VEC, kTall>(p, int(blockIdx.x), int(threadIdx.x), int(threadIdx.y), int(blockDim.x),
                                           int(blockDim.y), smem);
  wait_for_previous_kernel();  // launched next to dX: complete only after it (see common.cuh)
}

/// Plan::one_launch: dx_blocks blocks compute dX (the dX kernel's unstaged register-cached rows,
/// RowShape plan.row laid out over this block size), the rest are the tiled column strips (RPT rows
/// per thread: scalar strips up to 16, tall vectorised ones, COL_VEC > 1, up to 8, in these blocks of
/// at most kOneLaunchMaxThreads = kTiledLongUnrollMaxThreads) in 1-D blocks of strip_lanes x by
/// threads. Scalar strips come after the dX blocks; tall strips walk hundreds of rows a block where a
/// dX block walks a few, so they come first (strips_first) and the dX blocks fill the SMs around
/// them. The strips add in the tiled kernel's order (dgamma / dbeta: the same bits as the two
/// launches); dX rows follow this launch's row layout, which may sum a row in another order than the
/// dX kernel's layout (tested against the reference).
template <typename T, typename W, bool kRms, int ITEMS, int VEC, int RPT, int COL_VEC>
__global__ void __launch_bounds__(kOneLaunchMaxThreads)
    dx_and_tiled_kernel(const BackwardParams<T, W> p, int dx_blocks, int strip_lanes, int strips_first) {
  extern __shared__ float smem[];  // the strips' 2 * COL_VEC * blockDim.x floats
  const int strip_blocks = int(gridDim.x) - dx_blocks;
  const int dx_block = strips_first ? int(blockIdx.x) - strip_blocks : int(blockIdx.x);
  if (dx_block >= 0 && dx_block < dx_blocks) {
    __shared__ float scratch_buffers[GroupScratch::kFloats];
    GroupScratch scratch(scratch_buffers);
    const RowWalk walk{std::int64_t(dx_block), std::int64_t(dx_blocks), 0, 0, p.cols};
    dx_cached_rows<false, false, kRms, ITEMS, VEC>(p, RowGroup::of_this_thread(p.threads_per_row), walk, scratch);
    return;
  }
  const int strip = strips_first ? int(blockIdx.x) : int(blockIdx.x) - dx_blocks;
  const int tid = int(threadIdx.x), lane_shift = __ffs(strip_lanes) - 1;  // a power of two: shifts, no division
  // (vectorised strips in one launch are tall ones only: launch_dx_and_tiled)
  tiled_strip<T, W, kRms, RPT, COL_VEC, (COL_VEC > 1)>(p, strip, tid & (strip_lanes - 1), tid >> lane_shift, strip_lanes,
                                                       int(blockDim.x) >> lane_shift, smem);
}

}  // namespace

template <typename T, typename W>
void launch_gamma_beta_tiled(const BackwardProblem& p, const Plan& plan, bool programmatic, cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const ColumnShape& c = plan.columns;
  const dim3 grid(unsigned(c.col_blocks)), block(unsigned(c.block_x), unsigned(c.block_y));
  const std::size_t smem = column_block_smem(c);
  auto launch = [&](auto rpt, auto vec, auto tall) {
    void (*kernel)(BackwardParams<T, W>) = p.rms ? gamma_beta_tiled_kernel<T, W, true, rpt(), vec(), tall()>
                                                 : gamma_beta_tiled_kernel<T, W, false, rpt(), vec(), tall()>;
    allow_dynamic_smem(kernel, std::int64_t(smem), "gamma_beta_tiled_kernel shared memory");  // 64 KB at 32 x 32 x vec8
    launch_kernel(kernel, grid, block, smem, stream, LaunchMode{programmatic}, "gamma_beta_tiled_kernel launch", params);
  };
  constexpr int kVec = int(16 / sizeof(T));
  const auto fail = [&] {
    throw CudaError("normkit: internal error: tiled has no instance for rows_per_thread = " +
                    std::to_string(c.rows_per_thread) + ", vec = " + std::to_string(c.vec));
  };
  using Scalar = IntConst<1>;
  using Vector = IntConst<kVec>;
  using Tall = std::true_type;
  using NotTall = std::false_type;
  if (c.vec == 1) {
    switch (c.rows_per_thread) {
      case 1: launch(IntConst<1>{}, Scalar{}, NotTall{}); break;
      case 4: launch(IntConst<4>{}, Scalar{}, NotTall{}); break;
      case 8: launch(IntConst<8>{}, Scalar{}, NotTall{}); break;
      case 16:
        if (c.block_x * c.block_y > kTiledLongUnrollMaxThreads) fail();
        launch(IntConst<16>{}, Scalar{}, NotTall{});
        break;
      default: fail();
    }
  } else if (c.vec == kVec && c.tall_strips()) {
    if (c.block_x * c.block_y > kTiledLongUnrollMaxThreads) fail();  // (tiled_max_threads)
    switch (c.rows_per_thread) {
      case 1: launch(IntConst<1>{}, Vector{}, Tall{}); break;
      case 2: launch(IntConst<2>{}, Vector{}, Tall{}); break;
      case 4: launch(IntConst<4>{}, Vector{}, Tall{}); break;
      case 8: launch(IntConst<8>{}, Vector{}, Tall{}); break;
      default: fail();
    }
  } else if (c.vec == kVec) {  // warp-wide vectorised strips: up to 2 rows a thread
    switch (c.rows_per_thread) {
      case 1: launch(IntConst<1>{}, Vector{}, NotTall{}); break;
      case 2: launch(IntConst<2>{}, Vector{}, NotTall{}); break;
      default: fail();
    }
  } else {
    fail();
  }
  check_launch("gamma_beta_tiled_kernel");
}

template <typename T, typename W>
void launch_dx_and_tiled(const BackwardProblem& p, const Plan& plan, cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  const ColumnShape& c = plan.columns;
  const unsigned threads = unsigned(c.block_x * c.block_y);
  const dim3 grid(unsigned(plan.row.blocks + c.col_blocks));
  const std::size_t smem = column_block_smem(c);
  constexpr int kVec = int(16 / sizeof(T));
  const auto fail = [&] {
    throw CudaError("normkit: internal error: dx_and_tiled_kernel has no instance for items = " +
                    std::to_string(plan.row.items) + ", vec = " + std::to_string(plan.row.vec) +
                    ", rows_per_thread = " + std::to_string(c.rows_per_thread) + ", column vec = " + std::to_string(c.vec));
  };
  // The planner's one-launch rule (planner.cpp, one_launch_shape) plans only these instances.
  const bool tall = c.tall_strips();
  if (plan.row.vec != kVec || (c.vec != 1 && !(tall && c.vec == kVec)) || plan.row.stages != 0 || plan.row.split > 1)
    fail();
  auto launch = [&](auto items, auto rpt, auto col_vec) {
    void (*kernel)(BackwardParams<T, W>, int, int, int) =
        p.rms ? dx_and_tiled_kernel<T, W, true, items(), kVec, rpt(), col_vec()>
              : dx_and_tiled_kernel<T, W, false, items(), kVec, rpt(), col_vec()>;
    launch_kernel(kernel, grid, dim3(threads), smem, stream, LaunchMode{false}, "dx_and_tiled_kernel launch", params,
                  int(plan.row.blocks), c.block_x, tall ? 1 : 0);
  };
  auto with_items = [&](auto items) {
    if (tall) {
      switch (c.rows_per_thread) {
        case 1: launch(items, IntConst<1>{}, IntConst<kVec>{}); break;
        case 2: launch(items, IntConst<2>{}, IntConst<kVec>{}); break;
        case 4: launch(items, IntConst<4>{}, IntConst<kVec>{}); break;
        case 8: launch(items, IntConst<8>{}, IntConst<kVec>{}); break;
        default: fail();
      }
      return;
    }
    switch (c.rows_per_thread) {
      case 1: launch(items, IntConst<1>{}, IntConst<1>{}); break;
      case 4: launch(items, IntConst<4>{}, IntConst<1>{}); break;
      case 8: launch(items, IntConst<8>{}, IntConst<1>{}); break;
      case 16: launch(items, IntConst<16>{}, IntConst<1>{}); break;
      default: fail();
    }
  };
  switch (plan.row.items) {
    case 1: with_items(IntConst<1>{}); break;
    case 2: with_items(IntConst<2>{}); break;
    default: fail();
  }
  check_launch("dx_and_tiled_kernel");
}

#define NORMKIT_INSTANTIATE(T, W)                                                                          \
  template void launch_gamma_beta_tiled<T, W>(const BackwardProblem&, const Plan&, bool, cudaStream_t); \
  template void launch_dx_and_tiled<T, W>(const BackwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
