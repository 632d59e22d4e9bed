// Column-strip building blocks of the gamma/beta strategies: a thread owns VEC columns and sums
// dy * xhat (dgamma) and dy (dbeta) over a range of rows; the thread rows of a block are then
// combined in shared memory in a fixed order (bitwise repeatable: no atomics anywhere).
#pragma once

#include "cuda/backward_row.cuh"

namespace normkit::cuda {

/// Sums over rows [row_begin, row_end) for the VEC consecutive columns col, col + 1, ... of this
/// thread: thread row `ty` of `block_y` takes rows ty, ty + block_y, ... with RPT of them unrolled
/// per step. A step issues all its loads before it adds anything: with the load and the add of each
/// row behind its own bounds branch, the RPT rows of a step were RPT memory round trips in series
/// (SASS at 2e5db88), the whole latency of a small gamma/beta launch. Rows past the end load as
/// dy = x = mean = rstd = 0 and add exactly +0, which leaves every sum's bits as they were (a sum that
/// starts at +0 is never -0). VEC > 1 reads 16 bytes per row and tensor, which
/// needs the planner's vector rule (16-byte aligned rows, N % VEC == 0): a warp then reads 512
/// contiguous bytes of a row where one column per lane reads 64 (bf16).
template <typename T, typename W, bool kRms, int RPT, int VEC>
__device__ __forceinline__ void accumulate_columns(const BackwardParams<T, W>& p, int col, std::int64_t row_begin,
                                                   std::int64_t row_end, int ty, int block_y, float (&dgamma)[VEC],
                                                   float (&dbeta)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) dgamma[i] = dbeta[i] = 0.f;
  if (col >= p.cols) return;
  for (std::int64_t r0 = row_begin + ty; r0 < row_end; r0 += std::int64_t(block_y) * RPT) {
    Pack<T, VEC> dy[RPT], x[RPT];
    float mean[RPT], rstd[RPT];
#pragma unroll
    for (int j = 0; j < RPT; ++j) {
      const std::int64_t r = r0 + std::int64_t(j) * block_y;
      if (r < row_end) {
        dy[j] = Pack<T, VEC>::load(p.dy.row(r) + col);
        x[j] = Pack<T, VEC>::load(p.x.row(r) + col);
        row_stats<kRms>(p.mean, p.rstd, r, mean[j], rstd[j]);
      } else {
        dy[j].zero();
        x[j].zero();
        mean[j] = rstd[j] = 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < RPT; ++j)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        dgamma[i] += dy[j].get(i) * (x[j].get(i) - mean[j]) * rstd[j];
        dbeta[i] += dy[j].get(i);
      }
  }
}

