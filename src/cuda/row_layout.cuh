// The row layout shared by the row-wise kernels (forward, dX, fused backward): a row of N elements
// is handled by a group of G threads; lane l of the group owns the vectors k*G + l (k < ITEMS), each
// of VEC contiguous elements. The same lane owns the same columns in every row, which is what lets
// the fused backward accumulate dgamma/dbeta in registers.
#pragma once

#include <type_traits>

#include <cooperative_groups.h>

#include "core/exact_shift.h"
#include "cuda/common.cuh"

namespace normkit::cuda {

struct RowGroup {
  int threads;  // G
  int lane;     // 0..G-1
  int index;    // group index inside the block
  /// threads_per_row is a power of two (the planner's row shapes): a shift, not an integer division,
  /// which costs a tiny kernel's serial prologue ~20 instructions.
  __device__ __forceinline__ static RowGroup of_this_thread(int threads_per_row) {
    return {threads_per_row, int(threadIdx.x) & (threads_per_row - 1), int(threadIdx.x) >> (__ffs(threads_per_row) - 1)};
  }
  /// First column of vector slot k of this lane.
  template <int VEC>
  __device__ __forceinline__ int column(int k) const { return (k * threads + lane) * VEC; }
};

/// Whether a row walk forms xhat and dx as FMAs (RowXhat, DxOfRow<kRms, true>): rows of 16-bit elements
/// split over a cluster, whose walks are bound by their instructions (docs/NOTES.md entries 73, 75).
template <typename T>
constexpr bool fma_row_terms(bool split) { return split && sizeof(T) == 2; }

/// xhat = (x - mean) * rstd of one row's elements (RMSNorm: x * rstd). kFma: one FMA an element, x *
/// rstd + (-mean * rstd), the product rounded once a row, instead of a subtraction and a product. That
/// moves xhat by up to |mean| * rstd * 2^-24 (6e-7 at a mean 10 standard deviations off zero), far
/// below a 16-bit row's rounding; but where x == mean (a constant row) xhat is that rounding residual,
/// not 0, up to |mean| / sqrt(eps) * 2^-24 (0.5 at a row of 40960.0, eps 1e-5: y = b + 0.5 w, and dgamma 7 %
/// off at 40 such rows of 65536; GPU test ConstantRows), unless mean * rstd is exact (exact_shift_rstd).
/// Rows that are not split keep the exact form (fma_row_terms).
template <bool kRms, bool kFma>
struct RowXhat {
  float mean, rstd, shift;
  __device__ __forceinline__ RowXhat(float mean_, float rstd_)
      : mean(mean_), rstd(kFma && !kRms ? exact_shift_rstd(mean_, rstd_) : rstd_), shift(-mean_ * rstd) {}
  /// rstd shortened to 13 significant bits where the mean has at most 11 (core/exact_shift.h): mean *
  /// rstd is then exact, so x == mean gives xhat = +-0 as (x - mean) * rstd does, and not the product's
  /// rounding residual. The cost: xhat of such rows scaled by more than 1 - 2^-12 (a mean with ~2^-13 of
  /// random rows' odds: constant rows, integer data), and 4 instructions a row. (Clearing only as many
  /// bits as the mean has, found with a bit scan, cost 8 and measured 1.1-2.2 % slower than main at
  /// LayerNorm 2048 x 65536 / 4096 x 262144 bf16.)
  __device__ __forceinline__ static float exact_shift_rstd(float mean_, float rstd_) {
    return __uint_as_float(detail::exact_shift_rstd_bits(__float_as_uint(mean_), __float_as_uint(rstd_)));
  }
  __device__ __forceinline__ float operator()(float x) const {
    if constexpr (kRms) return x * rstd;
    else if constexpr (kFma) return fmaf(x, rstd, shift);
    else return (x - mean) * rstd;
  }
};

/// ITEMS vectors of VEC elements of one row, held in registers in their storage type (half the
/// registers of fp32 for 16-bit types) and converted to fp32 where used. All math is fp32.
template <typename T, int ITEMS, int VEC>
struct RowFragment {
  Pack<T, VEC> p[ITEMS];

  __device__ __forceinline__ float at(int k, int i) const { return p[k].get(i); }
  /// Slot k (the interface StagedRowView shares).
  __device__ __forceinline__ Pack<T, VEC> pack(int k) const { return p[k]; }

  /// Makes the fragment's registers look rewritten: fp32 conversions of its elements made before
  /// cannot be reused after, so across a row sum the compiler keeps the packed fragment live (half the
  /// registers of fp32 for 16-bit types) and converts again, instead of keeping the converted copy
  /// (rms_forward_packed_kernel's register budget). Each 32-bit word goes through an identity `prmt`,
  /// which ptxas does not see through (an empty asm statement it did: the copy stayed live, 55
  /// registers); packs of one 16-bit element only through an empty asm statement.
  __device__ __forceinline__ void forget_conversions() {
    static_assert(sizeof(Pack<T, VEC>) % 2 == 0, "packs are whole 16-bit halves");
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if constexpr (sizeof(Pack<T, VEC>) % 4 == 0) {
        unsigned* words = reinterpret_cast<unsigned*>(&p[k]);
#pragma unroll
        for (int j = 0; j < int(sizeof(Pack<T, VEC>) / 4); ++j) asm volatile("prmt.b32 %0, %0, 0, 0x3210;" : "+r"(words[j]));
      } else {
        unsigned short* halves = reinterpret_cast<unsigned short*>(&p[k]);
#pragma unroll
        for (int j = 0; j < int(sizeof(Pack<T, VEC>) / 2); ++j) asm volatile("" : "+h"(halves[j]));
      }
    }
  }

