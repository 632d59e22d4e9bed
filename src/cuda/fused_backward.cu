// Strategy "fused": the whole backward in one pass over x and dy (3 passes over M x N in all:
// read x, read dy, write dx -- the unfused strategies read x and dy twice).
//
// A persistent grid (planner: one block per SM, fewer for small M) walks the rows; each row group
// computes dx exactly like backward_dx.cu, and because a lane owns the same columns in every row it
// accumulates dgamma = sum dy * xhat and dbeta = sum dy for its columns in fp32 registers. At the end
// each block sums its row groups in shared memory (fixed order) into one row of fp32 partials
// [blocks, N]; then either the partial reduce as a second launch, or (plan.single_launch) a grid-wide
// sync and the same reduce in one cooperative launch. A grid of one block writes dgamma/dbeta directly.
// Small problems (plan.cluster_blocks) run as one thread-block cluster: each block keeps its partial
// row in its own shared memory, and after a cluster barrier every block sums a share of the columns
// over all blocks' rows (distributed shared memory) and writes dgamma/dbeta: one launch, no workspace.
// Rows too long for one block (kSplit, RowShape::split) are split over a cluster instead: block r of
// a cluster owns the same column slice of every row its cluster walks, so it accumulates dgamma/dbeta
// for that slice, and the row sums add over the cluster (ClusterSum). The clusters are the row
// walkers: partials [clusters, N], reduced by the second launch.
// No float atomics anywhere, and every sum runs in a fixed order: the same inputs give the same bits.
#include <cooperative_groups.h>

#include <type_traits>

#include "cuda/column_reduce.cuh"

