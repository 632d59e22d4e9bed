// The row layout shared by the row-wise kernels (forward, dX, fused backward): a row of N elements
// is handled by a group of G threads; lane l of the group owns the vectors k*G + l (k < ITEMS), each
// of VEC contiguous elements. The same lane owns the same columns in every row, which is what lets
// the fused backward accumulate dgamma/dbeta in registers.
#pragma once

#include <type_traits>

#include "cuda/common.cuh"

namespace normkit::cuda {

struct RowGroup {
  int threads;  // G
  int lane;     // 0..G-1
  int index;    // group index inside the block
  __device__ __forceinline__ static RowGroup of_this_thread(int threads_per_row) {
    return {threads_per_row, int(threadIdx.x) & (threads_per_row - 1), int(threadIdx.x) / threads_per_row};
  }
  /// First column of vector slot k of this lane.
  template <int VEC>
  __device__ __forceinline__ int column(int k) const { return (k * threads + lane) * VEC; }
};

/// ITEMS vectors of VEC elements of one row, held in registers as fp32.
template <int ITEMS, int VEC>
struct RowFragment {
  float v[ITEMS][VEC];

  /// Loads this lane's slots of `row`; slots past N (or every slot when !active) read as 0.
  /// VEC > 1 requires N % VEC == 0 and a 16-byte aligned row (the planner's vec rule).
  template <typename T>
  __device__ __forceinline__ void load(const T* row, const RowGroup& g, int n, bool active) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int col = g.column<VEC>(k);
      if (active && col < n) {
        load_vec<T, VEC>(row + col, v[k]);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) v[k][i] = 0.f;
      }
    }
  }

  template <typename T>
  __device__ __forceinline__ void store(T* row, const RowGroup& g, int n, bool active) const {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int col = g.column<VEC>(k);
      if (active && col < n) store_vec<T, VEC>(row + col, v[k]);
    }
  }
};

/// Weight (or bias) values for this lane's slots; absent weight reads as `fallback`.
template <int ITEMS, int VEC, typename W>
__device__ __forceinline__ void load_weight_fragment(const W* weight, const RowGroup& g, int n, float fallback,
                                                     float (&out)[ITEMS][VEC]) {
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) {
    const int col = g.column<VEC>(k);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[k][i] = (weight != nullptr && col + i < n) ? to_float(weight[col + i]) : fallback;
  }
}

/// Streaming access for rows too long to cache: lane l visits vectors l, l+G, ... of the row.
template <int VEC, typename F>
__device__ __forceinline__ void for_each_vector(const RowGroup& g, int n, F&& f) {
  for (int col = g.lane * VEC; col < n; col += g.threads * VEC) f(col);
}

}  // namespace normkit::cuda

namespace normkit::cuda {

template <int V>
using IntConst = std::integral_constant<int, V>;

/// Calls f(IntConst<ITEMS>, IntConst<VEC>) for the plan's runtime (items, vec): the template
/// instances that exist are items in {0 (streaming), 1, 2, 4, 8} (up to kMaxItems) and vec in
/// {1, 16 / sizeof(T)}.
template <typename T, int kMaxItems, typename F>
void dispatch_row_shape(const RowShape& shape, F&& f) {
  constexpr int kVec = int(16 / sizeof(T));
  auto with_vec = [&](auto vec) {
    switch (shape.items) {
      case 1: f(IntConst<1>{}, vec); return;
      case 2: f(IntConst<2>{}, vec); return;
      case 4: if constexpr (kMaxItems >= 4) { f(IntConst<4>{}, vec); return; } break;
      case 8: if constexpr (kMaxItems >= 8) { f(IntConst<8>{}, vec); return; } break;
      case 0: if constexpr (kMaxItems >= 8) { f(IntConst<0>{}, vec); return; } break;
      default: break;
    }
    throw CudaError("normkit: internal error: no kernel instance for items = " + std::to_string(shape.items));
  };
  if (shape.vec == kVec) with_vec(IntConst<kVec>{});
  else if (shape.vec == 1) with_vec(IntConst<1>{});
  else throw CudaError("normkit: internal error: no kernel instance for vec = " + std::to_string(shape.vec));
}

}  // namespace normkit::cuda