  /// Loads this lane's slots of `row`; slots past N (or every slot when !active) read as 0.
  /// VEC > 1 requires N % VEC == 0 and a 16-byte aligned row (the planner's vec rule).
  __device__ __forceinline__ void load(const T* row, const RowGroup& g, int n, bool active) {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int col = g.column<VEC>(k);
      if (active && col < n) {
        p[k] = Pack<T, VEC>::load(row + col);
      } else {
        p[k].zero();
      }
    }
  }
};

/// Sum of term(v[k][i]) over this lane's first `valid` slots (all ITEMS by default): kChains
/// independent accumulators (element i of every vector goes to chain i % kChains), then a pairwise
/// tree over them. Short dependency chains instead of one serial chain of ITEMS * VEC adds, in a
/// fixed order (the same bits every run); four chains keep the register cost small (more spilled in
/// the 128-register forward instances).
template <int ITEMS, int VEC, typename Term>
__device__ __forceinline__ float lane_sum(const float (&v)[ITEMS][VEC], Term&& term, int valid = ITEMS) {
  constexpr int kChains = VEC < 4 ? VEC : 4;
  static_assert((VEC & (VEC - 1)) == 0, "vectors are powers of two");
  float acc[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) acc[c] = 0.f;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
    if (k < valid) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i % kChains] += term(v[k][i]);
    }
#pragma unroll
  for (int width = kChains / 2; width > 0; width /= 2)
#pragma unroll
    for (int c = 0; c < width; ++c) acc[c] += acc[c + width];
  return acc[0];
}

/// Shared memory of a staged row kernel (RowShape::stages > 0), allocated dynamically. Aligned to
/// 128 bytes, not just the 16 a slot needs: the buffer starts after the kernel's static shared
/// memory, and where that was not a multiple of 128 bytes (the split kernels' ClusterSum storage:
/// 1056 bytes) each warp's 512-byte cp.async landed across five 128-byte rows, out of step with the
/// global lines: twice the copies' shared wavefronts (ncu at b9e4f47, LayerNorm fused 2048 x 65536
/// bf16: 8 per LDGSTS instead of 4, 21 % of the kernel's wavefronts in excess).
extern __shared__ __align__(128) unsigned char row_kernel_smem[];

/// Row iterations staged in shared memory, `depth` deep (RowShape::stages): each thread copies its
/// own slots with cp.async and later reads only those, so copy and use need no block barrier -- the
/// thread's own cp.async.wait_group orders them. (The row statistics are the exception: the backward
/// copies them into its stat leaders' slots only, and the other lanes read their leader's after a
/// __syncwarp, StagedBackwardRows.) Layout: [stage][tensor][item][thread] packs (consecutive threads
/// on consecutive 16 bytes: no bank conflicts), then [stage][2][thread] floats for the row
/// statistics (mean, rstd).
/// kFilled: every slot of a copied iteration is written -- zeros past N and for a row that is not
/// active (cp.async with a source size of 0) -- so that its reads need no predicates (no zeroed
/// registers, no branch a slot); otherwise only the slots inside an active row are copied and the
/// reads test each slot. The walks choose it per instance by measurement (docs/NOTES.md entry 73).
template <typename T, int ITEMS, int VEC, int TENSORS, bool kFilled = false>
struct RowStages {
  static_assert(sizeof(Pack<T, VEC>) == 16, "staged rows are copied 16 bytes at a time");
  // The shared-memory address of this thread's first slot, computed once and kept opaque (see
  // opaque()): slots are then that register plus an offset, and the copies and reads use it directly
  // (cp.async, ld.shared) with no generic pointer to convert. The statistics' offset from it is left
  // to the compiler (cheap to re-derive from the launch shape; a second pinned register cost the
  // 16-bit dX instances 20 bytes of spills).
  unsigned rows_address;
  int threads;
  int depth;

  __device__ __forceinline__ explicit RowStages(int depth_) : threads(int(blockDim.x)), depth(depth_) {
    rows_address = opaque(shared_address(row_kernel_smem) + unsigned(threadIdx.x) * 16u);
  }

