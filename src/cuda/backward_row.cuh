// The per-row math of the backward, shared by the dX kernel and the fused backward:
//   xhat = (x - mean) * rstd (RMSNorm: x * rstd),  g = dy * w,
//   dx = rstd * (g - mean_row(g) - xhat * mean_row(g * xhat))   (RMSNorm: no mean_row(g) term).
#pragma once

#include "cuda/kernels.h"
#include "cuda/row_layout.cuh"

namespace normkit::cuda {

template <typename T, typename W>
struct BackwardParams {
  RowPtr<const T> dy;
  RowPtr<const T> x;
  RowPtr<T> dx;           // data nullptr when dx is not requested
  const float* mean;      // nullptr for RMSNorm
  const float* rstd;
  const W* weight;        // nullptr = 1
  W* dweight;             // nullptr when not requested
  W* dbias;               // nullptr when not requested (always for RMSNorm)
  std::int64_t rows;
  int cols;
  float inv_cols;         // 1 / N, rounded once on the host (a division is a call in the kernel's prologue)
  int threads_per_row;
  int rows_per_block;
  int stages;             // RowShape::stages: 0 = rows loaded straight into registers
  int split;              // RowShape::split: blocks (a cluster) per row
  int slice_cols;         // RowShape::slice_cols: columns per block of a split row
};

/// Kernel parameters from a validated problem (backward_dx.cu).
template <typename T, typename W>
BackwardParams<T, W> make_backward_params(const BackwardProblem& p, const Plan& plan);

/// dx of one element from its terms, with the row means taken from the row sums over N columns
/// (inv_cols = 1 / N): dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), RMSNorm without mean(g).
/// Shared by the cached rows (RowGrad::store_dx), the fused kernel's wide rows and the streamed dX.
/// kFma (LayerNorm, fma_row_terms): two FMAs, g * rstd + (-rstd * mean(g)) + xhat * (-rstd *
/// mean(g * xhat)), the two products rounded once a row, instead of three operations (RMSNorm's form
/// is two already). Not exactly 0 where g == mean(g) (N = 1), which the exact form is.
template <bool kRms, bool kFma = false>
struct DxOfRow {
  float rstd, mean_g, mean_g_xhat;
  float g_offset, xhat_factor;  // kFma: -rstd * mean(g), -rstd * mean(g * xhat)
  __device__ __forceinline__ DxOfRow(float rstd_, float sum_g, float sum_g_xhat, float inv_cols)
      : rstd(rstd_),
        mean_g(kRms ? 0.f : sum_g * inv_cols),
        mean_g_xhat(sum_g_xhat * inv_cols),
        g_offset(-rstd_ * mean_g),
        xhat_factor(-rstd_ * mean_g_xhat) {}
  __device__ __forceinline__ float operator()(float g, float xhat) const {
    if constexpr (kFma && !kRms) return fmaf(xhat, xhat_factor, fmaf(g, rstd, g_offset));
    else return rstd * (g - mean_g - xhat * mean_g_xhat);
  }
};

/// One row's backward terms for this lane's slots, each computed once in fp32 registers and used
/// by the row sums, dx and the fused gamma/beta accumulators:
///   xhat = (x - mean) * rstd (RMSNorm: mean = 0),  g = dy * w.
/// Padding slots and inactive groups hold dy = 0, hence g = 0: they add nothing to the row sums.
template <int ITEMS, int VEC>
struct RowGrad {
  float xhat[ITEMS][VEC];
  float g[ITEMS][VEC];

  template <typename T, typename W, bool kRms, bool kFma>
  __device__ __forceinline__ void compute(const RowFragment<T, ITEMS, VEC>& x, const RowFragment<T, ITEMS, VEC>& dy,
                                          const WeightFragment<W, ITEMS, VEC>& w, const RowXhat<kRms, kFma>& xhat_of) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        xhat[k][i] = xhat_of(x.at(k, i));
        g[k][i] = __fmul_rn(dy.at(k, i), w.at(k, i));  // rounded once, no FMA contraction (see dx)
      }
  }

  /// This lane's partial sums of g and g * xhat.
  __device__ __forceinline__ void sums(float& sum_g, float& sum_g_xhat) const {
    sum_g = 0.f;
    sum_g_xhat = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        sum_g += g[k][i];
        sum_g_xhat += g[k][i] * xhat[k][i];
      }
  }

  /// With the row sums reduced over the group (and the cluster of a split row): dx = rstd * (g -
  /// mean(g) - xhat * mean(g * xhat)) (RMSNorm: no mean(g) term) for this lane's slots of a row of
  /// N columns (inv_cols = 1 / N), `n` of them in this block. g - mean(g) is exactly 0 where the row is constant
  /// (N = 1) because g is the same rounded product in both (the exact form; kFma is for split rows only).
  template <bool kRms, bool kFma, typename T>
  __device__ __forceinline__ void store_dx(T* dx_row, float rstd, float sum_g, float sum_g_xhat, const RowGroup& grp,
                                           float inv_cols, int n, bool active) const {
    const DxOfRow<kRms, kFma> dx(rstd, sum_g, sum_g_xhat, inv_cols);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
      store_slot<T, VEC>(dx_row, grp, k, n, active, [&](int i) { return dx(g[k][i], xhat[k][i]); });
  }
};

