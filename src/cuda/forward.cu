// Forward LayerNorm / RMSNorm: one row group per row, the row cached in registers (ITEMS > 0) and
// read once, or streamed twice for rows too long to cache (ITEMS == 0); rows too long for one block
// split over a thread-block cluster where the device has them (forward_split_kernel), read once.
//
// Variance: with the row in registers it is the exact two-pass one, as the float64 reference takes
// it: the row's mean first (one group sum), then the sum of squared deviations from it (a second
// group sum). Two plain sums cost less than one round of merging (count, mean, M2) triples
// (Chan et al.), whose every butterfly step needs a division: measured in docs/NOTES.md entry 18.
// Streamed rows use sums shifted by the row's first element, which keeps the cancellation of
// E[x^2] - E[x]^2 small for data with a large common offset; split rows shift each block's slice by
// its own first element and merge the slices' moments (forward_split_kernel).
#include "cuda/kernels.h"
#include "cuda/row_layout.cuh"

#include <type_traits>

namespace normkit::cuda {
namespace {

template <typename T, typename W>
struct ForwardParams {
  RowPtr<const T> x;
  RowPtr<T> y;
  const W* weight;  // nullptr = 1
  const W* bias;    // nullptr = 0
  float* mean;      // nullptr for RMSNorm
  float* rstd;
  std::int64_t rows;
  int cols;
  float inv_cols;  // 1 / N, rounded once on the host (a division is a call in the kernel's prologue)
  float eps;
  int threads_per_row;
  int rows_per_block;
  int stages;      // RowShape::stages: 0 = rows loaded straight into registers
  int split;       // RowShape::split: blocks (a cluster) per row
  int slice_cols;  // RowShape::slice_cols: columns per block of a split row
};

/// The bias a forward kernel reads: none for RMSNorm (ForwardProblem never has one). A null known at
/// compile time lets the compiler drop the bias's loads, conversions and fallback moves, which a test
/// of the pointer at run time leaves in every slot of every row (SASS: the RMSNorm split walk's loop
/// 1077 -> 840 instructions, bf16 4 x 8).
template <bool kRms, typename T, typename W>
__device__ __forceinline__ const W* forward_bias(const ForwardParams<T, W>& p) {
  return kRms ? nullptr : p.bias;
}

/// The forward's row sums take the block-barrier form (row_group_sum says why): the staged and wide
/// walks throughout, and the split and packed kernels.
constexpr bool kForwardGroupLocal = false;
/// The cached walk's row sums in the unstaged walks of up to 2 vectors a thread, which serve small
/// grids, where a row's latency is the kernel's time: groups of 2-4 warps take the group-local form
/// (their warp sums read directly, no second butterfly; 96 x 768 fp16 LN 2.34 -> 2.28 us, 256 x 1024
/// 2.59 -> 2.49, graph, fcf7b5d); wider groups keep the block-barrier form (64 x 4096 LayerNorm, 8
/// warps a row: 2.75 us in the group-local form at fcf7b5d, 2.57 in the block-barrier one at 982edf5).
template <bool kStaged, int ITEMS>
constexpr bool forward_group_local() {
  return !kStaged && ITEMS > 0 && ITEMS <= 2;
}

/// The unstaged cached walk's row loop: visit(base) for base = first, first + step, ... while base <
/// rows, tested after each row and not before the first. Planned grids give every block a row
/// (blocks <= ceil(M / rows_per_block)); a test before the first row put an exit branch on two kernel
/// parameters (M, rows_per_block) ahead of every other parameter read and every load, so that the
/// reads of the weight pointers and the grid size each waited for a constant-cache miss of their own
/// (ncu at 982edf5, 96 x 768 fp16 forward, 128 threads a row: ~200 of the kernel's 1811 warp stall
/// samples on those reads, where Liger's forward of the same shape spends its misses at once).
/// Measured (f16, graph, b769bc9 against 982edf5): RMSNorm forward 2-4 % faster at 32 x 512 - 64 x
/// 4096, LayerNorm -2 .. +2 %. The backward's unstaged walk (walk_backward_rows) keeps its loop: the
/// same change there measured within 1 % of it, and made ptxas spill in a split dX instance. A
/// block past the last row (none in planned grids) visits one iteration in which every group is
/// inactive, and inactive groups read no row and store nothing (the walk's contract).
template <typename Visit>
__device__ __forceinline__ void first_row_walk(std::int64_t first, std::int64_t rows, std::int64_t step, Visit&& visit) {
  std::int64_t base = first;
  do {
    visit(base);
    base += step;
  } while (base < rows);
}

/// The staged copies of a forward walk: this lane's slots of the columns [col0, col0 + cols) of rows
/// first, first + step, ... in iteration order, with a running row pointer instead of a 64-bit
/// multiply per row.
/// kFilled: RowStages' (stages zero-filled past `cols` and past M, read without predicates).
template <typename T, int ITEMS, int VEC, bool kFilled = false>
struct StagedForwardRows {
  RowStages<T, ITEMS, VEC, 1, kFilled> stages;
  std::int64_t rows, copy_row, step;
  const T* x_row;
  std::int64_t x_step;
  int cols;
  __device__ __forceinline__ StagedForwardRows(const RowPtr<const T>& x, int depth, std::int64_t rows_,
                                               std::int64_t first, std::int64_t step_, int col0, int cols_)
      : stages(depth), rows(rows_), copy_row(first), step(step_), x_row(x.data + col0 + first * x.stride),
        x_step(step_ * x.stride), cols(cols_) {}
  /// Starts the copies of the next iteration into stage s.
  __device__ __forceinline__ void copy(int s, const RowGroup& g) {
    stages.copy_row(s, 0, x_row, g, cols, copy_row < rows);
    copy_row += step;
    x_row += x_step;
  }
};

template <typename T, typename W, bool kRms, bool kStaged, int ITEMS, int VEC>
__global__ void __launch_bounds__(forward_kernel_max_threads(kRms, ITEMS, VEC), row_kernel_min_blocks(ITEMS, VEC)) forward_kernel(const ForwardParams<T, W> p) {
  __shared__ float scratch_buffers[GroupScratch::kFloats];
  GroupScratch scratch(scratch_buffers);
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);
  const RowWalk walk = RowWalk::of_this_block<false>(p.cols, 1, p.cols);
  const std::int64_t row_step = walk.units * p.rows_per_block;
  const float inv_n = p.inv_cols;
  const std::int64_t first = walk.unit * p.rows_per_block;
  constexpr bool kGroupLocal = forward_group_local<kStaged, ITEMS>();