  /// Address of this thread's slot k of `tensor` in `stage`.
  __device__ __forceinline__ unsigned slot_address(int stage, int tensor, int k) const {
    return rows_address + unsigned(((stage * TENSORS + tensor) * ITEMS + k) * threads) * 16u;
  }
  /// Address of slot 0 of the block's thread 0 in `stage`: the first vector of the row slice when the
  /// row group is the block (lane 0's slot 0 starts at column 0). The same address in every thread (a
  /// broadcast read).
  __device__ __forceinline__ unsigned first_slot_address(int stage, int tensor) const {
    return slot_address(stage, tensor, 0) - unsigned(threadIdx.x) * 16u;
  }
  /// Statistics follow the depth * TENSORS * ITEMS slots of every thread, one float per thread each.
  __device__ __forceinline__ unsigned stat_address(int stage, int which) const {
    return rows_address + unsigned(depth * TENSORS * ITEMS * threads) * 16u - unsigned(threadIdx.x) * 12u +
           unsigned((stage * 2 + which) * threads) * 4u;
  }
  /// Starts the copies of this lane's slots of `row` into `stage` for an iteration whose row is
  /// `active` (kFilled: every slot, zeros past N and for an inactive row; otherwise the slots inside
  /// an active row only).
  __device__ __forceinline__ void copy_row(int stage, int tensor, const T* row, const RowGroup& g, int n,
                                           bool active) const {
    if constexpr (kFilled) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int col = g.column<VEC>(k);
        const bool in_row = active && col < n;
        cp_async_16_or_zeros(slot_address(stage, tensor, k), in_row ? row + col : row, in_row);
      }
    } else if (active) {
#pragma unroll
      for (int k = 0; k < ITEMS; ++k) {
        const int col = g.column<VEC>(k);
        if (col < n) cp_async_16(slot_address(stage, tensor, k), row + col);
      }
    }
  }
  __device__ __forceinline__ void copy_stat(int stage, int which, const float* value) const {
    cp_async_4(stat_address(stage, which), value);
  }
  /// Slot k of `tensor` in `stage` as RowFragment::load would have read it (zeros past N or when
  /// !active: kFilled stages hold them already).
  __device__ __forceinline__ Pack<T, VEC> slot(int stage, int tensor, int k, const RowGroup& g, int n, bool active) const {
    Pack<T, VEC> v;
    if (kFilled || (active && g.column<VEC>(k) < n)) load_shared_16(slot_address(stage, tensor, k), v);
    else v.zero();
    return v;
  }
  /// The staged row as RowFragment::load would have read it: slot()'s test, written into the fragment
  /// in place (through slot()'s returned packs the dX and forward kernels compiled to other SASS).
  __device__ __forceinline__ void read_row(int stage, int tensor, RowFragment<T, ITEMS, VEC>& f, const RowGroup& g,
                                           int n, bool active) const {
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      if (kFilled || (active && g.column<VEC>(k) < n)) {
        load_shared_16(slot_address(stage, tensor, k), f.p[k]);
      } else {
        f.p[k].zero();
      }
    }
  }
  /// The statistic in the slot of the thread `lanes_back` lanes before this one (its stat leader's).
  __device__ __forceinline__ float stat(int stage, int which, int lanes_back) const {
    return load_shared_4(stat_address(stage, which) - unsigned(lanes_back) * 4u);
  }
};

/// One staged row of one tensor, read slot by slot where it is used (pack(k): RowStages::slot, one
/// 16-byte shared load, zeros past N or when !active) instead of into a RowFragment: for kernels whose
/// registers cannot hold the fragment across the row sum (the fused kernel's wide rows, which read a
/// slot twice; the forward's 8-vector LayerNorm split rows, whose registers hold the weight and bias
/// packs loaded ahead instead).
template <typename T, int ITEMS, int VEC, bool kFilled, int TENSORS = 2>
struct StagedRowView {
  const RowStages<T, ITEMS, VEC, TENSORS, kFilled>& stages;
  const RowGroup& g;
  int stage;
  int tensor;
  int n;
  bool active;
  __device__ __forceinline__ Pack<T, VEC> pack(int k) const { return stages.slot(stage, tensor, k, g, n, active); }
};

/// Which rows and columns this block walks (RowShape::split). Unsplit: block b of the grid walks row
/// groups b * rows_per_block + g, stepping by the grid, over all N columns. Split: the grid is made of
/// clusters of `split` blocks; cluster c walks the rows as block c would, and its block of rank r owns
/// the columns [r * slice_cols, (r + 1) * slice_cols) of them -- the last ranks may own fewer, or none.
/// Row sums then add over the cluster too (ClusterSum).
struct RowWalk {
  std::int64_t unit;   // this block's (unsplit) or cluster's (split) index among the row walkers
  std::int64_t units;  // their count
  int rank;            // the block's rank in its cluster (0 unsplit)
  int col0;            // first column of the block's slice
  int cols;            // columns in the slice