/// Sums dgamma[i] and dbeta[i] over threadIdx.y for each of the strip's blockDim.x * VEC columns
/// (lane tx holds columns tx * VEC + i) and calls emit(which, column_in_strip, total) once per
/// column of each array asked for (which = 0: dgamma, 1: dbeta). Both arrays go through shared
/// memory together, one barrier pair for both (two, one array after the other, were half the
/// fixed cost of a small launch); the sums are spread over the block's threads, one column each:
/// a single thread row summing all VEC columns serially was slower than the simple kernel at M = 7
/// (sweep at aa03ba5). Each sum adds the thread rows in order y = 0, 1, ... (same bits every run),
/// its shared-memory loads unrolled so that they are in flight together. `smem` holds 2 * VEC *
/// bx * by floats; every thread of the block must call it. The block is bx lanes (scalar strips 8, 16 or 32;
/// vectorised ones 32, or 1..16 when tall, PlannerTable::tiled_tall_max_strips) x by thread rows, this
/// thread (tx, ty) (a 2-D block, or a 1-D one laid out so: dx_and_tiled_kernel); bx a power of two.
/// A thread row's VEC * bx sums lie in shared memory in column order (a thread's VEC contiguous,
/// stored 16 bytes at a time), and thread s of the block sums column s: consecutive threads read
/// consecutive words and emit consecutive columns, so a warp's stores of dgamma / dbeta (tiled) or of
/// the fp32 partials (two-pass) are contiguous. Thread s summed column (s % bx) * VEC + s / bx
/// before (docs/NOTES.md entry 58): with vectorised strips a warp's 32 stores then hit 32 sectors
/// (fp32 partials) or 16 (16-bit outputs) where 4 or 2 hold the data. VEC = 8: a thread's two
/// 16-byte halves trade places in lanes with bit 2 set (slot_of_column), so that each 16-byte store
/// of 8 consecutive lanes covers the 32 banks once (32-byte strides a lane took two wavefronts each,
/// and the bf16 strips measured 1-6 % slower for it). kTall: the block is tall strips (fewer lanes than a
/// warp, ColumnShape::tall_strips), folded first (below); a template flag, not a test of bx, because the
/// fold's code cost the warp-wide strips' short walks 5-12 % (docs/NOTES.md entry 95).
template <int VEC, bool kTall, typename Emit>
__device__ __forceinline__ void sum_over_thread_rows(const float (&dgamma)[VEC], const float (&dbeta)[VEC], bool want_dgamma,
                                                     bool want_dbeta, float* smem, int tx, int ty, int bx, int by,
                                                     Emit&& emit) {
  static_assert(VEC == 1 || VEC == 4 || VEC == 8, "column strips of 1 or 16 bytes a lane");
  static_assert(!kTall || VEC > 1, "tall strips are 16-byte vectorised");
  const int row_columns = bx * VEC, plane = row_columns * by;
  // Tall vectorised strips (bx < a warp): a warp holds kWarpSize / bx thread rows of the same columns,
  // folded here by a butterfly of shuffles (every lane of a column ends with the same bits), so that
  // one thread row a warp goes through shared memory and the column sums below add by * bx / kWarpSize
  // rows instead of by (512 serial adds a column at one lane). bx is a power of two: the thread rows a
  // warp are 2^warp_row_shift. Scalar and warp-wide strips have none of this code.
  const int warp_row_shift = kTall ? kWarpSizeLog2 - (__ffs(bx) - 1) : 0;
  float g[VEC], b[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) g[i] = dgamma[i], b[i] = dbeta[i];
  if constexpr (kTall) {
    for (int offset = bx; offset < kWarpSize; offset *= 2)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        g[i] += __shfl_xor_sync(0xffffffffu, g[i], offset);
        b[i] += __shfl_xor_sync(0xffffffffu, b[i], offset);
      }
  }
  const int smem_rows = by >> warp_row_shift;
  __syncthreads();  // smem may still be read by a previous call
  if ((ty & ((1 << warp_row_shift) - 1)) == 0) {
    float* const mine = smem + ((ty >> warp_row_shift) * bx + tx) * VEC;
    if constexpr (VEC == 1) {
      mine[0] = g[0];
      mine[plane] = b[0];
    } else {
      // half h of this lane's sums goes to 16-byte slot h ^ swap (slot_of_column)
      const int swap = VEC == 8 ? (tx >> 2) & 1 : 0;
#pragma unroll
      for (int h = 0; h < VEC / 4; ++h) {
        float* const slot = mine + 4 * (h ^ swap);
        *reinterpret_cast<float4*>(slot) = make_float4(g[4 * h], g[4 * h + 1], g[4 * h + 2], g[4 * h + 3]);
        *reinterpret_cast<float4*>(slot + plane) = make_float4(b[4 * h], b[4 * h + 1], b[4 * h + 2], b[4 * h + 3]);
      }
    }
  }
  __syncthreads();
  for (int s = ty * bx + tx; s < 2 * row_columns; s += bx * by) {
    const int which = s < row_columns ? 0 : 1;
    if (which == 0 ? !want_dgamma : !want_dbeta) continue;
    const int c = s - which * row_columns;
    // column c = lane * 8 + i sits at lane * 8 + (i ^ 4) where bit 2 of the lane (bit 5 of c) is set
    const int slot_of_column = VEC == 8 ? c ^ (((c >> 5) & 1) << 2) : c;
    const float* column = smem + which * plane + slot_of_column;
    float total = 0.f;
#pragma unroll 8
    for (int y = 0; y < smem_rows; ++y) total += column[y * row_columns];  // fixed order
    emit(which, c, total);
  }
}

/// Dynamic shared memory of a column-strip block (sum_over_thread_rows).
inline std::size_t column_block_smem(const ColumnShape& c) {
  return 2 * sizeof(float) * std::size_t(c.block_x) * std::size_t(c.block_y) * std::size_t(c.vec);
}