  if constexpr (ITEMS > 0) {
    // A lane owns the same columns in every row: small fragments of staged walks keep weight and bias
    // in registers for the whole walk; the others load them with each row (keep_weights).
    constexpr bool kKeepWeights = keep_weights<W, ITEMS, VEC, kStaged>();
    WeightFragment<W, ITEMS, VEC> w, b;
    if constexpr (kKeepWeights) {
      w.load(p.weight, g, p.cols, 1.f);
      b.load(forward_bias<kRms>(p), g, p.cols, 0.f);
    }
    // The lane's valid slots are the same in every row: counted once.
    const int valid_vectors = lane_vectors<ITEMS, VEC>(g, p.cols);
    // `direct` (a std::bool_constant): the row sums' group-local form, see the unstaged walk below.
    auto body = [&](auto direct, std::int64_t r, bool active, const RowFragment<T, ITEMS, VEC>& xv) {
      if constexpr (!kKeepWeights) {  // issued next to the row's loads, used after the row sums
        w.load(p.weight, g, p.cols, 1.f);
        b.load(forward_bias<kRms>(p), g, p.cols, 0.f);
      }
      float x[ITEMS][VEC];  // converted once; padding slots (and inactive groups) hold 0 (LN: then x - mean)
#pragma unroll
      for (int k = 0; k < ITEMS; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) x[k][i] = xv.at(k, i);
      const auto row_sum = [&](float v) {
        return row_group_sum1<decltype(direct)::value || kForwardGroupLocal>(v, g.threads, scratch);
      };
      float mean = 0.f, rstd;
      if constexpr (kRms) {
        const float sq = row_sum(lane_sum(x, [](float v) { return v * v; }));
        rstd = rsqrtf(sq * inv_n + p.eps);
      } else {
        // padding slots hold 0: the sum needs no mask; the squared deviations do (0 - mean != 0)
        mean = row_mean(row_sum(lane_sum(x, [](float v) { return v; })), p.cols, inv_n);
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
#pragma unroll
          for (int i = 0; i < VEC; ++i) x[k][i] -= mean;  // from here on x holds x - mean
        const float lane_m2 = lane_sum(x, [](float d) { return d * d; }, valid_vectors);
        rstd = rsqrtf(row_sum(lane_m2) * inv_n + p.eps);
      }

      T* y_row = p.y.row(active ? r : 0);
#pragma unroll
      for (int k = 0; k < ITEMS; ++k)
        store_slot<T, VEC>(y_row, g, k, p.cols, active,
                           [&](int i) { return x[k][i] * rstd * w.at(k, i) + b.at(k, i); });
      if (active && g.lane == 0) {
        if (p.mean != nullptr) p.mean[r] = mean;
        p.rstd[r] = rstd;
      }
    };
    // Every thread walks the same number of iterations: groups of more than a warp synchronise the block.
    const std::int64_t my_first = first + g.index;
    if constexpr (kStaged) {
      const std::int64_t iterations = walk.iterations(p.rows, p.rows_per_block);
      StagedForwardRows<T, ITEMS, VEC> rows(p.x, p.stages, p.rows, my_first, row_step, 0, p.cols);
      staged_row_walk(
          iterations, p.stages, [&](std::int64_t, int s) { rows.copy(s, g); },
          [&](std::int64_t it, int s) {
            const std::int64_t r = my_first + it * row_step;
            const bool active = r < p.rows;
            RowFragment<T, ITEMS, VEC> xv;
            rows.stages.read_row(s, 0, xv, g, p.cols, active);
            body(std::false_type{}, r, active, xv);
          });
    } else {
      // Rows first, first + row_step, ... while the block's first row is below M (the same for all its
      // threads: no iteration count). Tested after each row, not before the first (first_row_walk).
      const auto walk_rows = [&](auto direct) {
        first_row_walk(first, p.rows, row_step, [&](std::int64_t base) {
          const std::int64_t r = base + g.index;
          const bool active = r < p.rows;
          RowFragment<T, ITEMS, VEC> xv;
          xv.load(p.x.row(active ? r : 0), g, p.cols, active);
          body(direct, r, active, xv);
        });
      };
      // kGroupLocal: groups of up to kGroupSumDirectWarps warps sum in the group-local form, wider
      // ones in the block-barrier form (forward_group_local). The group width is a launch parameter,
      // so the choice is made once, outside the walk, and each walk is compiled for its form: with
      // the test inside the row sums, the 2-4-warp rows ran 2-3 % slower than a walk with no
      // block-barrier form in it, and dropping that form cost the 8-warp rows 3.5-6 % (A/B at
      // bf389f7, docs/NOTES.md entry 35).
      if constexpr (kGroupLocal) {
        if (g.threads <= kGroupSumDirectWarps * kWarpSize) walk_rows(std::true_type{});
        else walk_rows(std::false_type{});
      } else {
        walk_rows(std::false_type{});
      }
    }
  } else {
    // Streaming: pass 1 shifted sums, pass 2 normalise and write (the second read mostly hits L2).
    for (std::int64_t base = first; base < p.rows; base += row_step) {
      const std::int64_t r = base + g.index;
      const bool active = r < p.rows;
      const T* x_row = p.x.row(active ? r : 0);
      const float shift = (active && !kRms) ? to_float(x_row[0]) : 0.f;
      float sum = 0.f, sq = 0.f;
      StreamBuffer<T, VEC> xs;
      if (active) {
        stream_row<VEC>(
            g, p.cols, [&](int u, int col) { xs.load(u, x_row + col); },
            [&](int u, int) {
#pragma unroll
              for (int i = 0; i < VEC; ++i) {
                const float d = xs.at(u, i) - shift;
                sum += d;
                sq += d * d;
              }
            });
      }
      row_group_sum2<kForwardGroupLocal>(sum, sq, g.threads, scratch);
      const float shifted_mean = sum * inv_n;
      const float mean = kRms ? 0.f : shift + shifted_mean;
      // E[d^2] - E[d]^2 can round below 0; clamped by a compare, not fmaxf, which would turn the NaN
      // of a row holding a NaN or an infinity into 0 and report a finite rstd for it (the reference's
      // is NaN; tests/gpu/test_nonfinite.cpp)
      const float raw_var = sq * inv_n - shifted_mean * shifted_mean;
      const float var = kRms ? sq * inv_n : (raw_var < 0.f ? 0.f : raw_var);
      const float rstd = rsqrtf(var + p.eps);
      if (active) {
        T* y_row = p.y.row(r);
        stream_row<VEC>(
            g, p.cols, [&](int u, int col) { xs.load(u, x_row + col); },
            [&](int u, int col) {
              float w[VEC], b[VEC], y[VEC];
              const W* const bias = forward_bias<kRms>(p);
              if (p.weight != nullptr) load_weight_vec<W, VEC>(p.weight + col, w);
              if (bias != nullptr) load_weight_vec<W, VEC>(bias + col, b);
#pragma unroll
              for (int i = 0; i < VEC; ++i)
                y[i] = (xs.at(u, i) - mean) * rstd * (p.weight != nullptr ? w[i] : 1.f) + (bias != nullptr ? b[i] : 0.f);
              store_vec<T, VEC>(y_row + col, y);
            });
        if (g.lane == 0) {
          if (p.mean != nullptr) p.mean[r] = mean;
          p.rstd[r] = rstd;
        }
      }
    }
  }
}

/// RMSNorm's lean walk (RowShape::packed): like the unstaged cached walk above, but the row stays in
/// registers in its storage type and is converted to fp32 where used (for the sum, and again for y),
/// and the weight is read slot by slot after the sum (L1 hits after the first rows), so a thread
/// holds little more than its packed fragment across the row sum: __launch_bounds__ keep
/// kPackedRowMinBlocks blocks of kPackedRowMaxThreads resident (40 registers a thread, 48 warps an
/// SM), and the grid covers every row. Latency is then hidden by resident warps, as Liger's and
/// torch.compile's forwards do, instead of by cp.async stages. The sum is forward_kernel's (lane_sum
/// over the same slots, then the group sum). LayerNorm has no packed walk: its two row sums made it
/// slower than the staged walk everywhere measured (docs/NOTES.md entry 31).
template <typename T, typename W, int ITEMS, int VEC>
__global__ void __launch_bounds__(kPackedRowMaxThreads, kPackedRowMinBlocks) rms_forward_packed_kernel(const ForwardParams<T, W> p) {
  __shared__ float scratch_buffers[GroupScratch::kFloats];
  GroupScratch scratch(scratch_buffers);
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);
  const std::int64_t row_step = std::int64_t(gridDim.x) * p.rows_per_block;
  // Every thread walks the same rows count: groups of more than a warp synchronise the block.
  for (std::int64_t base = std::int64_t(blockIdx.x) * p.rows_per_block; base < p.rows; base += row_step) {
    const std::int64_t r = base + g.index;
    const bool active = r < p.rows;
    RowFragment<T, ITEMS, VEC> xv;  // slots past N (and inactive groups) hold 0
    xv.load(p.x.row(active ? r : 0), g, p.cols, active);
    float x[ITEMS][VEC];  // the fp32 copy lives only inside the lane's sum
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) x[k][i] = xv.at(k, i);
    const float lane_sq = lane_sum(x, [](float v) { return v * v; });
    xv.forget_conversions();
    const float rstd = rsqrtf(row_group_sum1<kForwardGroupLocal>(lane_sq, g.threads, scratch) * p.inv_cols + p.eps);
    T* const y_row = p.y.row(active ? r : 0);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int col = g.column<VEC>(k);
      if (!active || col >= p.cols) continue;
      float w[VEC], y[VEC];
      load_weight_vec_or<W, VEC>(p.weight, col, 1.f, w);
#pragma unroll
      for (int i = 0; i < VEC; ++i) y[i] = xv.at(k, i) * rstd * w[i];
      store_vec<T, VEC>(y_row + col, y);
    }
    if (active && g.lane == 0) p.rstd[r] = rstd;
  }
}