  template <bool kSplit>
  __device__ __forceinline__ static RowWalk of_this_block(int n, int split, int slice_cols) {
    if constexpr (kSplit) {
      const int rank = int(blockIdx.x) % split;  // 1-D grid, clusters of (split, 1, 1) consecutive blocks
      const int col0 = rank * slice_cols;
      return {std::int64_t(blockIdx.x / split), std::int64_t(gridDim.x / split), rank, col0,
              max(0, min(slice_cols, n - col0))};
    } else {
      return {std::int64_t(blockIdx.x), std::int64_t(gridDim.x), 0, 0, n};
    }
  }
  /// Iteration `it` handles row unit * rows_per_block + it * units * rows_per_block + group index;
  /// the same count for every thread of the walker (its threads synchronise inside an iteration).
  /// Staged walks only (the pipeline needs the count): unstaged walks compare the block's first row
  /// instead, which keeps this 64-bit division (a ~70-instruction call) out of small launches. A
  /// 32-bit fast path here cost the staged split dX kernel 36 bytes of spills (ptxas).
  __device__ __forceinline__ std::int64_t iterations(std::int64_t rows, int rows_per_block) const {
    const std::int64_t first = unit * rows_per_block, step = units * rows_per_block;
    return first < rows ? (rows - first + step - 1) / step : 0;
  }
};

/// A pairwise tree over an array of 2 * kWidth entries of kStride values each: entry r + kWidth is
/// added into entry r for r < kWidth, then the same with kWidth / 2, ..., 1; flat[0 .. kStride) ends
/// as the sums, in a fixed order (the same bits in every thread). A template per level: with a loop
/// over the levels nvcc kept the array in local memory.
template <int kWidth, int kStride, int kFlat>
__device__ __forceinline__ void fold_pairwise(float (&flat)[kFlat]) {
  static_assert(kWidth == 0 || 2 * kWidth * kStride <= kFlat, "the tree's entries fit the array");
  if constexpr (kWidth > 0) {
#pragma unroll
    for (int r = 0; r < kWidth; ++r)
#pragma unroll
      for (int k = 0; k < kStride; ++k) flat[r * kStride + k] += flat[(r + kWidth) * kStride + k];
    fold_pairwise<kWidth / 2, kStride>(flat);
  }
}

/// How receive() adds the ranks' slots (all fixed orders, the same bits in every block).
enum class RankSum {
  Tree,      // up to kMaxSplit ranks every thread reads all ranks' slots (16-byte broadcast reads) and
             // adds them pairwise; larger clusters: lane b reads rank b's slot, a warp sum adds them
  RankLoop,  // every thread adds the slots in rank order
};

/// Sums over the blocks of this block's cluster (a split row, RowWalk) of values each block has
/// already summed over its threads. Pushed, not pulled: send() has lane r < split of warp 0 store this
/// block's values into slot [my rank] of rank r's shared memory with st.async, which completes bytes
/// on rank r's mbarrier; receive() has every thread wait on its own block's mbarrier until all ranks'
/// bytes have landed and add the slots in a fixed order (RankSum), so every block gets the same
/// bits. No cluster barrier per sum: its release fence made every thread wait for its own
/// outstanding dX stores (ncu at the first split fused kernel: the membar and the cluster barrier
/// wait were the top two stalls, and the pipeline depth changed nothing). sum() is send() then
/// receive(); a walk may instead send the sums of row i + 1 before it receives those of row i
/// (walk_backward_rows_deferred), so that the exchange of one row overlaps the work on the next.
/// kBuffers slot buffers (each with its mbarrier) are taken in turn. Why none is overwritten before
/// it is read, with sends at most one ahead of receives: a block sends sum j after all its threads
/// have received sum j - 2 (the block-wide row sum in between is a barrier), so every rank has sent
/// sum j - 2, which each rank did after receiving its sum j - 4. A rank may thus still be reading
/// sums j - 3 .. j - 1 when sum j lands, and buffer j % 4 last held sum j - 4: four buffers. A rank's
/// bytes may land before this block re-arms that buffer's mbarrier (the transaction count goes
/// negative until the arm; the phase cannot complete without it). start() initialises the mbarriers
/// and is a cluster barrier (no rank stores into an uninitialised one); finish() is a cluster barrier
/// before exit. Both, and every send and receive, must be reached by all threads of all blocks of the
/// cluster, in the same order (a cluster walks the same rows).
template <int K, RankSum kRankSum = RankSum::Tree>
struct ClusterSum {
  static constexpr int kBuffers = 4;
  static constexpr int kMaxRanks = kMaxFusedSplitBlocks > kMaxSplit ? kMaxFusedSplitBlocks : kMaxSplit;
  struct alignas(16) Storage {
    unsigned long long arrived[kBuffers];  // mbarriers, one per slot buffer
    float slots[kBuffers][kMaxRanks][K];   // [buffer][sender rank][value]; Tree: ranks past the cluster hold 0
  };
  Storage& storage;
  int split;
  int send_turn = 0;     // the buffer of the next send
  int receive_turn = 0;  // the buffer of the next receive
  unsigned parity = 0;   // bit b: the phase parity the next receive from buffer b expects

  __device__ __forceinline__ ClusterSum(Storage& s, int split_) : storage(s), split(split_) {}