namespace normkit::cuda {
namespace {

/// How the block partials become dgamma/dbeta.
enum class FusedFinish : int {
  Direct,        // one block: its partial row is the answer
  SecondLaunch,  // partials [blocks, N] in the workspace, reduced by reduce_partials_kernel
  GridSync,      // the same reduce after a grid-wide sync (cooperative launch)
  Cluster,       // the grid is one cluster: partial rows in shared memory, reduced across it
};

/// The Cluster finish: this block's partial rows (`arrays` rows of N floats in its shared memory)
/// are visible to the cluster after the first barrier; block b of B then sums columns b*threads +
/// tid, (b + B)*threads + tid, ... over every block's rows, rank 0 first (fixed order), and writes
/// them. The second barrier keeps each block's shared memory alive until all reads are done.
template <typename W>
__device__ __forceinline__ void reduce_over_cluster(const float* block_partial, int cols, int arrays, W* const (&out)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int blocks = int(cluster.num_blocks());
  const int total = arrays * cols;
  for (int idx = int(cluster.block_rank()) * int(blockDim.x) + int(threadIdx.x); idx < total;
       idx += blocks * int(blockDim.x)) {
    float sum = 0.f;
    for (int b = 0; b < blocks; ++b) sum += cluster.map_shared_rank(block_partial, b)[idx];
    out[idx / cols][idx % cols] = from_float<W>(sum);
  }
  cluster.sync();
#else
  __trap();  // the planner plans clusters only for devices that have them (sm_90 on)
#endif
}

template <typename T, typename W, bool kRms, bool kStaged, bool kSplit, int ITEMS, int VEC, bool kDeferred>
__global__ void __launch_bounds__(kFusedBlockThreads, kFusedBlocksPerSm)
    fused_backward_kernel(const BackwardParams<T, W> p, float* partials, FusedFinish finish) {
  __shared__ float scratch_buffers[GroupScratch::kFloats];
  GroupScratch scratch(scratch_buffers);
  allow_dependent_launch();  // the partial reduce may be scheduled now; it waits for the partials itself
  const RowGroup g = RowGroup::of_this_thread(p.threads_per_row);
  const bool want_dx = p.dx.data != nullptr;
  // This block's rows and columns: all N columns, or its slice of its cluster's rows (kSplit).
  const RowWalk walk = RowWalk::of_this_block<kSplit>(p.cols, p.split, p.slice_cols);
  __shared__ typename ClusterSum<2>::Storage cluster_storage;
  ClusterSum<2> cluster(cluster_storage, p.split);
  if constexpr (kSplit) {
    if (want_dx) cluster.start();
  }

  // kDeferred (Plan::deferred_sums; staged split rows only): each row is finished one row late
  // (walk_backward_rows_deferred): a row's sums go to the cluster in its head, and its dx waits for
  // the cluster's in its tail, after the next row's head -- the exchange overlaps work instead of
  // the whole block stalling on it once per row.
  static_assert(!kDeferred || (kSplit && kStaged), "only staged split rows defer their sums");
  // Wide split rows (more than kMaxFusedItems vectors per thread, kFusedWideItems) and deferred ones
  // recompute xhat and g from the staged row for dx instead of caching them as floats: the cached
  // [ITEMS][VEC] arrays next to the accumulators would not fit the register budget of
  // kFusedBlockThreads threads (wide), or would have to live across the next row's head (deferred).
  constexpr bool kWide = ITEMS > kMaxFusedItems;
  constexpr bool kRecompute = kWide || kDeferred;
  // Staged walks keep the weights for all their rows; unstaged ones load them with each row, in the
  // same round trip (keep_weights); the wide rows load them slot by slot where they are used.
  constexpr bool kKeepWeights = kStaged && !kWide;
  constexpr bool kFma = fma_row_terms<T>(kSplit);  // xhat and dx as FMAs (RowXhat)
  const W* weight = p.weight != nullptr ? p.weight + walk.col0 : nullptr;
  WeightFragment<W, kWide ? 1 : ITEMS, VEC> w;  // unused by the wide rows (they load per slot)
  if constexpr (kKeepWeights) w.load(weight, g, walk.cols, 1.f);
  // Staged wide rows keep this thread's weights in shared memory after the row stages (the planner
  // reserves them, fused_wide_weight_bytes): each slot's weights are read twice a row, and from global
  // memory those reads went mostly to L2 beside the stages. A slot's weights are one 16-byte chunk
  // (16-bit weights on 16-bit rows, fp32 on fp32) or two (fp32 weights on 16-bit rows). Each thread
  // stores and reads only its own chunks: no barrier. (Deferred walks stage no statistics, so the
  // stages end at stages x 2 tensors x ITEMS slots a thread.)
  constexpr int kWeightSlotBytes = int(sizeof(Pack<W, VEC>));
  constexpr bool kWeightsInSmem = kWide && kStaged && fused_wide_weights_in_smem(kWeightSlotBytes);
  static_assert(!kWeightsInSmem || kDeferred, "the weights follow stages without statistics");
  constexpr int kChunkElems = 16 / int(sizeof(W));                        // weights in one 16-byte chunk
  constexpr int kChunks = VEC / kChunkElems > 0 ? VEC / kChunkElems : 1;  // chunks a slot (kWeightsInSmem)
  using WeightChunk = Pack<W, kChunkElems>;
  unsigned weight_slots = 0;  // shared address of this thread's first weight chunk (kWeightsInSmem)
  // chunk c of slot k: the block's chunks of one (slot, chunk) lie together, 16 bytes a thread
  const auto weight_chunk = [&](int k, int c) { return weight_slots + unsigned(k * kChunks + c) * blockDim.x * 16u; };
  if constexpr (kWeightsInSmem) {
    weight_slots = opaque(shared_address(row_kernel_smem) +
                          unsigned(p.stages * 2 * ITEMS * int(blockDim.x) + int(threadIdx.x)) * 16u);
    // Every chunk is written (ones without weights or past the slice), so the row's first pass
    // (accumulate) reads them without predicates: a padding slot's ones meet dy = 0 and add nothing.
    // The dx pass keeps the predicated read: without it too the LayerNorm bf16 instance spilled 72
    // bytes and ran 38 % slower (docs/NOTES.md entry 73).
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const int col = g.column<VEC>(k);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        WeightChunk chunk;
        if (weight != nullptr && col < walk.cols) chunk = WeightChunk::load(weight + col + c * kChunkElems);
        else chunk.fill(1.f);
        store_shared_16(weight_chunk(k, c), chunk);
      }
    }
  }
  float acc_dgamma[ITEMS][VEC], acc_dbeta[ITEMS][VEC];
#pragma unroll
  for (int k = 0; k < ITEMS; ++k)
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc_dgamma[k][i] = acc_dbeta[k][i] = 0.f;