/// Row statistics as the backward needs them.
template <bool kRms>
__device__ __forceinline__ void row_stats(const float* mean, const float* rstd, std::int64_t r, float& m, float& s) {
  m = kRms ? 0.f : mean[r];
  s = rstd[r];
}

/// The staged copies and reads of walk_backward_rows: the copies walk the iterations in order (0, 1,
/// 2, ...) with running row pointers instead of a 64-bit multiply per row and tensor; visit() hands
/// a landed iteration to a body. kStagedStats: the row statistics are staged with the rows (else
/// the walk loads them itself and passes them to visit).
/// A row's statistics are copied once per warp, by the group's first lane in the warp (the stat
/// leader), and the other lanes read the leader's slot: a 4-byte cp.async of one address by every
/// lane of a warp took 32 shared-memory wavefronts instead of 1 (ncu at 775641f, LayerNorm fused
/// 16384 x 8192 bf16: the mean and rstd copies made 16.3 M of the kernel's 30.4 M wavefronts, and the
/// shuffles of the row sums, which share that pipe, stalled on them). A lane sees the leader's
/// landed copy after its own wait and a __syncwarp (visit); the __syncwarp in copy() keeps the
/// leader from overwriting a stage's statistics before every lane of the warp has read them.
template <bool kRms, int ITEMS, int VEC, bool kViews, typename T, typename W, bool kStagedStats = true>
struct StagedBackwardRows {
  /// Whether the stages hold zeros past N and past M (RowStages' kFilled), so that visit() reads them
  /// without predicates. H200 A/B (docs/NOTES.md entry 73), 16-bit rows: the fused kernel's slot views
  /// (wide rows), with its shared weights read the same way in the row's first pass, 3-7 % faster at
  /// 1024 / 4096 x 262144; RMSNorm's fragments 3-6 % at 2048 x 65536. LayerNorm's fragments keep the
  /// predicated reads (its 16-bit split instances spilled 8 bytes and ran 24-27 % slower), and fp32
  /// rows too (their views 0.6-1.7 % slower, the fragments unchanged).
  static constexpr bool kFilled = sizeof(T) == 2 && (kViews || kRms);

  const BackwardParams<T, W>& p;
  const RowGroup& g;
  RowStages<T, ITEMS, VEC, 2, kFilled> stages;
  std::int64_t first, row_step;
  int n;
  std::int64_t copy_row;
  const T* x_row;
  const T* dy_row;
  std::int64_t x_step, dy_step;

  __device__ __forceinline__ StagedBackwardRows(const BackwardParams<T, W>& p_, const RowGroup& g_, const RowWalk& walk)
      : p(p_),
        g(g_),
        stages(p_.stages),
        first(walk.unit * p_.rows_per_block + g_.index),
        row_step(walk.units * p_.rows_per_block),
        n(walk.cols),
        copy_row(first),
        x_row(p_.x.data + walk.col0 + first * p_.x.stride),
        dy_row(p_.dy.data + walk.col0 + first * p_.dy.stride),
        x_step(row_step * p_.x.stride),
        dy_step(row_step * p_.dy.stride) {}

  /// Lanes between this lane and its stat leader (the group's first lane in this warp).
  __device__ __forceinline__ int lanes_after_stat_leader() const { return g.lane & (kWarpSize - 1); }

  /// Starts the copies of the next iteration into stage s.
  __device__ __forceinline__ void copy(int s) {
    if constexpr (kStagedStats) __syncwarp();  // the warp has read the statistics this stage held
    const bool active = copy_row < p.rows;
    stages.copy_row(s, 0, x_row, g, n, active);
    stages.copy_row(s, 1, dy_row, g, n, active);
    if (active) {
      if constexpr (kStagedStats) {
        if (lanes_after_stat_leader() == 0) {
          if (!kRms) stages.copy_stat(s, 0, p.mean + copy_row);
          stages.copy_stat(s, 1, p.rstd + copy_row);
        }
      }
    }
    copy_row += row_step;
    x_row += x_step;
    dy_row += dy_step;
  }