  __device__ __forceinline__ void start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    // Slots of ranks past the cluster are never sent to: zero once, they add nothing to the Tree sums.
    // (Tree only: the loop alone made ptxas spill the dX kernel's RankLoop split instances, 8-52 bytes.)
    if constexpr (kRankSum == RankSum::Tree) {
      for (int i = int(threadIdx.x); i < kBuffers * kMaxRanks * K; i += int(blockDim.x)) (&storage.slots[0][0][0])[i] = 0.f;
    }
    if (threadIdx.x == 0) {
      for (int b = 0; b < kBuffers; ++b)
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(&storage.arrived[b])) : "memory");
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    cooperative_groups::this_cluster().sync();
#else
    __trap();  // the planner splits rows only on devices with clusters (sm_90 on)
#endif
  }

  /// Arms this block's next buffer and pushes v (this block's sums) into every rank's same buffer.
  __device__ __forceinline__ void send(const float (&v)[K]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int b = send_turn;
    send_turn = (send_turn + 1) % kBuffers;
    const unsigned bar = shared_address(&storage.arrived[b]);
    if (threadIdx.x == 0) {
      unsigned long long state;
      asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
                   : "=l"(state)
                   : "r"(bar), "r"(unsigned(split * K * sizeof(float)))
                   : "memory");
    }
    if (threadIdx.x < unsigned(split)) {
      unsigned rank;
      asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
      const unsigned target = unsigned(threadIdx.x);
      unsigned remote_slot, remote_bar;
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                   : "=r"(remote_slot)
                   : "r"(shared_address(&storage.slots[b][rank][0])), "r"(target));
      asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote_bar) : "r"(bar), "r"(target));
#pragma unroll
      for (int k = 0; k < K; ++k)
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(
                         remote_slot + unsigned(k * sizeof(float))),
                     "r"(__float_as_uint(v[k])), "r"(remote_bar)
                     : "memory");
    }
#else
    __trap();  // the planner splits rows only on devices with clusters (sm_90 on)
#endif
  }

  /// Waits for the oldest sum sent and not yet received and returns it in v. Tree, clusters of up to
  /// kMaxSplit blocks: every thread reads the kMaxSplit ranks' slots and adds them pairwise
  /// (sum_ranks); against the lanes' form below on the fused split walks (H200, docs/NOTES.md entry
  /// 72) RMSNorm 3-5 % faster, LayerNorm bf16 1-2 %, LayerNorm fp16 within 1 % either way. Tree,
  /// larger clusters: lane b of each warp reads rank b's values (lanes past the cluster add zeros)
  /// and a warp sum adds them, so every lane, warp and block gets the same bits (the same slots, the
  /// same butterfly). The loop over the ranks in every thread (RankLoop) runs once a row, ~7
  /// instructions a rank and value; the lanes' form made the fused split walks of 4-8 ranks 1-8 %
  /// faster than it (docs/NOTES.md entry 57; at 2 ranks within 1 % either way), but it holds a few
  /// more registers: the 16-bit split dX instances at 128 registers spilled 4-8 bytes and were 3-15 %
  /// slower with it, so the dX kernel keeps RankLoop.
  __device__ __forceinline__ void receive(float (&v)[K]) {
    static_assert(kMaxFusedSplitBlocks <= kWarpSize && kMaxSplit <= kWarpSize, "a lane per rank");
    receive_slots([&](const auto& slots) {
      // Tree up to a portable cluster; larger ones add by lanes (a branch the whole grid takes alike):
      // over 16 ranks the tree (8 reads a thread) measured 1.013-1.023x on LayerNorm 16-bit 512 x
      // 262144, within the spread that shape showed between builds (docs/NOTES.md entry 72), so
      // those clusters keep the lanes' form they had.
      if constexpr (kRankSum == RankSum::Tree) {
        if (split <= kMaxSplit) {
          sum_ranks<kMaxSplit>(slots, v);
        } else {
          const int b = int(threadIdx.x) % kWarpSize;
          const bool in_cluster = b < split;
          const int rank = in_cluster ? b : 0;  // lanes past the cluster read a real slot and add 0
#pragma unroll
          for (int k = 0; k < K; ++k) {
            const float mine = slots[rank][k];
            v[k] = warp_sum(in_cluster ? mine : 0.f);
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < K; ++k) v[k] = 0.f;
        for (int r = 0; r < split; ++r) {
#pragma unroll
          for (int k = 0; k < K; ++k) v[k] += slots[r][k];
        }
      }
    });
  }

  /// The first kRanks ranks' slots, flat[r * K + k] = slots[r][k], read as 16-byte broadcasts (every
  /// thread reads the same bytes). Ranks past the cluster hold 0 (start()).
  template <int kRanks>
  __device__ __forceinline__ static void read_ranks(const float (&slots)[kMaxRanks][K], float (&flat)[kRanks * K]) {
    static_assert(kRanks <= kMaxRanks && (kRanks * K) % 4 == 0, "whole 16-byte reads of the first ranks");
    const float4* quads = reinterpret_cast<const float4*>(&slots[0][0]);
#pragma unroll
    for (int q = 0; q < kRanks * K / 4; ++q) {
      const float4 quad = quads[q];
      flat[4 * q] = quad.x;
      flat[4 * q + 1] = quad.y;
      flat[4 * q + 2] = quad.z;
      flat[4 * q + 3] = quad.w;
    }
  }

  /// RankSum::Tree: v[k] = the sum of slots[r][k] over the first kRanks ranks, added pairwise
  /// (fold_pairwise). Against the lanes' warp sum (five shuffle levels a value, one after the
  /// other, while every warp of the block waits on the same row) the chain is one shared read and
  /// log2(kRanks) additions.
  template <int kRanks>
  __device__ __forceinline__ static void sum_ranks(const float (&slots)[kMaxRanks][K], float (&v)[K]) {
    static_assert((kRanks & (kRanks - 1)) == 0, "a power-of-two prefix of the slots");
    float flat[kRanks * K];  // [rank][value]
    read_ranks<kRanks>(slots, flat);
    fold_pairwise<kRanks / 2, K>(flat);
#pragma unroll
    for (int k = 0; k < K; ++k) v[k] = flat[k];
  }

  /// Waits for the oldest values sent and not yet received and calls f(slots), slots[rank][k] the
  /// values of each rank < split (for values that do not combine by a plain sum; f reads them in
  /// rank order to keep the bits the same in every block).
  template <typename F>
  __device__ __forceinline__ void receive_slots(F&& f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const int b = receive_turn;
    receive_turn = (receive_turn + 1) % kBuffers;
    const unsigned bar = shared_address(&storage.arrived[b]);
    const unsigned want = (parity >> b) & 1u;
    parity ^= 1u << b;
    unsigned done = 0;
    do {
      asm volatile(
          "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(bar), "r"(want)
          : "memory");
    } while (done == 0);
    f(storage.slots[b]);
#else
    __trap();  // the planner splits rows only on devices with clusters (sm_90 on)
#endif
  }

  __device__ __forceinline__ void sum(float (&v)[K]) {
    send(v);
    receive(v);
  }
  __device__ __forceinline__ void finish() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#endif
  }
};

