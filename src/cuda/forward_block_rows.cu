// Forward LayerNorm / RMSNorm, one row a block (RowShape::block_rows): the small and mid grids'
// forward, where a row's latency is the kernel's time.
//
// Why a kernel of its own: the general walk (forward.cu) serves any rows a block and any group width,
// and pays for it on every row: its group decoded from a kernel parameter, a row loop, row sums for
// a run-time width. On small grids that chain is the kernel's time: 456 SASS instructions a warp in
// normkit's one-vector instance against 208 in Liger's one-row-a-program forward (ncu at b533104,
// docs/NOTES.md entry 33). Here the row is blockIdx.x, the width a template argument, the x load
// the first thing a thread does, the weights loaded after it, and the row sums block_sum: one
// barrier each, no loop.
//
// The statistics are the other walks': the mean, then the sum of squared deviations from it, slots
// past N taking no part in the second sum (the float64 reference's two-pass variance).
#include "cuda/kernels.h"
#include "cuda/row_layout.cuh"

namespace normkit::cuda {
namespace {

template <typename T, typename W>
struct BlockRowParams {
  RowPtr<const T> x;
  RowPtr<T> y;
  const W* weight;  // nullptr = 1
  const W* bias;    // nullptr = 0 (RMSNorm: always)
  float* mean;      // nullptr for RMSNorm, or when not asked for
  float* rstd;
  int cols;
  float inv_cols;  // 1 / N, rounded once on the host
  float eps;
};

/// The instances that can hold x packed across the row sums (block_rows_packed_instance): 16-bit rows
/// with fp32 weights (autocast's mixed precision), and the 16-bit LayerNorm blocks of 4 vectors a
/// thread and more than kBlockRowMaxThreads vectors (256 x 4, 512 x 4). Under launch bounds of THREADS
/// alone ptxas gave those 83-125 registers (one or two blocks an SM); the packed form holds only the
/// packed row across the sums (fp32 weights and bias are loaded after them, a slot at a time: they
/// are the same for every row, L1 / L2 hits) under launch bounds of that register budget. The plan
/// takes it for grids of more rows than SMs (RowShape::block_rows_packed): elsewhere the conversions
/// repeated measured 1-10 % slower (docs/NOTES.md entry 61).
template <typename T, typename W, bool kRms, int THREADS, int ITEMS>
constexpr bool kHoldPackedRow = block_rows_packed_instance(kRms, int(sizeof(T)), int(sizeof(W)), THREADS, ITEMS);

/// The row (blockIdx.x) of a block of THREADS threads; kPacked = kHoldPackedRow, the kernel's launch bounds.
template <typename T, typename W, bool kRms, int THREADS, int ITEMS, int VEC, bool kPacked>
__device__ __forceinline__ void forward_block_row(const BlockRowParams<T, W>& p) {
  __shared__ __align__(16) float warp_sums[2][THREADS / kWarpSize];  // one buffer per row sum (block_sum)
  const RowGroup g{THREADS, int(threadIdx.x), 0};
  const std::int64_t r = blockIdx.x;
  RowFragment<T, ITEMS, VEC> xv;  // slots past N hold 0
  xv.load(p.x.row(r), g, p.cols, true);
  // Weights wider than x in the packed form: loaded after the row sums, where each slot is stored
  // (block_row_min_blocks counts one slot of them); otherwise in flight during the row sums.
  constexpr bool kLateWeights = kPacked && sizeof(W) > sizeof(T);
  WeightFragment<W, kLateWeights ? 1 : ITEMS, VEC> w, b;  // (late weights: unused)
  if constexpr (!kLateWeights) {
    w.load(p.weight, g, p.cols, 1.f);
    if constexpr (!kRms) b.load(p.bias, g, p.cols, 0.f);
  }
  // kPacked: x is converted again where it is used after each block sum (forget_conversions), so that
  // across the sums only the packed row is live (half the registers of floats), which
  // block_row_min_blocks counts on; the other instances keep the converted copy (fewer instructions).
  float x[ITEMS][VEC];  // x, then x - mean
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) x[k][i] = xv.at(k, i);
  float mean = 0.f, rstd;
  if constexpr (kRms) {
    const float lane = lane_sum(x, [](float v) { return v * v; });
    if constexpr (kPacked) xv.forget_conversions();
    rstd = rsqrtf(block_sum<THREADS, kPacked>(lane, warp_sums[0]) * p.inv_cols + p.eps);
  } else {
    const float lane = lane_sum(x, [](float v) { return v; });
    if constexpr (kPacked) xv.forget_conversions();
    mean = row_mean(block_sum<THREADS, kPacked>(lane, warp_sums[0]), p.cols, p.inv_cols);
#pragma unroll
    for (int k = 0; k < ITEMS; ++k)
#pragma unroll
      for (int i = 0; i < VEC; ++i) x[k][i] = (kPacked ? xv.at(k, i) : x[k][i]) - mean;  // from here on x - mean
    const float lane_m2 = lane_sum(x, [](float d) { return d * d; }, lane_vectors<ITEMS, VEC>(g, p.cols));
    if constexpr (kPacked) xv.forget_conversions();
    rstd = rsqrtf(block_sum<THREADS, kPacked>(lane_m2, warp_sums[1]) * p.inv_cols + p.eps);
  }
  T* const y_row = p.y.row(r);
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    float wk[VEC], bk[VEC];
    if constexpr (kLateWeights) {
      const int col = g.column<VEC>(k);
      if (col < p.cols) {
        load_weight_vec_or<W, VEC>(p.weight, col, 1.f, wk);
        if constexpr (!kRms) load_weight_vec_or<W, VEC>(p.bias, col, 0.f, bk);
      }
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        wk[i] = w.at(k, i);
        if constexpr (!kRms) bk[i] = b.at(k, i);
      }
    }
    store_slot<T, VEC>(y_row, g, k, p.cols, true, [&](int i) {
      const float scaled = (kPacked ? xv.at(k, i) - mean : x[k][i]) * rstd * wk[i];
      if constexpr (kRms) {
        return scaled;
      } else {
        return scaled + bk[i];
      }
    });
  }
  if (threadIdx.x == 0) {
    if (p.mean != nullptr) p.mean[r] = mean;
    p.rstd[r] = rstd;
  }
}

