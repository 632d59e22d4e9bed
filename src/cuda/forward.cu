// Forward LayerNorm / RMSNorm: one row group per row, the row cached in registers (ITEMS > 0) and
// read once, or streamed twice for rows too long to cache (ITEMS == 0).
//
// Variance: with the row in registers it is the exact two-pass formula (mean first, then the sum
// of squared deviations). Streamed rows use sums shifted by the row's first element, which keeps
// the cancellation of E[x^2] - E[x]^2 small for data with a large common offset.
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
  float eps;
  int threads_per_row;
  int rows_per_block;
};

template <typename T, typename W, bool kRms, int ITEMS, int VEC>
__global__ void __launch_bounds__(ITEMS == 0 ? 1024 : max_row_threads(ITEMS)) forward_kernel(const ForwardParams<T, W> p) {
  __shared__ float scratch[2 * 1024 / kWarpSize];
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);
  const std::int64_t row_step = std::int64_t(gridDim.x) * p.rows_per_block;
  const float inv_n = 1.f / float(p.cols);

  // Every thread walks the same number of iterations: groups of more than a warp synchronise the block.
  for (std::int64_t base = std::int64_t(blockIdx.x) * p.rows_per_block; base < p.rows; base += row_step) {
    const std::int64_t r = base + g.index;
    const bool active = r < p.rows;
    const T* x_row = p.x.row(active ? r : 0);
    float mean = 0.f, rstd = 0.f;

    if constexpr (ITEMS > 0) {
      RowFragment<ITEMS, VEC> xv;
      xv.load(x_row, g, p.cols, active);
      float sum = 0.f, unused = 0.f;
      if constexpr (!kRms) {
#pragma unroll
        for (int k = 0; k < ITEMS; ++k)
#pragma unroll
          for (int i = 0; i < VEC; ++i) sum += xv.v[k][i];
        row_group_sum2(sum, unused, g.threads, scratch);
        mean = sum * inv_n;
      }
      float sq = 0.f;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const bool valid = g.column<VEC>(k) < p.cols;  // padding slots hold 0, not 0 - mean
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const float d = valid ? xv.v[k][i] - mean : 0.f;
          sq += d * d;
        }
      }
      unused = 0.f;
      row_group_sum2(sq, unused, g.threads, scratch);
      rstd = rsqrtf(sq * inv_n + p.eps);

      RowFragment<ITEMS, VEC> yv;
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int col = g.column<VEC>(k);
#pragma unroll
        for (int i = 0; i < VEC; ++i) {
          const bool in = col + i < p.cols;
          const float w = (p.weight != nullptr && in) ? to_float(p.weight[col + i]) : 1.f;
          const float b = (p.bias != nullptr && in) ? to_float(p.bias[col + i]) : 0.f;
          yv.v[k][i] = (xv.v[k][i] - mean) * rstd * w + b;
        }
      }
      yv.store(p.y.row(active ? r : 0), g, p.cols, active);
    } else {
      // Streaming: pass 1 shifted sums, pass 2 normalise and write.
      const float shift = (active && !kRms) ? to_float(x_row[0]) : 0.f;
      float sum = 0.f, sq = 0.f;
      if (active) {
        for_each_vector<VEC>(g, p.cols, [&](int col) {
          float v[VEC];
          load_vec<T, VEC>(x_row + col, v);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float d = v[i] - shift;
            sum += d;
            sq += d * d;
          }
        });
      }
      row_group_sum2(sum, sq, g.threads, scratch);
      const float shifted_mean = sum * inv_n;
      mean = kRms ? 0.f : shift + shifted_mean;
      const float var = kRms ? sq * inv_n : fmaxf(sq * inv_n - shifted_mean * shifted_mean, 0.f);
      rstd = rsqrtf(var + p.eps);
      if (active) {
        T* y_row = p.y.row(r);
        for_each_vector<VEC>(g, p.cols, [&](int col) {
          float v[VEC];
          load_vec<T, VEC>(x_row + col, v);
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            const float w = p.weight != nullptr ? to_float(p.weight[col + i]) : 1.f;
            const float b = p.bias != nullptr ? to_float(p.bias[col + i]) : 0.f;
            v[i] = (v[i] - mean) * rstd * w + b;
          }
          store_vec<T, VEC>(y_row + col, v);
        });
      }
    }
    if (active && g.lane == 0) {
      if (p.mean != nullptr) p.mean[r] = mean;
      p.rstd[r] = rstd;
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
      float(p.eps),
      plan.row.threads_per_row,
      plan.row.rows_per_block};
  const dim3 grid(unsigned(plan.row.blocks)), block(unsigned(plan.row.block_threads()));
  dispatch_row_shape<T, kMaxRowItems>(plan.row, [&](auto items, auto vec) {
    if (p.rms)
      forward_kernel<T, W, true, items(), vec()><<<grid, block, 0, stream>>>(params);
    else
      forward_kernel<T, W, false, items(), vec()><<<grid, block, 0, stream>>>(params);
  });
  check_launch("forward_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) template void launch_forward<T, W>(const ForwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