  // The recomputing rows: the same terms as RowGrad (xhat = (x - mean) * rstd, g = dy * w rounded
  // once), each computed where it is used, from slots (staged: shared memory) and weights (wide: L1)
  // read again for dx; inactive groups hold zeros and add nothing (dy = 0).
  const auto shared_weights = [&](int k, float (&wk)[VEC]) {
    if constexpr (kWeightsInSmem) {
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        WeightChunk chunk;
        load_shared_16(weight_chunk(k, c), chunk);
#pragma unroll
        for (int i = 0; i < kChunkElems; ++i) wk[c * kChunkElems + i] = chunk.get(i);
      }
    }
  };
  // unpredicated (std::true_type): the shared-memory slots' read without a branch (see above)
  const auto weights = [&](int k, float (&wk)[VEC], auto unpredicated) {
    if constexpr (kWeightsInSmem && decltype(unpredicated)::value) {
      shared_weights(k, wk);
    } else if constexpr (kWide) {
      const int col = g.column<VEC>(k);
      if (weight != nullptr && col < walk.cols) {
        if constexpr (kWeightsInSmem) {
          shared_weights(k, wk);
        } else {
          load_weight_vec<W, VEC>(weight + col, wk);
        }
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) wk[i] = 1.f;
      }
    } else {
#pragma unroll
      for (int i = 0; i < VEC; ++i) wk[i] = w.at(k, i);
    }
  };
  // This lane's row sums of g and g * xhat -> the row's: over the row group, and a split row's over
  // its cluster too (the same rows for every block of the cluster). The block's sums are the first
  // warp's alone (block_sum_in_first_warp), which sends them; the other warps skip the second
  // butterfly and wait for the cluster's. H200 A/B against every warp summing the block (docs/
  // NOTES.md entry 72): LayerNorm fp16 7-8 % faster, bf16 2 %, fp32 2.5-4.6 %, RMSNorm 16-bit 4-5 %;
  // but RMSNorm fp32 2-5 % slower, so that instance keeps the block-wide sum.
  constexpr bool kFirstWarpSends = kSplit && !(kRms && sizeof(T) == 4);
  // The deferred (wide) walk's head sends the same way for 16-bit rows only: LayerNorm 7-8.5 % faster
  // at 1024 / 4096 x 262144 (entry 73; fp32 measured 0.5-2.5 % slower). RMSNorm's 16-bit instance
  // spilled 28 bytes with it then and ran 18-24 % slower; since the FMA row terms (c7ddbf2) it fits,
  // and RMSNorm 1024-4096 x 131072-262144 took 0.94-0.96x the time (fp32 weights 0.93-0.94x, though
  // they spill 32 bytes instead of 16; entry 84).
  constexpr bool kDeferredFirstWarpSends = kDeferred && sizeof(T) == 2;
  const auto row_sums = [&](float (&sums)[2]) {
    if constexpr (kFirstWarpSends) {
      if (block_sum_in_first_warp(sums, scratch)) cluster.send(sums);
      cluster.receive(sums);
    } else {
      row_group_sum(sums, g.threads, scratch);
      if constexpr (kSplit) cluster.sum(sums);
    }
  };
  // Accumulates the row into dgamma / dbeta and returns this lane's row sums of g and g * xhat.
  const auto accumulate = [&](const auto& xv, const auto& dyv, float mean, float rstd, float (&sums)[2]) {
    const RowXhat<kRms, kFma> xhat_of(mean, rstd);
    sums[0] = sums[1] = 0.f;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const Pack<T, VEC> xk = xv.pack(k), dyk = dyv.pack(k);
      float wk[VEC];
      weights(k, wk, std::true_type{});
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        const float dy = dyk.get(i);
        const float xhat = xhat_of(xk.get(i));
        const float gv = __fmul_rn(dy, wk[i]);
        acc_dgamma[k][i] += dy * xhat;
        acc_dbeta[k][i] += dy;
        sums[0] += gv;
        sums[1] += gv * xhat;
      }
    }
  };
  // dx of the row from its sums over the whole row.
  const auto store_dx = [&](std::int64_t r, bool active, const auto& xv, const auto& dyv, float mean, float rstd,
                            const float (&sums)[2]) {
    const DxOfRow<kRms, kFma> dx(rstd, sums[0], sums[1], p.inv_cols);
    const RowXhat<kRms, kFma> xhat_of(mean, rstd);
    T* const dx_row = p.dx.row(active ? r : 0) + walk.col0;
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      const Pack<T, VEC> xk = xv.pack(k), dyk = dyv.pack(k);
      float wk[VEC];
      weights(k, wk, std::false_type{});
      store_slot<T, VEC>(dx_row, g, k, walk.cols, active, [&](int i) {
        return dx(__fmul_rn(dyk.get(i), wk[i]), xhat_of(xk.get(i)));
      });
    }
  };

  if constexpr (kDeferred) {
    // fp32 weights on 16-bit rows keep their 32-byte weight slots in shared memory at the cost of the
    // third stage (fused_wide_weights_in_smem): with two stages the head-first order leaves no copy in
    // flight while a row is worked on (staged_row_walk_deferred), so those rows walk tail first.
    constexpr bool kTailFirst = kWeightsInSmem && kWeightSlotBytes == 32;
    walk_backward_rows_deferred<kRms, ITEMS, VEC, kTailFirst>(
        p, g, walk,
        [&](std::int64_t, bool, const auto& xv, const auto& dyv, float mean, float rstd) {
          float sums[2];
          accumulate(xv, dyv, mean, rstd, sums);
          if (want_dx) {  // the same rows for every block of the cluster
            if constexpr (kDeferredFirstWarpSends) {
              if (block_sum_in_first_warp(sums, scratch)) cluster.send(sums);
            } else {
              row_group_sum(sums, g.threads, scratch);
              cluster.send(sums);
            }
          }
        },
        [&](std::int64_t r, bool active, const auto& xv, const auto& dyv, float mean, float rstd) {
          if (want_dx) {
            float sums[2];
            cluster.receive(sums);
            store_dx(r, active, xv, dyv, mean, rstd, sums);
          }
        });
  } else {
    walk_backward_rows<kStaged, kRms, ITEMS, VEC, kRecompute && kStaged>(
        p, g, walk,
        [&](std::int64_t r, bool active, const auto& xv, const auto& dyv, float mean, float rstd) {
          if constexpr (kRecompute) {
            float sums[2];
            accumulate(xv, dyv, mean, rstd, sums);
            if (want_dx) {
              row_sums(sums);
              store_dx(r, active, xv, dyv, mean, rstd, sums);
            }
          } else {
            if constexpr (!kKeepWeights) w.load(weight, g, walk.cols, 1.f);
            RowGrad<ITEMS, VEC> row;
            row.compute(xv, dyv, w, RowXhat<kRms, kFma>(mean, rstd));
            // inactive groups hold zeros: they add nothing (dy = 0)
#pragma unroll
            for (int k = 0; k < ITEMS; ++k)
#pragma unroll
              for (int i = 0; i < VEC; ++i) {
                const float dy = dyv.at(k, i);
                acc_dgamma[k][i] += dy * row.xhat[k][i];
                acc_dbeta[k][i] += dy;
              }
            if (want_dx) {
              float sums[2];
              row.sums(sums[0], sums[1]);
              row_sums(sums);
              row.template store_dx<kRms, kFma>(p.dx.row(active ? r : 0) + walk.col0, rstd, sums[0], sums[1], g,
                                                p.inv_cols, walk.cols, active);
            }
          }
        });
  }
  // No block of the cluster leaves (its slots are read by the others) before all have read them.
  if constexpr (kSplit) {
    if (want_dx) cluster.finish();
  }

  // Block partials: sum the row groups of this block, slot by slot, through shared memory (the
  // dynamic buffer, free now: the walk has waited for its last copies). Where each column's sum
  // goes depends on the finish: the final value (Direct), a workspace row, or the block's partial
  // rows in shared memory after the staging area (Cluster). A split block writes its slice of its
  // cluster's row (the walkers' partial rows are the clusters').
  float* stage = reinterpret_cast<float*>(row_kernel_smem);
  float* block_partial = stage + blockDim.x * VEC;
  W* out[2];
  const int arrays = gamma_beta_outputs(p, out);
  const std::int64_t partial_rows = walk.units;
  for (int a = 0; a < arrays; ++a) {
    const bool is_dgamma = out[a] == p.dweight;
    float* partial_row = finish == FusedFinish::Cluster ? block_partial + std::int64_t(a) * p.cols
                         : finish == FusedFinish::Direct
                             ? nullptr
                             : partials + (std::int64_t(a) * partial_rows + walk.unit) * p.cols + walk.col0;
    W* const out_slice = out[a] + walk.col0;
    const auto emit = [&](int col, float sum) {
      if (col >= walk.cols) return;
      if (partial_row != nullptr) partial_row[col] = sum;
      else out_slice[col] = from_float<W>(sum);
    };
#pragma unroll
    for (int k = 0; k < ITEMS; ++k) {
      __syncthreads();
      // 16-byte stores where VEC allows: a warp's scalar stores at a stride of VEC floats hit 32 / VEC
      // banks (8-way conflicts for VEC = 8, 55 % of the kernel's shared wavefronts in excess at 1024 x
      // 768 fp16, ncu at 29fc9f5); float4 stores cut the wavefronts 4x (the suites measured it neutral
      // at ad5488c: the epilogue is not where the small launches lose their time).
      // (Each value selected on its own: a pointer to one of the two register arrays, chosen at run
      // time, put both in local memory -- 4-5 us more per launch at 8192 x 768.)
      float v[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) v[i] = is_dgamma ? acc_dgamma[k][i] : acc_dbeta[k][i];
      if constexpr (VEC % 4 == 0) {
#pragma unroll
        for (int i = 0; i < VEC; i += 4)
          *reinterpret_cast<float4*>(stage + threadIdx.x * VEC + i) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
      } else {
#pragma unroll
        for (int i = 0; i < VEC; ++i) stage[threadIdx.x * VEC + i] = v[i];
      }
      __syncthreads();
      // One thread per column over the block's row groups. Spreading a column over several threads
      // (two more barriers per slot) measured slower at 0213d96 wherever it mattered (N = 256..512:
      // 5.5 -> 7.1 us, bf16 cluster probe), and only 0.1-0.2 us faster at N = 64.
      const int slot_columns = g.threads * VEC;  // columns covered by slot k across the lanes
      for (int c = threadIdx.x; c < slot_columns; c += blockDim.x) {
        float sum = 0.f;
        for (int group = 0; group < p.rows_per_block; ++group) sum += stage[group * slot_columns + c];
        emit(k * slot_columns + c, sum);
      }
    }
  }
  if (arrays == 0) return;
  if (finish == FusedFinish::Cluster) {
    reduce_over_cluster<W>(block_partial, p.cols, arrays, out);
    return;
  }
  if (kSplit || finish != FusedFinish::GridSync) return;  // a cooperative launch takes no clusters

  cooperative_groups::this_grid().sync();  // every block's partial row is written
  const int reduce_rows = int(blockDim.x) / kWarpSize;
  reduce_partials<W>(partials, partial_rows, p.cols, arrays, out, blockIdx.x, gridDim.x, int(threadIdx.x) % kWarpSize,
                     int(threadIdx.x) / kWarpSize, reduce_rows, stage);
}

}  // namespace