/// Short rows (RowShape::short_rows: at most kShortRowMaxVectors 16-byte vectors): LANES lanes a row,
/// a compile-time width of at most a warp, ITEMS vectors a lane (the general layout's slots: slot k of
/// lane l holds vector k * LANES + l, so a group's loads of one slot are contiguous); each group takes
/// short_rows_per_group(ITEMS) rows at once, groups of a warp on consecutive rows (a warp's loads of
/// one slot of narrow rows cover 32 / LANES whole rows: coalesced). No stages and no loop: a grid over
/// every row, with short_row_min_blocks(vectors a lane) blocks resident per SM, hides the latency with
/// warps, as torch.compile's forward does. What the general walk pays per row and this one does not
/// (docs/NOTES.md entries 39, 41): row sums compiled for every group width and, for groups wider than
/// a warp, a block barrier (the width is a run-time value there), stage addresses, and a cp.async wait
/// on a run-time depth. The statistics are the general walk's: the mean, then the squared deviations
/// from it (two butterflies of log2(LANES) steps), slots past N taking no part in the second sum.
template <typename T, typename W, bool kRms, int LANES, int ITEMS, int VEC>
__global__ void __launch_bounds__(kShortRowBlockThreads, short_row_min_blocks(ITEMS * short_rows_per_group(ITEMS)))
    forward_short_rows_kernel(const ForwardParams<T, W> p) {
  static_assert((LANES & (LANES - 1)) == 0 && LANES <= kWarpSize, "a row's lanes are a power of two within a warp");
  static_assert(ITEMS == 1 || LANES == kShortRowMaxLanes, "rows take more vectors a lane only at a warp a row");
  constexpr int kGroups = kShortRowBlockThreads / LANES;
  constexpr int kRows = short_rows_per_group(ITEMS);
  const RowGroup g{LANES, int(threadIdx.x) % LANES, int(threadIdx.x) / LANES};  // compile-time width
  const std::int64_t first = std::int64_t(blockIdx.x) * (kGroups * kRows) + g.index;
  // The loads first: every slot of every row is in flight before any arithmetic.
  RowFragment<T, ITEMS, VEC> xp[kRows];  // slots past N (and rows past M) hold 0
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const std::int64_t r = first + std::int64_t(j) * kGroups;
    xp[j].load(p.x.row(r < p.rows ? r : 0), g, p.cols, r < p.rows);
  }
  const auto row_sum = [](float v) {
#pragma unroll
    for (int offset = LANES / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
  };
  const int valid_vectors = lane_vectors<ITEMS, VEC>(g, p.cols);
  // The statistics of every row first, from the packed rows (converted where used): across the row
  // sums a lane holds its packed vectors and two floats a row, not the converted rows, so the
  // weights loaded after fit the register budget of short_row_min_blocks without spilling.
  // 16-bit lanes of 4 and more vectors (a row's slots times the group's rows) convert again for each
  // sum (forget_conversions): converted rows kept across the butterflies made ptxas spill 16-72 bytes
  // a thread.
  constexpr bool kConvertEachSum = sizeof(T) == 2 && ITEMS * kRows >= 4;
  const auto lane_sum_of = [&](RowFragment<T, ITEMS, VEC>& row, auto term, int valid) {
    if constexpr (kConvertEachSum) row.forget_conversions();
    float x[ITEMS][VEC];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) x[k][i] = row.at(k, i);
    return lane_sum(x, term, valid);
  };
  float mean[kRows], rstd[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    mean[j] = 0.f;
    if constexpr (kRms) {
      rstd[j] = rsqrtf(row_sum(lane_sum_of(xp[j], [](float v) { return v * v; }, ITEMS)) * p.inv_cols + p.eps);
    } else {
      mean[j] = row_mean(row_sum(lane_sum_of(xp[j], [](float v) { return v; }, ITEMS)), p.cols, p.inv_cols);
      const float m = mean[j];
      const float lane_m2 = lane_sum_of(xp[j], [m](float v) { return (v - m) * (v - m); }, valid_vectors);
      rstd[j] = rsqrtf(row_sum(lane_m2) * p.inv_cols + p.eps);
    }
    if constexpr (kConvertEachSum) xp[j].forget_conversions();
  }
  // y slot by slot: the slot's weight and bias once, for every row of the group.
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int col = g.column<VEC>(k);
    if (col >= p.cols) break;  // later slots are further right
    float w[VEC], b[VEC];
    load_weight_vec_or<W, VEC>(p.weight, col, 1.f, w);
    load_weight_vec_or<W, VEC>(forward_bias<kRms>(p), col, 0.f, b);
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const std::int64_t r = first + std::int64_t(j) * kGroups;
      if (r >= p.rows) break;  // later rows of the group are further on
      float y[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) y[i] = (xp[j].at(k, i) - mean[j]) * rstd[j] * w[i] + b[i];
      store_vec<T, VEC>(p.y.row(r) + col, y);
    }
  }
  if (g.lane == 0) {
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const std::int64_t r = first + std::int64_t(j) * kGroups;
      if (r >= p.rows) break;
      if (p.mean != nullptr) p.mean[r] = mean[j];
      p.rstd[r] = rstd[j];
    }
  }
}