// Two kernels for one body: a launch bound of minimum blocks, even 1, changes ptxas's register
// choices from those of THREADS alone (RMSNorm bf16 512 x 2: 40 -> 48 registers), so the instances
// that do not hold their row packed keep the bound they were measured with.
template <typename T, typename W, bool kRms, int THREADS, int ITEMS, int VEC>
__global__ void __launch_bounds__(THREADS) forward_block_rows_kernel(const BlockRowParams<T, W> p) {
  forward_block_row<T, W, kRms, THREADS, ITEMS, VEC, false>(p);
}

template <typename T, typename W, bool kRms, int THREADS, int ITEMS, int VEC>
__global__ void __launch_bounds__(THREADS, block_row_min_blocks(THREADS, ITEMS, VEC, sizeof(T), sizeof(W), kRms))
    forward_packed_block_rows_kernel(const BlockRowParams<T, W> p) {
  forward_block_row<T, W, kRms, THREADS, ITEMS, VEC, true>(p);
}

}  // namespace

template <typename T, typename W>
void launch_forward_block_rows(const ForwardProblem& p, const Plan& plan, cudaStream_t stream) {
  if (p.rows() == 0) return;
  constexpr int kVec = int(16 / sizeof(T));
  const RowShape& row = plan.row;
  const auto no_instance = [&] {
    return CudaError("normkit: internal error: a one-row-a-block forward plan the kernel has no instance for (" +
                     plan.describe() + ")");
  };
  if (!row.block_rows || row.vec != kVec || row.rows_per_block != 1 || row.stages != 0 || row.split != 1 ||
      row.blocks != p.rows())
    throw no_instance();
  const BlockRowParams<T, W> params{{static_cast<const T*>(p.x.data), p.x.stride()},
                                    {static_cast<T*>(p.y.data), p.y.stride()},
                                    p.weight ? static_cast<const W*>(p.weight->data) : nullptr,
                                    p.bias ? static_cast<const W*>(p.bias->data) : nullptr,
                                    p.mean ? static_cast<float*>(p.mean->data) : nullptr,
                                    static_cast<float*>(p.rstd.data),
                                    int(p.cols()),
                                    1.f / float(p.cols()),
                                    float(p.eps)};
  const auto launch = [&](auto threads, auto items) {
    void (*kernel)(BlockRowParams<T, W>) = p.rms ? forward_block_rows_kernel<T, W, true, threads(), items(), kVec>
                                                : forward_block_rows_kernel<T, W, false, threads(), items(), kVec>;
    if (row.block_rows_packed) {
      if (p.rms) {
        if constexpr (kHoldPackedRow<T, W, true, threads(), items()>)
          kernel = forward_packed_block_rows_kernel<T, W, true, threads(), items(), kVec>;
        else
          throw no_instance();
      } else {
        if constexpr (kHoldPackedRow<T, W, false, threads(), items()>)
          kernel = forward_packed_block_rows_kernel<T, W, false, threads(), items(), kVec>;
        else
          throw no_instance();
      }
    }
    kernel<<<dim3(unsigned(row.blocks)), dim3(unsigned(threads())), 0, stream>>>(params);
  };
  const auto with_items = [&](auto threads) {
    switch (row.items) {
      case 1: launch(threads, IntConst<1>{}); break;
      case 2: launch(threads, IntConst<2>{}); break;
      case 4: launch(threads, IntConst<4>{}); break;
      default: throw no_instance();
    }
  };
  static_assert(kBlockRowMinThreads == 64 && kBlockRowMaxThreads == 512 && kBlockRowMaxItems == 4,
                "instances for 64 .. 512 threads a row, 1, 2 or 4 vectors a thread");
  switch (row.threads_per_row) {
    case 64: with_items(IntConst<64>{}); break;
    case 128: with_items(IntConst<128>{}); break;
    case 256: with_items(IntConst<256>{}); break;
    case 512: with_items(IntConst<512>{}); break;
    default: throw no_instance();
  }
  check_launch("forward_block_rows_kernel");
}

#define NORMKIT_INSTANTIATE(T, W) \
  template void launch_forward_block_rows<T, W>(const ForwardProblem&, const Plan&, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