template <typename T, typename W>
void launch_fused_backward(const BackwardProblem& p, const Plan& plan, float* partials, cudaStream_t stream) {
  const BackwardParams<T, W> params = make_backward_params<T, W>(p, plan);
  // Direct: one block, whose partial row is the answer (no workspace, no second step).
  const FusedFinish finish = plan.cluster_blocks > 0                                   ? FusedFinish::Cluster
                             : plan.partial_rows == 0                                  ? FusedFinish::Direct
                             : plan.single_launch && p.mask().any_gamma_beta()         ? FusedFinish::GridSync
                                                                                       : FusedFinish::SecondLaunch;
  if (finish == FusedFinish::Direct || finish == FusedFinish::Cluster) partials = nullptr;
  const dim3 block(unsigned(plan.row.block_threads()));
  const std::size_t smem = std::size_t(plan.row.smem_bytes);
  // The row walkers: blocks, or clusters of split rows -- as many as the device holds at once, at
  // most the plan's (cluster_grid), so the partial rows may be fewer than the workspace holds.
  std::int64_t walkers = plan.row.blocks;
  dispatch_row_shape<T, kMaxFusedItems, false, kMaxFusedItems, kFusedWideItems>(plan.row, [&](auto items, auto vec, auto staged,
                                                                             auto split) {
    // Instances: deferred sums for staged split rows (wide ones only deferred, see PlannerTable::
    // fused_deferred_min_split), not deferred for the rest.
    constexpr bool kCanDefer = staged() && split();
    constexpr bool kMustDefer = kCanDefer && items() > kMaxFusedItems;
    if (plan.deferred_sums != kMustDefer && (!kCanDefer || kMustDefer))
      throw CudaError("normkit: internal error: no fused kernel instance with deferred_sums = " +
                      std::to_string(plan.deferred_sums) + " (" + plan.describe() + ")");
    const bool deferred = plan.deferred_sums;
    // Staged wide rows keep their weights after the stages (kWeightsInSmem): the plan must hold them.
    constexpr int kWeightSlotBytes = int(sizeof(Pack<W, vec()>));
    if constexpr (items() > kMaxFusedItems && staged() && fused_wide_weights_in_smem(kWeightSlotBytes)) {
      const std::int64_t needed =
          (std::int64_t(plan.row.stages) * 2 * 16 + kWeightSlotBytes) * items() * plan.row.block_threads();
      if (plan.row.smem_bytes < needed)
        throw CudaError("normkit: internal error: a wide fused plan without room for its weights (" + plan.describe() + ")");
    }
    void (*kernel)(BackwardParams<T, W>, float*, FusedFinish) =
        p.rms ? (deferred ? fused_backward_kernel<T, W, true, staged(), split(), items(), vec(), kCanDefer>
                          : fused_backward_kernel<T, W, true, staged(), split(), items(), vec(), kMustDefer>)
              : (deferred ? fused_backward_kernel<T, W, false, staged(), split(), items(), vec(), kCanDefer>
                          : fused_backward_kernel<T, W, false, staged(), split(), items(), vec(), kMustDefer>);
    allow_dynamic_smem(kernel, plan.row.smem_bytes, "fused_backward_kernel shared memory");
    unsigned blocks = unsigned(plan.row.blocks);
    int cluster_blocks = finish == FusedFinish::Cluster ? int(blocks) : 1;  // Cluster: the whole grid is one
    if constexpr (split()) {
      blocks = cluster_grid(kernel, blocks, block, smem, plan.row.split);
      cluster_blocks = plan.row.split;
    }
    walkers = blocks / cluster_blocks;
    // GridSync: one cooperative launch
    const LaunchMode mode{false, cluster_blocks, finish == FusedFinish::GridSync};
    launch_kernel(kernel, dim3(blocks), block, smem, stream, mode, "fused_backward_kernel launch", params, partials,
                  finish);
  });
  check_launch("fused_backward_kernel");
  if (finish == FusedFinish::SecondLaunch && p.mask().any_gamma_beta())
    launch_reduce_partials<T, W>(params, partials, walkers, plan.columns, plan.programmatic_launch, stream);
}

#define NORMKIT_INSTANTIATE(T, W) \
  template void launch_fused_backward<T, W>(const BackwardProblem&, const Plan&, float*, cudaStream_t);
NORMKIT_FOR_EACH_TYPE_PAIR(NORMKIT_INSTANTIATE)
#undef NORMKIT_INSTANTIATE

}  // namespace normkit::cuda