/// Rows split over a thread-block cluster (RowShape::split, rows too long to cache in one block):
/// block r of a cluster caches its slice [col0, col0 + cols) of each row the cluster walks, so x is
/// read once. The block is the row group, and the row's statistics combine over the cluster in one
/// exchange (ClusterSum): RMSNorm the sum of x^2; LayerNorm each block's slice mean and sum of squared
/// deviations (from sums shifted by the slice's first element, which the block has staged), merged by
/// Chan et al.'s rule, a lane per rank (two rounds, the mean and then the deviations, would put two
/// exchanges in every row). A shift by the row's first element instead was a global load per row
/// whose conversion ptxas placed right after it: a memory round trip in every row's critical path
/// (SASS; LayerNorm split rows took ~1 us a row more than RMSNorm, docs/NOTES.md entry 29).
/// Staged walks finish each row one row late (staged_row_walk_deferred): row i's statistics are sent
/// in its head and its y waits for the cluster's in its tail, after row i + 1's head, so the exchange
/// overlaps the next row's work instead of stalling the block once a row (as the backward's split
/// rows do, docs/NOTES.md entry 28). Unstaged walks (a row or so per cluster) sum and write in turn.
template <typename T, typename W, bool kRms, bool kStaged, int ITEMS, int VEC>
__global__ void __launch_bounds__(kWideSplitBlockThreads, 1) forward_split_kernel(const ForwardParams<T, W> p) {
  __shared__ float scratch_buffers[GroupScratch::kFloats];
  GroupScratch scratch(scratch_buffers);
  constexpr int kValues = kRms ? 1 : 2;  // RMSNorm: sum x^2; LayerNorm: slice mean, slice M2
  __shared__ typename ClusterSum<kValues>::Storage cluster_storage;
  ClusterSum<kValues> cluster(cluster_storage, p.split);
  cluster.start();
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);  // rows_per_block = 1: the block
  const RowWalk walk = RowWalk::of_this_block<true>(p.cols, p.split, p.slice_cols);
  const std::int64_t first = walk.unit, step = walk.units;  // the cluster's rows
  const float inv_n = p.inv_cols;
  const float inv_slice = walk.cols > 0 ? 1.f / float(walk.cols) : 0.f;
  const W* const weight = p.weight != nullptr ? p.weight + walk.col0 : nullptr;
  const W* const bias = forward_bias<kRms>(p) != nullptr ? p.bias + walk.col0 : nullptr;  // LayerNorm's only
  // Weight and bias are read again for every row, slot by slot (L1 or L2 hits after the first row):
  // kept in registers for the whole walk, next to the deferred walk's state, they made ptxas spill
  // 104-112 bytes in the staged 16-bit instances; loaded as whole fragments with each row, 8-48 bytes
  // with fp32 weights. The packs are loaded kAffineAhead slots ahead of their use, the first ones
  // before the tail waits for the cluster's statistics: loaded where they are used, each slot's
  // loads came after the wait and after the previous slot's store (its branch on the slice kept them
  // there; SASS at ff3bae9), so every slot waited out their latency in turn. H200 A/B (docs/NOTES.md
  // entry 74), 16-byte packs: rows of 4 vectors a thread 0.90-0.97x (LayerNorm 2048 x 65536 16-bit
  // 0.92), RMSNorm's 8-vector rows 4 ahead 0.93x (8 ahead: the same). LayerNorm's 8-vector rows holding
  // the row's x fragment across the wait: 1 ahead 1.00-1.02x, 2 ahead spill 44 bytes. Staged, they read
  // x for y from the stage slot by slot instead (kTailView, a StagedRowView), which leaves room for 2
  // ahead (3: no spill either, 4: 44 bytes): 0.95-0.97x at 1024 x 262144, 0.99-1.00x at 4096 x 262144.
  // 32-byte slots (fp32 weights on 16-bit rows, what autocast hands a norm: two 16-byte loads), as many
  // as the registers hold without spills: RMSNorm 4 / 2 ahead (4 / 8 vectors a thread), LayerNorm 2 /
  // none: 0.94-0.97x at 2048 x 65536 and RMSNorm 1024 x 131072, 0.99-1.00x elsewhere.
  constexpr bool kWidePacks = sizeof(Pack<W, VEC>) > 16;
  using AffineSlot = std::conditional_t<kWidePacks, WeightVec<W, VEC>, Pack<W, VEC>>;  // (16-byte loads)
  constexpr int kAffineAhead = kWidePacks ? (kRms ? (ITEMS <= 4 ? ITEMS : 2) : (ITEMS <= 4 ? 2 : 0))
                                          : (ITEMS <= 4 ? ITEMS : kRms ? 4 : kStaged ? 2 : 0);
  constexpr bool kTailView = kStaged && !kRms && ITEMS > 4 && kAffineAhead > 0;
  constexpr int kAffineRing = kAffineAhead > 0 ? kAffineAhead : 1;
  // The slot's VEC values of weight or bias: from the ring (loaded ahead) or from memory.
  const auto affine_values = [&](const W* v, const AffineSlot& ahead, int col, float (&out)[VEC]) {
    if constexpr (kAffineAhead > 0) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] = ahead.get(i);
    } else {
      load_weight_vec<W, VEC>(v + col, out);
    }
  };
  // Slots past the slice hold 0, which x - shift would not leave out: LayerNorm zeroes their
  // deviations (lanes at the end of a short last slice only).
  const int valid_vectors = lane_vectors<ITEMS, VEC>(g, walk.cols);

  // This block's statistics of its slice of a row (shift: the slice's first element), summed over
  // the block in its first warp alone, which sends them to the cluster (block_sum_in_first_warp: the
  // other warps skip the second butterfly, LayerNorm 3-5 % faster, docs/NOTES.md entry 72). The
  // deviations are formed once and both sums read them: the two sums over the valid slots
  // (lane_sum's bound) had ptxas convert and shift every element twice, once per sum (ncu at
  // 20196c0, LayerNorm bf16 2048 x 65536: 349 of a warp's ~950 instructions a row in this head).
  const auto head = [&](const RowFragment<T, ITEMS, VEC>& xv, float shift) {
    float d[ITEMS][VEC];
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) d[k][i] = xv.at(k, i) - shift;
    float values[kValues];
    if constexpr (kRms) {
      values[0] = lane_sum(d, [](float v) { return v * v; });
      if (!block_sum_in_first_warp(values, scratch)) return;
    } else {
      if (valid_vectors < ITEMS) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
          if (k >= valid_vectors) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) d[k][i] = 0.f;
          }
      }
      float sums[2] = {lane_sum(d, [](float v) { return v; }), lane_sum(d, [](float v) { return v * v; })};
      if (!block_sum_in_first_warp(sums, scratch)) return;
      const float shifted_mean = sums[0] * inv_slice;
      values[0] = walk.cols > 0 ? shift + shifted_mean : 0.f;                                  // slice mean
      values[1] = walk.cols > 0 ? fmaxf(sums[1] - sums[0] * shifted_mean, 0.f) : 0.f;  // slice M2
    }
    cluster.send(values);
  };
  // The row's statistics from the cluster's values (the oldest sent, not yet received), then y.
  const auto tail = [&](std::int64_t r, const auto& xv) {  // a RowFragment, or a StagedRowView (kTailView)
    AffineSlot weight_ring[kAffineRing], bias_ring[kAffineRing];  // slot k in entry k % kAffineRing
    const auto load_ahead = [&](int k) {
      const int col = g.column<VEC>(k);
      if (col < walk.cols) {
        if (weight != nullptr) weight_ring[k % kAffineRing] = AffineSlot::load(weight + col);
        if (bias != nullptr) bias_ring[k % kAffineRing] = AffineSlot::load(bias + col);
      }
    };
#pragma unroll
    for (int k = 0; k < kAffineAhead; ++k) load_ahead(k);
    float mean = 0.f, rstd;
    if constexpr (kRms) {
      float sum_sq[1];
      cluster.receive(sum_sq);
      rstd = rsqrtf(sum_sq[0] * inv_n + p.eps);
    } else {
      // Chan et al.: mean = sum_b n_b mean_b / N, M2 = sum_b M2_b + n_b (mean_b - mean)^2. Every rank
      // but the last holds slice_cols columns (the planner's slices). Lane b of each warp takes rank
      // b's terms and a warp sum adds them (every lane, every warp and every block of the cluster
      // gets the same bits: the same slots, the same butterfly): a loop over the ranks in every
      // thread was ~90 of a warp's ~950 instructions a row (ncu at 20196c0, split = 8).
      static_assert(kMaxFusedSplitBlocks <= kWarpSize, "a lane per rank");
      float m2 = 0.f;
      cluster.receive_slots([&](const auto& slots) {
        const int b = int(threadIdx.x) % kWarpSize, last = p.split - 1;
        const float n_b = b < last ? float(p.slice_cols) : b == last ? float(max(0, p.cols - last * p.slice_cols)) : 0.f;
        const int rank = min(b, last);  // lanes past the cluster read a real slot and weigh it 0
        const float mean_b = b <= last ? slots[rank][0] : 0.f;
        const float m2_b = b <= last ? slots[rank][1] : 0.f;
        mean = row_mean(warp_sum(n_b * mean_b), p.cols, inv_n);
        const float delta = mean_b - mean;
        m2 = warp_sum(fmaf(n_b * delta, delta, m2_b));
      });
      rstd = rsqrtf(m2 * inv_n + p.eps);
    }
    T* const y_row = p.y.row(r) + walk.col0;
    // (A constant row's mean is its value, of 11 significant bits at most: RowXhat gives it xhat = 0.)
    const RowXhat<kRms, fma_row_terms<T>(true)> xhat_of(mean, rstd);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if constexpr (kRms) {
        // RMSNorm reads its weight with a fallback of 1 for a missing one: the tested form below
        // measured 1-5 % slower for it (A/B at 20196c0, 1024 x 131072 and 4096 x 262144 bf16 / fp16),
        // where it made LayerNorm's rows faster. It has no bias (ForwardProblem), so none is read:
        // a fallback of 0 was 8 register moves and an add a slot.
        const int col = g.column<VEC>(k);
        float wk[VEC];
        if (weight != nullptr && col < walk.cols) {
          affine_values(weight, weight_ring[k % kAffineRing], col, wk);
        } else {
#pragma unroll
          for (int i = 0; i < VEC; ++i) wk[i] = 1.f;
        }
        store_slot<T, VEC>(y_row, g, k, walk.cols, true, [&](int i) { return xv.at(k, i) * rstd * wk[i]; });
      } else {
        // LayerNorm reads weight and bias for the lane's slots inside the slice only (past it nothing
        // is stored), each under a test of its pointer that is the same for the whole grid: fallbacks
        // of 1 and 0 for missing ones put 16 moves a vector into every row (SASS at 20196c0).
        const int col = g.column<VEC>(k);
        const Pack<T, VEC> xk = xv.pack(k);
        float y[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) y[i] = xhat_of(xk.get(i));
        if (col < walk.cols) {
          float w[VEC], b[VEC];
          if (weight != nullptr && bias != nullptr) {
            affine_values(weight, weight_ring[k % kAffineRing], col, w);
            affine_values(bias, bias_ring[k % kAffineRing], col, b);
#pragma unroll
            for (int i = 0; i < VEC; ++i) y[i] = y[i] * w[i] + b[i];
          } else if (weight != nullptr) {
            affine_values(weight, weight_ring[k % kAffineRing], col, w);
#pragma unroll
            for (int i = 0; i < VEC; ++i) y[i] *= w[i];
          } else if (bias != nullptr) {
            affine_values(bias, bias_ring[k % kAffineRing], col, b);
#pragma unroll
            for (int i = 0; i < VEC; ++i) y[i] += b[i];
          }
        }
        store_slot<T, VEC>(y_row, g, k, walk.cols, true, [&](int i) { return y[i]; });
      }
      if (kAffineAhead > 0 && k + kAffineAhead < ITEMS) load_ahead(k + kAffineAhead);  // into slot k's entry
    }
    if (walk.rank == 0 && threadIdx.x == 0) {  // every block has the same statistics
      if (p.mean != nullptr) p.mean[r] = mean;
      p.rstd[r] = rstd;
    }
  };

  if constexpr (kStaged) {
    // LayerNorm's stages are zero-filled and read without predicates: 1-2 % faster on its split rows
    // (H200 A/B, docs/NOTES.md entry 73); RMSNorm's measured 1-2 % slower at 2048 x 65536 and keeps them.
    constexpr bool kFilled = !kRms;
    StagedForwardRows<T, ITEMS, VEC, kFilled> rows(p.x, p.stages, p.rows, first, step, walk.col0, walk.cols);
    staged_row_walk_deferred(
        walk.iterations(p.rows, 1), p.stages, [&](std::int64_t, int s) { rows.copy(s, g); },
        [&](std::int64_t, int s) {
          RowFragment<T, ITEMS, VEC> xv;
          rows.stages.read_row(s, 0, xv, g, walk.cols, true);
          float shift = 0.f;  // the slice's first element, from thread 0's staged slot (a broadcast read)
          if constexpr (!kRms) {
            // Each thread's cp.async wait covers only its own copies: a block barrier makes thread 0's
            // visible to all (the row sum below is a block barrier anyway; this one only moves the
            // block's wait for its slowest copy before the shift).
            __syncthreads();
            if (walk.cols > 0) {
              Pack<T, VEC> first_vector;
              load_shared_16(rows.stages.first_slot_address(s, 0), first_vector);
              shift = first_vector.get(0);
            }
          }
          head(xv, shift);
        },
        [&](std::int64_t it, int s) {
          if constexpr (kTailView) {
            tail(first + it * step, StagedRowView<T, ITEMS, VEC, kFilled, 1>{rows.stages, g, s, 0, walk.cols, true});
          } else {
            RowFragment<T, ITEMS, VEC> xv;
            rows.stages.read_row(s, 0, xv, g, walk.cols, true);
            tail(first + it * step, xv);
          }
        });
  } else {
    for (std::int64_t r = first; r < p.rows; r += step) {
      const T* x_row = p.x.row(r) + walk.col0;
      RowFragment<T, ITEMS, VEC> xv;
      xv.load(x_row, g, walk.cols, true);
      head(xv, (!kRms && walk.cols > 0) ? to_float(x_row[0]) : 0.f);
      tail(r, xv);
    }
  }
  cluster.finish();  // no block leaves while the others may still push into its slots
}

}  // namespace

