// Forward LayerNorm / RMSNorm: one row group per row, the row cached in registers (ITEMS > 0) and
// read once, or streamed twice for rows too long to cache (ITEMS == 0).
//
// Variance: with the row in registers it is the exact two-pass one, as the float64 reference takes
// it: the row's mean first (one group sum), then the sum of squared deviations from it (a second
// group sum). Two plain sums cost less than one round of merging (count, mean, M2) triples
// (Chan et al.), whose every butterfly step needs a division: measured in docs/NOTES.md entry 18.
// Streamed rows use sums shifted by the row's first element, which keeps the cancellation of
// E[x^2] - E[x]^2 small for data with a large common offset.
#include "cuda/kernels.h"
#include "cuda/row_layout.cuh"

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
  int stages;  // RowShape::stages: 0 = rows loaded straight into registers
};

/// The forward's row sums take the block-barrier form (row_group_sum says why).
constexpr bool kForwardGroupLocal = false;

template <typename T, typename W, bool kRms, bool kStaged, int ITEMS, int VEC>
__global__ void __launch_bounds__(row_kernel_max_threads(ITEMS), row_kernel_min_blocks(ITEMS)) forward_kernel(const ForwardParams<T, W> p) {
  __shared__ float scratch_buffers[GroupScratch::kFloats];
  GroupScratch scratch(scratch_buffers);
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);
  const RowWalk walk = RowWalk::of_this_block<false>(p.cols, 1, p.cols);
  const std::int64_t row_step = walk.units * p.rows_per_block;
  const float inv_n = p.inv_cols;
  const std::int64_t first = walk.unit * p.rows_per_block;

  if constexpr (ITEMS > 0) {
    // A lane owns the same columns in every row: small fragments of staged walks keep weight and bias
    // in registers for the whole walk; the others load them with each row (keep_weights).
    constexpr bool kKeepWeights = keep_weights<W, ITEMS, VEC, kStaged>();
    WeightFragment<W, ITEMS, VEC> w, b;
    if constexpr (kKeepWeights) {
      w.load(p.weight, g, p.cols, 1.f);
      b.load(p.bias, g, p.cols, 0.f);
    }
    // The lane's valid slots are the same in every row: counted once.
    const int valid_vectors = lane_vectors<ITEMS, VEC>(g, p.cols);
    auto body = [&](std::int64_t r, bool active, const RowFragment<T, ITEMS, VEC>& xv) {
      if constexpr (!kKeepWeights) {  // issued next to the row's loads, used after the row sums
        w.load(p.weight, g, p.cols, 1.f);
        b.load(p.bias, g, p.cols, 0.f);
      }
      float x[ITEMS][VEC];  // converted once; padding slots (and inactive groups) hold 0 (LN: then x - mean)
#pragma unroll
      for (int k = 0; k < ITEMS; ++k)
#pragma unroll
        for (int i = 0; i < VEC; ++i) x[k][i] = xv.at(k, i);
      float mean = 0.f, rstd;
      if constexpr (kRms) {
        const float sq = row_group_sum1<kForwardGroupLocal>(lane_sum(x, [](float v) { return v * v; }), g.threads, scratch);
        rstd = rsqrtf(sq * inv_n + p.eps);
      } else {
        // padding slots hold 0: the sum needs no mask; the squared deviations do (0 - mean != 0)
        mean = row_group_sum1<kForwardGroupLocal>(lane_sum(x, [](float v) { return v; }), g.threads, scratch) * inv_n;
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
#pragma unroll
          for (int i = 0; i < VEC; ++i) x[k][i] -= mean;  // from here on x holds x - mean
        const float lane_m2 = lane_sum(x, [](float d) { return d * d; }, valid_vectors);
        rstd = rsqrtf(row_group_sum1<kForwardGroupLocal>(lane_m2, g.threads, scratch) * inv_n + p.eps);
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
      const RowStages<T, ITEMS, VEC, 1> stages(p.stages);
      // The copies walk the iterations in order: a running row pointer instead of a 64-bit multiply.
      std::int64_t copy_row = my_first;
      const T* x_row = p.x.data + my_first * p.x.stride;
      const std::int64_t x_step = row_step * p.x.stride;
      staged_row_walk(
          iterations, p.stages,
          [&](std::int64_t, int s) {
            if (copy_row < p.rows) stages.copy_row(s, 0, x_row, g, p.cols);
            copy_row += row_step;
            x_row += x_step;
          },
          [&](std::int64_t it, int s) {
            const std::int64_t r = my_first + it * row_step;
            const bool active = r < p.rows;
            RowFragment<T, ITEMS, VEC> xv;
            stages.read_row(s, 0, xv, g, p.cols, active);
            body(r, active, xv);
          });
    } else {
      // The block's first row decides (the same for all its threads): the loop needs no iteration
      // count, and the first load waits for nothing but a compare.
      for (std::int64_t base = first; base < p.rows; base += row_step) {
        const std::int64_t r = base + g.index;
        const bool active = r < p.rows;
        RowFragment<T, ITEMS, VEC> xv;
        xv.load(p.x.row(active ? r : 0), g, p.cols, active);
        body(r, active, xv);
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
      const float var = kRms ? sq * inv_n : fmaxf(sq * inv_n - shifted_mean * shifted_mean, 0.f);
      const float rstd = rsqrtf(var + p.eps);
      if (active) {
        T* y_row = p.y.row(r);
        stream_row<VEC>(
            g, p.cols, [&](int u, int col) { xs.load(u, x_row + col); },
            [&](int u, int col) {
              float w[VEC], b[VEC], y[VEC];
              if (p.weight != nullptr) load_weight_vec<W, VEC>(p.weight + col, w);
              if (p.bias != nullptr) load_weight_vec<W, VEC>(p.bias + col, b);
#pragma unroll
              for (int i = 0; i < VEC; ++i)
                y[i] = (xs.at(u, i) - mean) * rstd * (p.weight != nullptr ? w[i] : 1.f) + (p.bias != nullptr ? b[i] : 0.f);
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
      plan.row.stages};
  const dim3 grid(unsigned(plan.row.blocks)), block(unsigned(plan.row.block_threads()));
  const std::size_t smem = std::size_t(plan.row.smem_bytes);
  dispatch_row_shape<T, kMaxRowItems, true, 0, 0>(plan.row, [&](auto items, auto vec, auto staged, auto) {
    void (*kernel)(ForwardParams<T, W>) = p.rms ? forward_kernel<T, W, true, staged(), items(), vec()>
                                               : forward_kernel<T, W, false, staged(), items(), vec()>;
    allow_dynamic_smem(kernel, plan.row.smem_bytes, "forward_kernel shared memory");
    kernel<<<grid, block, smem, stream>>>(params);
  });
  check_launch("forward_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) template void launch_forward<T, W>(const ForwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