/// The software pipeline of a staged row kernel: copy(it, stage) starts iteration it's copies into
/// `stage`, use(it, stage) consumes them; depth - 1 iterations are in flight while one is used.
/// Iteration it is copied into the stage iteration it - 1 was read from, after that read.
template <typename Copy, typename Use>
__device__ __forceinline__ void staged_row_walk(std::int64_t iterations, int depth, Copy&& copy, Use&& use) {
  for (int s = 0; s < depth - 1; ++s) {
    if (s < iterations) copy(std::int64_t(s), s);
    cp_async_commit();  // one group per iteration, empty ones included: the wait count stays exact
  }
  int use_stage = 0, copy_stage = depth - 1;
  for (std::int64_t it = 0; it < iterations; ++it) {
    if (it + depth - 1 < iterations) copy(it + depth - 1, copy_stage);
    cp_async_commit();
    cp_async_wait(depth - 1);  // iteration it's group has landed
    use(it, use_stage);
    use_stage = use_stage + 1 == depth ? 0 : use_stage + 1;
    copy_stage = copy_stage + 1 == depth ? 0 : copy_stage + 1;
  }
  cp_async_wait(0);
}

/// staged_row_walk for a walk that finishes each iteration one step late: head(it, stage) and
/// tail(it - 1, stage of it - 1), so iteration it - 1's stage is held until its tail and iteration
/// it + depth - 1 is copied into it after that; depth - 2 iterations are in flight while one is used
/// (depth >= 2). For rows whose finish waits on other blocks (the cluster sums of a split row).
/// Head first (kTailFirst = false): the wait for one row's sums overlaps the head of the next; but
/// the copy into the freed stage is issued only after both, and with two stages iteration it + 1
/// waits for that copy at once. Tail first: tail(it - 1), the copy, then head(it): the copy overlaps
/// head(it), and the wait for row it - 1's sums overlaps only the wait for row it's stage.
template <bool kTailFirst = false, typename Copy, typename Head, typename Tail>
__device__ __forceinline__ void staged_row_walk_deferred(std::int64_t iterations, int depth, Copy&& copy, Head&& head,
                                                         Tail&& tail) {
  for (int s = 0; s < depth - 1; ++s) {
    if (s < iterations) copy(std::int64_t(s), s);
    cp_async_commit();
  }
  int use_stage = 0, previous_stage = depth - 1;  // the stage of it - 1 (unused before the first tail)
  for (std::int64_t it = 0; it < iterations; ++it) {
    cp_async_wait(depth - 2);  // depth - 1 + it groups committed: iteration it's has landed
    if constexpr (!kTailFirst) head(it, use_stage);
    if (it > 0) tail(it - 1, previous_stage);
    if (it + depth - 1 < iterations) copy(it + depth - 1, previous_stage);
    cp_async_commit();
    if constexpr (kTailFirst) head(it, use_stage);
    previous_stage = use_stage;
    use_stage = use_stage + 1 == depth ? 0 : use_stage + 1;
  }
  if (iterations > 0) tail(iterations - 1, previous_stage);
  cp_async_wait(0);
}

/// The number of this lane's vector slots inside a row of n columns (slots k * G + lane < n / VEC),
/// counted without a division.
template <int ITEMS, int VEC>
__device__ __forceinline__ int lane_vectors(const RowGroup& g, int n) {
  int valid = 0;
#pragma unroll
  for (int k = 0; k < ITEMS; ++k) valid += g.column<VEC>(k) < n ? 1 : 0;
  return valid;
}