/// The partial reduce shared by two-pass (pass 2) and the fused backward's final step: partials
/// hold `arrays` fp32 arrays of [partial_rows, cols]; out[a] receives the column sums of array a.
/// A work item is one 32-column strip of one array (item = a * strips + strip): blocks take items
/// item_begin, item_begin + item_step, ...; within a block, thread (tx, ty) of a 32 x block_y layout
/// sums partial rows ty, ty + block_y, ... of column strip * 32 + tx, kReduceRowsPerThread loads in
/// flight at a time (the planner sizes block_y so that one batch covers them), then thread row 0
/// adds the block_y sums in order. Items per array instead of a loop over the arrays in each block,
/// and the batched loads: at 8192 x 768 the reduce took 11.6 us under ncu with 24 blocks walking 8
/// rows and 2 arrays each, one load round trip after another (877b21c).
template <typename W>
__device__ __forceinline__ void reduce_partials(const float* partials, std::int64_t partial_rows, int cols,
                                                int arrays, W* const (&out)[2], std::int64_t item_begin,
                                                std::int64_t item_step, int tx, int ty, int block_y,
                                                float* smem /* 32 * block_y */) {
  const std::int64_t strips = (cols + kWarpSize - 1) / kWarpSize;
  for (std::int64_t item = item_begin; item < strips * arrays; item += item_step) {
    const int a = int(item / strips);
    const std::int64_t col = (item - a * strips) * kWarpSize + tx;
    const float* base = partials + std::int64_t(a) * partial_rows * cols;
    float sum = 0.f;
    if (col < cols) {
      for (std::int64_t r0 = ty; r0 < partial_rows; r0 += std::int64_t(block_y) * kReduceRowsPerThread) {
        float v[kReduceRowsPerThread];
#pragma unroll
        for (int u = 0; u < kReduceRowsPerThread; ++u) {
          const std::int64_t r = r0 + std::int64_t(u) * block_y;
          v[u] = r < partial_rows ? base[r * cols + col] : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kReduceRowsPerThread; ++u) sum += v[u];  // rows in order; past the end: + 0
      }
    }
    __syncthreads();
    smem[ty * kWarpSize + tx] = sum;
    __syncthreads();
    if (ty == 0 && col < cols) {
      float total = 0.f;
#pragma unroll 8
      for (int y = 0; y < block_y; ++y) total += smem[y * kWarpSize + tx];
      out[a][col] = from_float<W>(total);
    }
  }
}

/// The outputs in partial-array order: dweight first (when requested), then dbias.
template <typename T, typename W>
__host__ __device__ __forceinline__ int gamma_beta_outputs(const BackwardParams<T, W>& p, W* (&out)[2]) {
  int n = 0;
  out[0] = out[1] = nullptr;
  if (p.dweight != nullptr) out[n++] = p.dweight;
  if (p.dbias != nullptr) out[n++] = p.dbias;
  return n;
}

/// Pass 2 of two-pass, and the fused backward's final step when it runs as a second launch.
/// Block: 32 x reduce_block_y threads; grid: any number of blocks (they stride over the items).
template <typename T, typename W>
__global__ void __launch_bounds__(1024) reduce_partials_kernel(const BackwardParams<T, W> p, const float* partials,
                                                               std::int64_t partial_rows) {
  extern __shared__ float smem[];
  wait_for_previous_kernel();  // the partials are the previous kernel's output
  W* out[2];
  const int arrays = gamma_beta_outputs(p, out);
  reduce_partials<W>(partials, partial_rows, p.cols, arrays, out, blockIdx.x, gridDim.x, int(threadIdx.x),
                     int(threadIdx.y), int(blockDim.y), smem);
}

/// Launches the partial reduce (two-pass pass 2, fused second launch): one block per 32-column strip
/// of N and array, columns.reduce_block_y thread rows each; programmatically when the plan says so
/// (it waits for the partials before reading them).
template <typename T, typename W>
void launch_reduce_partials(const BackwardParams<T, W>& params, const float* partials, std::int64_t partial_rows,
                            const ColumnShape& columns, bool programmatic, cudaStream_t stream) {
  const dim3 block(unsigned(kWarpSize), unsigned(columns.reduce_block_y));
  const std::size_t smem = sizeof(float) * kWarpSize * std::size_t(columns.reduce_block_y);
  W* out[2];
  const int arrays = gamma_beta_outputs(params, out);
  const unsigned items = unsigned((std::int64_t(params.cols) + kWarpSize - 1) / kWarpSize * arrays);
  if (items == 0) return;  // nothing asked for, or N = 0
  launch_kernel(reduce_partials_kernel<T, W>, dim3(items), block, smem, stream, LaunchMode{programmatic},
                "reduce_partials_kernel launch", params, partials, partial_rows);
  check_launch("reduce_partials_kernel");
}

}  // namespace normkit::cuda