  /// Row `it`'s statistics for a walk that does not stage them (0 past M).
  __device__ __forceinline__ void load_stats(std::int64_t it, float (&stats)[2]) const {
    const std::int64_t r = first + it * row_step;
    stats[0] = stats[1] = 0.f;
    if (r < p.rows) row_stats<kRms>(p.mean, p.rstd, r, stats[0], stats[1]);
  }

  template <typename Body>
  __device__ __forceinline__ void visit(std::int64_t it, int s, Body&& body) const {
    static_assert(kStagedStats, "visit(it, s, body, stats) when the walk loads the statistics");
    const std::int64_t r = first + it * row_step;
    const bool active = r < p.rows;
    __syncwarp();  // the stat leader's copies have landed (its own wait) before this lane reads them
    const int behind = lanes_after_stat_leader();
    const float stats[2] = {(active && !kRms) ? stages.stat(s, 0, behind) : 0.f,
                            active ? stages.stat(s, 1, behind) : 0.f};
    visit(it, s, body, stats);
  }

  template <typename Body>
  __device__ __forceinline__ void visit(std::int64_t it, int s, Body&& body, const float (&stats)[2]) const {
    const std::int64_t r = first + it * row_step;
    const bool active = r < p.rows;
    const float mean = stats[0], rstd = stats[1];
    if constexpr (kViews) {
      using View = StagedRowView<T, ITEMS, VEC, kFilled>;
      body(r, active, View{stages, g, s, 0, n, active}, View{stages, g, s, 1, n, active}, mean, rstd);
    } else {
      RowFragment<T, ITEMS, VEC> xv, dyv;
      stages.read_row(s, 0, xv, g, n, active);
      stages.read_row(s, 1, dyv, g, n, active);
      body(r, active, xv, dyv, mean, rstd);
    }
  }
};

/// Walks this block's rows with x, dy and the row statistics in hand: body(r, active, x, dy, mean,
/// rstd) once per row group and iteration (inactive groups, past M, get zeros and must store
/// nothing). Only the block's slice of a row is loaded (walk: all N columns unless the row is split
/// over a cluster). Staged (kStaged: p.stages deep through shared memory, see RowStages) or loaded
/// straight into registers. kViews (staged walks only): x and dy are handed over as StagedRowViews,
/// read slot by slot where the body uses them, instead of RowFragments.
template <bool kStaged, bool kRms, int ITEMS, int VEC, bool kViews = false, typename T, typename W, typename Body>
__device__ __forceinline__ void walk_backward_rows(const BackwardParams<T, W>& p, const RowGroup& g, const RowWalk& walk,
                                                   Body&& body) {
  if constexpr (kStaged) {
    StagedBackwardRows<kRms, ITEMS, VEC, kViews, T, W> rows(p, g, walk);
    staged_row_walk(
        walk.iterations(p.rows, p.rows_per_block), p.stages, [&](std::int64_t, int s) { rows.copy(s); },
        [&](std::int64_t it, int s) { rows.visit(it, s, body); });
  } else {
    const std::int64_t first = walk.unit * p.rows_per_block + g.index;
    const std::int64_t row_step = walk.units * p.rows_per_block;
    const RowPtr<const T> xs{p.x.data + walk.col0, p.x.stride}, dys{p.dy.data + walk.col0, p.dy.stride};
    // The block's first row decides (the same for all its threads): no iteration count needed.
    for (std::int64_t base = first - g.index; base < p.rows; base += row_step) {
      const std::int64_t r = base + g.index;
      const bool active = r < p.rows;
      RowFragment<T, ITEMS, VEC> xv, dyv;
      xv.load(xs.row(active ? r : 0), g, walk.cols, active);
      dyv.load(dys.row(active ? r : 0), g, walk.cols, active);
      float mean = 0.f, rstd = 0.f;
      if (active) row_stats<kRms>(p.mean, p.rstd, r, mean, rstd);
      body(r, active, xv, dyv, mean, rstd);
    }
  }
}