/// Stores VEC values computed by value(i) at slot k of this lane, when the slot is inside the row.
template <typename T, int VEC, typename F>
__device__ __forceinline__ void store_slot(T* row, const RowGroup& g, int k, int n, bool active, F&& value) {
  const int col = g.column<VEC>(k);
  if (!active || col >= n) return;
  float out[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) out[i] = value(i);
  store_vec<T, VEC>(row + col, out);
}

/// VEC consecutive weight (or bias) values as loaded, in 16-byte loads where VEC allows (the planner's
/// vec rule requires 16-byte aligned weight pointers whenever VEC > 1, never 32: fp32 weights of 8
/// columns are two loads), read as floats where used. (Where one load holds them, Pack<W, VEC> is the
/// same and is what the kernels keep: through this struct ptxas scheduled some instances otherwise.)
template <typename W, int VEC>
struct WeightVec {
  static constexpr int kChunk = int(16 / sizeof(W)) < VEC ? int(16 / sizeof(W)) : VEC;
  Pack<W, kChunk> chunks[VEC / kChunk];
  __device__ __forceinline__ static WeightVec load(const W* p) {
    WeightVec v;
#pragma unroll
    for (int c = 0; c < VEC / kChunk; ++c) v.chunks[c] = Pack<W, kChunk>::load(p + c * kChunk);
    return v;
  }
  __device__ __forceinline__ float get(int i) const { return chunks[i / kChunk].get(i % kChunk); }
};

/// VEC consecutive weight values as floats, in WeightVec's 16-byte loads.
template <typename W, int VEC>
__device__ __forceinline__ void load_weight_vec(const W* p, float (&out)[VEC]) {
  constexpr int kChunk = WeightVec<W, VEC>::kChunk;
#pragma unroll
  for (int c = 0; c < VEC / kChunk; ++c) {
    const Pack<W, kChunk> pack = Pack<W, kChunk>::load(p + c * kChunk);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) out[c * kChunk + j] = pack.get(j);
  }
}

/// VEC consecutive weight (or bias) values from `weight + col`, or `fallback` (1 or 0) each when there
/// is no weight: always every element written, so the array stays in registers.
template <typename W, int VEC>
__device__ __forceinline__ void load_weight_vec_or(const W* weight, int col, float fallback, float (&out)[VEC]) {
  if (weight != nullptr) {
    load_weight_vec<W, VEC>(weight + col, out);
  } else {
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = fallback;
  }
}

/// Weight (or bias) values of this lane's slots, kept in registers in their storage type (16-bit
/// weights take half the registers of fp32) and read as floats where used. An absent weight, and
/// slots past N, hold `fallback` (1 or 0: exact in every format), so reading needs no branch.
template <typename W, int ITEMS, int VEC>
struct WeightFragment {
  Pack<W, VEC> p[ITEMS];

  __device__ __forceinline__ float at(int k, int i) const { return p[k].get(i); }

  __device__ __forceinline__ void load(const W* weight, const RowGroup& g, int n, float fallback) {
    constexpr int kChunk = int(16 / sizeof(W)) < VEC ? int(16 / sizeof(W)) : VEC;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int col = g.column<VEC>(k);
      if (weight != nullptr && col < n) {
#pragma unroll
        for (int c = 0; c < VEC / kChunk; ++c) {
          p[k].assign(c * kChunk, Pack<W, kChunk>::load(weight + col + c * kChunk));
        }
      } else {
        p[k].fill(fallback);
      }
    }
  }
};

/// Whether a lane keeps a weight array in registers for the whole row walk (kKeptWeightBytes): only
/// in staged kernels. An unstaged kernel loads its weights with each row, one memory round trip for
/// both: weights loaded before the walk made the rows wait for them, the compiler hoisting their
/// conversion to fp32 above the row loads (SASS at 2e5db88: two round trips in series in every small
/// forward and dX launch). With 16-byte vectors an unstaged walk is one row per group (plan_stages
/// stages any longer walk when shared memory allows); scalar rows (vec 1) and walks left unstaged
/// re-read the weights per row, from L1 after the first.
template <typename W, int ITEMS, int VEC, bool kStaged>
constexpr bool keep_weights() { return kStaged && sizeof(W) * ITEMS * VEC <= kKeptWeightBytes; }

/// Streaming access for rows too long to cache: lane l visits vectors l, l+G, ... of the row,
/// kStreamUnroll of them per step so that several loads are in flight per thread. load(u, col) is
/// called for the step's vectors first, then use(u, col), each for col < n, in a fixed order.
constexpr int kStreamUnroll = 4;
// The columns of a row are ints in the row walks: validation caps CUDA rows at kMaxCudaRowLength, and
// the largest column a walk forms runs past N by under two steps of kStreamUnroll vectors of a block.
static_assert(kMaxCudaRowLength + 2 * std::int64_t(1024) * 8 * kStreamUnroll <= 0x7fffffff,
              "a row's columns must fit an int");