template <typename T, typename W>
void launch_forward(const ForwardProblem& p, const Plan& plan, cudaStream_t stream) {
  if (p.rows() == 0) return;
  ForwardParams<T, W> params{
      {static_cast<const T*>(p.x.data), p.x.stride()},
      {static_cast<T*>(p.y.data), p.y.stride()},
      p.weight ? static_cast<const W*>(p.weight->data) : nullptr,
      p.bias ? static_cast<const W*>(p.bias->data) : nullptr,
      p.mean ? static_cast<float*>(p.mean->data) : nullptr,
      static_cast<float*>(p.rstd.data),
      p.rows(),
      int(p.cols()),
      1.f / float(p.cols()),
      float(p.eps),
      plan.row.threads_per_row,
      plan.row.rows_per_block,
      plan.row.stages,
      plan.row.split,
      plan.row.slice_cols};
  const dim3 grid(unsigned(plan.row.blocks)), block(unsigned(plan.row.block_threads()));
  const std::size_t smem = std::size_t(plan.row.smem_bytes);
  if (plan.row.short_rows) {
    constexpr int kVec = int(16 / sizeof(T));
    const auto no_instance = [&] {
      return CudaError("normkit: internal error: a short-row forward plan the kernel has no instance for (" +
                       plan.describe() + ")");
    };
    if (plan.row.vec != kVec || plan.row.stages != 0 || plan.row.split != 1 ||
        plan.row.block_threads() != kShortRowBlockThreads)
      throw no_instance();
    const auto launch = [&](auto lanes, auto items) {
      void (*kernel)(ForwardParams<T, W>) = p.rms ? forward_short_rows_kernel<T, W, true, lanes(), items(), kVec>
                                                 : forward_short_rows_kernel<T, W, false, lanes(), items(), kVec>;
      kernel<<<grid, block, 0, stream>>>(params);
    };
    static_assert(kShortRowMaxLanes == 32 && kShortRowMaxItems == 16,
                  "instances for 1 .. 32 lanes a row at one vector a lane, and 2, 4, 8, 16 vectors a lane at 32 lanes");
    const int lanes = plan.row.threads_per_row, items = plan.row.items;
    if (items == 1) {
      switch (lanes) {
        case 1: launch(IntConst<1>{}, IntConst<1>{}); break;
        case 2: launch(IntConst<2>{}, IntConst<1>{}); break;
        case 4: launch(IntConst<4>{}, IntConst<1>{}); break;
        case 8: launch(IntConst<8>{}, IntConst<1>{}); break;
        case 16: launch(IntConst<16>{}, IntConst<1>{}); break;
        case 32: launch(IntConst<32>{}, IntConst<1>{}); break;
        default: throw no_instance();
      }
    } else if (lanes == kShortRowMaxLanes) {
      switch (items) {
        case 2: launch(IntConst<32>{}, IntConst<2>{}); break;
        case 4: launch(IntConst<32>{}, IntConst<4>{}); break;
        case 8: launch(IntConst<32>{}, IntConst<8>{}); break;
        case 16: launch(IntConst<32>{}, IntConst<16>{}); break;
        default: throw no_instance();
      }
    } else {
      throw no_instance();
    }
    check_launch("forward_short_rows_kernel");
    return;
  }
  dispatch_row_shape<T, kMaxRowItems, true, kSplitItems, kWideForwardSplitItems, kMaxScalarRowItems>(plan.row, [&](auto items, auto vec, auto staged, auto split) {
    if constexpr (items() > 0 && items() <= kMaxRowItems && !staged() && !split()) {
      if (plan.row.packed && p.rms) {
        rms_forward_packed_kernel<T, W, items(), vec()><<<grid, block, 0, stream>>>(params);
        return;
      }
    }
    if (plan.row.packed)
      throw CudaError(std::string("normkit: internal error: a packed forward plan for ") + (p.rms ? "RMSNorm" : "LayerNorm") +
                      " with items = " + std::to_string(plan.row.items) + ", stages = " + std::to_string(plan.row.stages) +
                      ", split = " + std::to_string(plan.row.split));
    if constexpr (split()) {
      // (LayerNorm instances of kWideForwardSplitItems vectors only where forward_split_wide_items_built)
      constexpr bool kLayerNormInstance =
          items() != kWideForwardSplitItems || forward_split_wide_items_built(false, int(sizeof(T)));
      void (*kernel)(ForwardParams<T, W>) = forward_split_kernel<T, W, true, staged(), items(), vec()>;
      if constexpr (kLayerNormInstance) {
        if (!p.rms) kernel = forward_split_kernel<T, W, false, staged(), items(), vec()>;
      } else if (!p.rms) {
        throw CudaError("normkit: internal error: a LayerNorm fp32 split forward plan of " + std::to_string(items()) +
                        " vectors a thread (" + plan.describe() + ")");
      }
      allow_dynamic_smem(kernel, plan.row.smem_bytes, "forward_split_kernel shared memory");
      // as many clusters as the device holds at once, at most the plan's (cluster_grid)
      const unsigned blocks = cluster_grid(kernel, grid.x, block, smem, plan.row.split);
      launch_kernel(kernel, dim3(blocks), block, smem, stream, LaunchMode{false, plan.row.split},
                    "forward_split_kernel launch", params);
    } else {
      void (*kernel)(ForwardParams<T, W>) = p.rms ? forward_kernel<T, W, true, staged(), items(), vec()>
                                                 : forward_kernel<T, W, false, staged(), items(), vec()>;
      allow_dynamic_smem(kernel, plan.row.smem_bytes, "forward_kernel shared memory");
      kernel<<<grid, block, smem, stream>>>(params);
    }
  });
  check_launch("forward_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) template void launch_forward<T, W>(const ForwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