/// walk_backward_rows (staged, with StagedRowViews) for rows finished one iteration late: head(r,
/// active, x, dy, mean, rstd) for row it and tail(...) with the same arguments for row it - 1, whose
/// staged slots are still held (staged_row_walk_deferred; kTailFirst: the order of the two). Split
/// rows send their cluster sums in the head and receive them in the tail.
/// The statistics are not staged (the planner leaves them out of the stages: plan_stages with stats
/// = false) but loaded into registers one row ahead: the wide rows' three stages then take 192 KB,
/// which leaves the SM's L1 the room for the weights they re-read per slot (docs/NOTES.md entry 28).
template <bool kRms, int ITEMS, int VEC, bool kTailFirst = false, typename T, typename W, typename Head, typename Tail>
__device__ __forceinline__ void walk_backward_rows_deferred(const BackwardParams<T, W>& p, const RowGroup& g,
                                                            const RowWalk& walk, Head&& head, Tail&& tail) {
  StagedBackwardRows<kRms, ITEMS, VEC, true, T, W, false> rows(p, g, walk);
  const std::int64_t iterations = walk.iterations(p.rows, p.rows_per_block);
  // Rows it - 1, it, and it + 1 (loading while row it is worked on). Head first, row it - 1's tail
  // follows head(it) and takes `previous`; tail first, it comes before head(it) moves the statistics
  // on, so `current` is still row it - 1's (`previous` is then unused).
  float previous[2] = {0.f, 0.f}, current[2] = {0.f, 0.f}, next[2];
  rows.load_stats(0, next);
  staged_row_walk_deferred<kTailFirst>(
      iterations, p.stages, [&](std::int64_t, int s) { rows.copy(s); },
      [&](std::int64_t it, int s) {
        for (int k = 0; k < 2; ++k) {
          if constexpr (!kTailFirst) previous[k] = current[k];
          current[k] = next[k];
        }
        rows.load_stats(it + 1, next);
        rows.visit(it, s, head, current);
      },
      // the last row's tail comes after the walk, with no head before it
      [&](std::int64_t it, int s) {
        rows.visit(it, s, tail, kTailFirst || it + 1 == iterations ? current : previous);
      });
}

/// dX of this block's rows with x and dy cached in registers (ITEMS > 0): the dX kernel's body, and
/// the dX blocks of dx_and_tiled_kernel (one launch with the tiled gamma/beta). A lane owns the same
/// columns in every row: small fragments of staged walks keep their weights in registers for the
/// whole walk; the others load them with each row (keep_weights). kSplit: this block holds
/// walk.cols columns from walk.col0 of its cluster's rows.
template <bool kStaged, bool kSplit, bool kRms, int ITEMS, int VEC, typename T, typename W>
__device__ __forceinline__ void dx_cached_rows(const BackwardParams<T, W>& p, const RowGroup& g, const RowWalk& walk,
                                               GroupScratch& scratch) {
  constexpr bool kKeepWeights = keep_weights<W, ITEMS, VEC, kStaged>();
  constexpr bool kFma = fma_row_terms<T>(kSplit);
  const W* weight = p.weight != nullptr ? p.weight + walk.col0 : nullptr;
  WeightFragment<W, ITEMS, VEC> w;
  if constexpr (kKeepWeights) w.load(weight, g, walk.cols, 1.f);
  // RankLoop: the lane-per-rank sum spilled the 16-bit split instances, the tree too (ClusterSum::receive)
  using RowClusterSum = ClusterSum<2, RankSum::RankLoop>;
  __shared__ typename RowClusterSum::Storage cluster_storage;
  RowClusterSum cluster(cluster_storage, p.split);
  if constexpr (kSplit) cluster.start();
  walk_backward_rows<kStaged, kRms, ITEMS, VEC>(
      p, g, walk, [&](std::int64_t r, bool active, const RowFragment<T, ITEMS, VEC>& xv,
                      const RowFragment<T, ITEMS, VEC>& dyv, float mean, float rstd) {
        if constexpr (!kKeepWeights) w.load(weight, g, walk.cols, 1.f);
        RowGrad<ITEMS, VEC> row;
        row.compute(xv, dyv, w, RowXhat<kRms, kFma>(mean, rstd));
        float sums[2];
        row.sums(sums[0], sums[1]);
        row_group_sum(sums, g.threads, scratch);
        if constexpr (kSplit) cluster.sum(sums);
        row.template store_dx<kRms, kFma>(p.dx.row(active ? r : 0) + walk.col0, rstd, sums[0], sums[1], g, p.inv_cols,
                                          walk.cols, active);
      });
  if constexpr (kSplit) cluster.finish();
}

}  // namespace normkit::cuda