template <int VEC, typename Load, typename Use>
__device__ __forceinline__ void stream_row(const RowGroup& g, int n, Load&& load, Use&& use) {
  const int step = g.threads * VEC;
  for (int base = g.lane * VEC; base < n; base += step * kStreamUnroll) {
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int col = base + u * step;
      if (col < n) load(u, col);
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      const int col = base + u * step;
      if (col < n) use(u, col);
    }
  }
}

/// kStreamUnroll vectors of a row in flight, in storage type.
template <typename T, int VEC>
struct StreamBuffer {
  Pack<T, VEC> p[kStreamUnroll];
  __device__ __forceinline__ void load(int u, const T* at) { p[u] = Pack<T, VEC>::load(at); }
  __device__ __forceinline__ float at(int u, int i) const { return p[u].get(i); }
};

}  // namespace normkit::cuda

namespace normkit::cuda {

template <int V>
using IntConst = std::integral_constant<int, V>;

/// Calls f(IntConst<ITEMS>, IntConst<VEC>, BoolConst<kStaged>, BoolConst<kSplit>) for the plan's
/// runtime (items, vec, stages > 0, split > 1): the template instances that exist are items in {1, 2,
/// 4, 8} up to kMaxItems, 0 (streaming) when kStreaming, vec in {1, 16 / sizeof(T)}, staged ones for
/// cached rows of 16-byte vectors, and split ones for kSplitInstanceItems items of 16-byte vectors
/// only (0: the kernel has no split instances; the planner's split rules, split_rows and fused_split
/// in planner.cpp, use exactly these items) -- and for kWideSplitItems (0: none), which may exceed
/// kMaxItems: such items have split instances only. Scalar rows (vec 1) have unsplit instances up to
/// kMaxScalarItems (8 where it exceeds kMaxItems: the wide scalar instances, kMaxScalarRowItems).
template <bool V>
using BoolConst = std::integral_constant<bool, V>;

template <typename T, int kMaxItems, bool kStreaming, int kSplitInstanceItems, int kWideSplitItems,
          int kMaxScalarItems = kMaxItems, typename F>
void dispatch_row_shape(const RowShape& shape, F&& f) {
  constexpr int kVec = int(16 / sizeof(T));
  auto call = [&](auto items, auto vec) {
    constexpr int kMaxUnsplitItems = vec() == 1 ? kMaxScalarItems : kMaxItems;
    if constexpr (items() > 0 && vec() > 1) {
      constexpr bool kSplitInstance =
          (kSplitInstanceItems > 0 && items() == kSplitInstanceItems) || (kWideSplitItems > 0 && items() == kWideSplitItems);
      if constexpr (kSplitInstance && vec() == kVec) {
        if (shape.split > 1) {
          if (shape.stages > 0) f(items, vec, BoolConst<true>{}, BoolConst<true>{});
          else f(items, vec, BoolConst<false>{}, BoolConst<true>{});
          return;
        }
      }
    }
    // A split plan on an unsplit instance would walk only the first slice of every row: never.
    if (shape.split > 1)
      throw CudaError("normkit: internal error: no split kernel instance for items = " + std::to_string(shape.items) +
                      ", vec = " + std::to_string(shape.vec));
    if constexpr (items() > 0 && vec() > 1 && items() <= kMaxItems) {
      if (shape.stages > 0) {
        f(items, vec, BoolConst<true>{}, BoolConst<false>{});
        return;
      }
    }
    if constexpr (items() > kMaxUnsplitItems) {
      throw CudaError("normkit: internal error: items = " + std::to_string(shape.items) +
                      " has split kernel instances only (vec = " + std::to_string(shape.vec) + ", split = " +
                      std::to_string(shape.split) + ")");
    } else {
      if (shape.stages > 0)
        throw CudaError("normkit: internal error: no staged kernel instance for items = " +
                        std::to_string(shape.items) + ", vec = " + std::to_string(shape.vec));
      f(items, vec, BoolConst<false>{}, BoolConst<false>{});
    }
  };
  auto with_vec = [&](auto vec) {
    switch (shape.items) {
      case 1: call(IntConst<1>{}, vec); return;
      case 2: call(IntConst<2>{}, vec); return;
      case 4: if constexpr (kMaxItems >= 4 || kWideSplitItems == 4) { call(IntConst<4>{}, vec); return; } break;
      case 8: if constexpr (kMaxItems >= 8 || kWideSplitItems == 8 || (vec() == 1 && kMaxScalarItems >= 8)) { call(IntConst<8>{}, vec); return; } break;
      case 0: if constexpr (kStreaming) { call(IntConst<0>{}, vec); return; } break;
      default: break;
    }
    throw CudaError("normkit: internal error: no kernel instance for items = " + std::to_string(shape.items));
  };
  if (shape.vec == kVec) with_vec(IntConst<kVec>{});
  else if (shape.vec == 1) with_vec(IntConst<1>{});
  else throw CudaError("normkit: internal error: no kernel instance for vec = " + std::to_string(shape.vec));
}

}  // namespace normkit::cuda
