// The planner: every threshold and launch shape of normkit is decided here, from PlannerTable.
// Host-only C++; the CUDA layer launches exactly what the plan says.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "normkit/plan.h"

namespace normkit {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// A cache line of L1 and L2 (the unit a warp's global accesses are split into): split rows' slices
/// start on one (split_slice_cols).
constexpr std::int64_t kSliceLineBytes = 128;

int next_pow2(std::int64_t v) {
  int p = 1;
  while (p < v && p < (1 << 30)) p <<= 1;
  return p;
}

/// Template instances exist for items in {1, 2, 4, 8} (up to kMaxRowItems; 8 for the wide scalar rows,
/// kMaxScalarRowItems): round up to one of them.
int round_items(std::int64_t items) {
  if (items <= 1) return 1;
  if (items <= 2) return 2;
  if (items <= 4) return 4;
  return 8;
}

int vector_width(const Problem& p) {
  return p.rows_vector_aligned ? int(16 / dtype_size(p.dtype)) : 1;
}

/// A row layout's blocks: as many groups of `s.threads_per_row` a block as `block_threads` holds (one
/// at least), and a grid over every row that the walks stride over, capped by the table's
/// row_blocks_per_sm (which may ask more than a grid holds).
void set_row_blocks(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t, int block_threads) {
  s.rows_per_block = std::max(1, block_threads / s.threads_per_row);
  const std::int64_t needed = ceil_div(std::max<std::int64_t>(p.rows, 1), s.rows_per_block);
  s.blocks = std::min({needed, std::int64_t(device.sm_count) * t.row_blocks_per_sm, kMaxGridBlocks});
}

/// Row layout for the row-wise kernels: the fewest threads per row that keep each thread's
/// register cache within `max_items` vectors (and the group within the register budget of that many
/// items, max_row_threads), aiming at `items_target` vectors per thread so that enough loads are in
/// flight while small rows still pack several rows into one block. Rows that fit no cached layout
/// are streamed (items = 0) by the largest group.
RowShape row_shape(const Problem& p, const DeviceFacts& device, const PlannerTable& t, int max_items,
                   int max_threads_per_row, int block_threads, int items_target) {
  RowShape s;
  s.vec = vector_width(p);
  const std::int64_t vectors = std::max<std::int64_t>(1, ceil_div(p.cols, s.vec));
  int group = std::min(next_pow2(ceil_div(vectors, std::max(1, items_target))), max_threads_per_row);
  for (;;) {
    const int items = round_items(ceil_div(vectors, group));
    if (ceil_div(vectors, group) <= max_items && group <= max_row_threads(items, s.vec)) {
      s.items = items;
      break;
    }
    if (group >= max_threads_per_row) {
      s.items = 0;
      group = std::min(max_threads_per_row, kStreamRowThreads);
      break;
    }
    group *= 2;
  }
  s.threads_per_row = group;
  set_row_blocks(s, p, device, t, block_threads);
  return s;
}

std::int64_t row_vectors(const Problem& p) { return ceil_div(std::max<std::int64_t>(p.cols, 1), vector_width(p)); }

/// Columns of each block's slice of a row split over `split` blocks (RowShape::slice_cols): the row's
/// vectors shared out evenly, rounded up to whole 128-byte lines, so that every slice of a row that
/// starts on a line starts on one too. Slices 16-112 bytes off the lines (e.g. 45056 16-bit columns
/// over 6 blocks: 939 vectors a slice) make each warp's 512 bytes of copies span five lines instead
/// of four, like the misaligned stages of docs/NOTES.md entry 50: the fused split walk took
/// 1.03-1.17x the time of whole-line slices (entry 70). Rows that are not whole lines were measured
/// no slower rounded (8200 / 12296 columns within 1 %, 57352 0.95x), so they round too. The last
/// block owns what is left, fewer columns. The rounding adds less than a line a block and every
/// block's capacity is whole lines, so a slice fits wherever the even share does; where it would
/// leave the last block nothing, the even share stays.
int split_slice_cols(std::int64_t vectors, int split, int vec, int element_bytes) {
  const std::int64_t line_vectors = std::max<std::int64_t>(1, kSliceLineBytes / (std::int64_t(vec) * element_bytes));
  const std::int64_t even = ceil_div(vectors, std::int64_t(split));
  const std::int64_t aligned = ceil_div(even, line_vectors) * line_vectors;
  return int((aligned * (split - 1) < vectors ? aligned : even) * vec);
}

/// Rows of a few 16-byte vectors (PlannerTable::short_row_max_vectors): the short-row rules were
/// measured on vectorised rows only (N = 64 16-bit), so unvectorised rows keep the general layout.
bool short_vector_rows(const Problem& p, const PlannerTable& t) {
  return vector_width(p) > 1 && row_vectors(p) <= t.short_row_max_vectors;
}

/// Rows that are not 16-byte vectorised and longer than the 1-4 element instances cache (1024
/// columns), cached by the wide scalar instances (kMaxScalarRowItems elements a thread) instead of
/// streamed twice: the smallest power-of-two group of at most scalar_row_max_threads threads (the
/// kernel's) that holds the row, as many rows a block as `block_threads` holds. A group of
/// kScalarRowMaxThreads is the SM's one block, one row at a time: only from
/// PlannerTable::scalar_row_widest_group_min_cols columns. False (s left alone, the rows streamed)
/// for rows longer than the kernel's largest group holds (8192 columns; 4096 in LayerNorm's forward),
/// rows of 4097 columns up to that key, or a device of smaller blocks.
bool scalar_wide_rows(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t,
                      int block_threads) {
  if (vector_width(p) != 1) return false;
  const int kernel_max_group = scalar_row_max_threads(p.op == Op::LayerNormForward);
  const int max_group = std::min(device.max_threads_per_block, kernel_max_group);
  const int group = std::min(next_pow2(ceil_div(p.cols, std::int64_t(kMaxScalarRowItems))), max_group);
  if (ceil_div(p.cols, std::int64_t(group)) > kMaxScalarRowItems || group < kWarpSize) return false;
  if (group == kScalarRowMaxThreads && p.cols < t.scalar_row_widest_group_min_cols) return false;
  RowShape out;
  out.vec = 1;
  out.items = kMaxScalarRowItems;  // the one wide scalar instance (a row of 1024 columns or fewer: 1-4 fit)
  out.threads_per_row = group;
  set_row_blocks(out, p, device, t, std::min(block_threads, kernel_max_group));
  s = out;
  return true;
}

/// Layout of the unsplit forward / dX row kernels (PlannerTable: row_items_target, row_block_threads;
/// then the small-grid, short-row and one-item rules, each measured, see the table's comments). The
/// small-grid rule is about the grid, whatever the rows; the row-length rules only take vectorised
/// rows, where they were measured.
RowShape row_kernel_shape(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  const int max_threads = device.max_threads_per_block;
  // The kernels' launch bounds hold row_kernel_max_threads(items, vec) threads a block: a table's block
  // threads (row_block_threads, small_grid_block_threads: any power of two up to 1024) give way to
  // them: a block of 512 threads with 4 vectors each would not launch (random tables, PlanInvariants).
  const auto shape = [&](int block_threads, int items_target) {
    const RowShape r = row_shape(p, device, t, kMaxRowItems, max_threads, block_threads, items_target);
    const int bound = row_kernel_max_threads(r.items, r.vec);
    return r.block_threads() <= bound ? r : row_shape(p, device, t, kMaxRowItems, max_threads, bound, items_target);
  };
  RowShape s = shape(t.row_block_threads, t.row_items_target);
  if (s.items == 0) {  // too long for 1-4 slots: scalar rows may take the wide 8-element instances
    scalar_wide_rows(s, p, device, t, t.row_block_threads);
    return s;  // the others are streamed
  }
  if (s.blocks < (is_backward(p.op) ? t.small_grid_blocks : t.forward_small_grid_blocks))
    return shape(t.small_grid_block_threads, t.small_grid_items_target);
  if (is_backward(p.op)) return s;
  if (short_vector_rows(p, t)) return shape(t.row_block_threads, t.forward_short_row_items_target);
  if (is_rms(p.op) && vector_width(p) > 1 && row_vectors(p) >= t.rms_forward_one_item_min_vectors &&
      row_vectors(p) <= max_threads)
    return shape(t.row_block_threads, 1);
  return s;
}

/// RMSNorm forward's packed walk (RowShape::packed) where PlannerTable::rms_forward_packed_min_bytes
/// takes it: rows one block of at most kPackedRowMaxThreads threads caches at
/// forward_packed_items_target vectors a thread (more where the row needs them, up to kMaxRowItems),
/// a block per forward_packed_block_threads threads' worth of rows, and a grid that covers every row
/// (the resident blocks hide the latency, not a grid-stride pipeline). False leaves `s` alone.
bool forward_packed_rows(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  if (!is_rms(p.op) || s.items == 0) return false;
  if (p.rows * p.cols * std::int64_t(dtype_size(p.dtype)) < t.rms_forward_packed_min_bytes) return false;
  const int max_threads = std::min(device.max_threads_per_block, kPackedRowMaxThreads);
  RowShape packed = row_shape(p, device, t, kMaxRowItems, max_threads, std::min(t.forward_packed_block_threads, max_threads),
                              t.forward_packed_items_target);
  if (packed.items == 0) return false;
  packed.packed = true;
  packed.blocks = std::min<std::int64_t>(ceil_div(p.rows, packed.rows_per_block), kMaxGridBlocks);
  s = packed;
  return true;
}

/// The forward's one-row-a-block walk (RowShape::block_rows) while x has fewer bytes than
/// PlannerTable::forward_block_rows_below_bytes (16-bit LayerNorm rows of more than kBlockRowMaxThreads
/// vectors also below ln_forward_block_rows_wide_below_bytes, rows of at most kBlockRowMinThreads
/// vectors below forward_block_rows_narrow_below_bytes): vectorised rows of more than kShortRowMaxLanes
/// vectors (a warp's worth: shorter rows have the short-row walk), a block of the next power of two of
/// vectors / forward_block_rows_items_target threads (16-bit LayerNorm from
/// ln_forward_block_rows_four_items_min_bytes: 4 vectors a thread), kBlockRowMinThreads..
/// kBlockRowMaxThreads, then more vectors a thread where the row needs them (up to kBlockRowMaxItems),
/// a block per row. False leaves `s` alone.
bool forward_block_rows(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  const std::int64_t vectors = row_vectors(p);
  if (vector_width(p) == 1 || vectors <= kShortRowMaxLanes || p.rows > kMaxGridBlocks) return false;
  const std::int64_t bytes = p.rows * p.cols * std::int64_t(dtype_size(p.dtype));
  const bool ln_16bit = !is_rms(p.op) && dtype_size(p.dtype) == 2;
  std::int64_t below = t.forward_block_rows_below_bytes;
  if (vectors <= kBlockRowMinThreads) below = std::min(below, t.forward_block_rows_narrow_below_bytes);
  if (bytes >= below) return false;
  const int items_target = ln_16bit && bytes >= t.ln_forward_block_rows_four_items_min_bytes
                               ? 4
                               : t.forward_block_rows_items_target;
  const int max_threads = std::min(device.max_threads_per_block, kBlockRowMaxThreads);
  if (max_threads < kBlockRowMinThreads) return false;  // (std::clamp needs its bounds in order)
  const std::int64_t wanted = next_pow2(ceil_div(vectors, std::int64_t(items_target)));
  const int threads = int(std::clamp<std::int64_t>(wanted, kBlockRowMinThreads, max_threads));
  const std::int64_t items = next_pow2(ceil_div(vectors, std::int64_t(threads)));
  if (items > kBlockRowMaxItems) return false;
  // 16-bit LayerNorm rows wider than a block of vectors: their blocks of fewer vectors a thread lost
  // to the staged walk from ln_forward_block_rows_wide_below_bytes
  const bool wide = ln_16bit && vectors > kBlockRowMaxThreads;
  if (wide && items < kBlockRowMaxItems && bytes >= t.ln_forward_block_rows_wide_below_bytes) return false;
  RowShape out;
  out.vec = vector_width(p);
  out.items = int(items);
  out.threads_per_row = threads;
  out.rows_per_block = 1;
  out.blocks = p.rows;
  out.block_rows = true;
  const bool mixed = dtype_size(p.weight_dtype) > dtype_size(p.dtype);  // fp32 weights on 16-bit rows
  out.block_rows_packed = block_rows_packed_instance(is_rms(p.op), int(dtype_size(p.dtype)),
                                                     int(dtype_size(p.weight_dtype)), threads, int(items)) &&
                          p.rows > std::int64_t(device.sm_count) * t.forward_block_rows_packed_min_rows_per_sm &&
                          (!mixed || bytes >= (threads == kBlockRowMaxThreads
                                                   ? t.forward_block_rows_packed_mixed_widest_min_bytes
                                                   : t.forward_block_rows_packed_mixed_min_bytes));
  s = out;
  return true;
}

/// The forward's short-row walk (RowShape::short_rows) where PlannerTable::forward_short_rows_min_bytes
/// and forward_short_rows_max_vectors take it, or for LayerNorm ln_forward_warp_rows_min_bytes:
/// vectorised rows, the next power of two of their vectors in lanes up to a warp (kShortRowMaxLanes),
/// then more vectors a lane (1, 2, 4, 8, 16), short_rows_per_group(items) rows a group, a grid over every
/// row. False leaves `s` alone.
bool forward_short_rows(RowShape& s, const Problem& p, const PlannerTable& t) {
  const std::int64_t vectors = row_vectors(p);
  if (vector_width(p) == 1 || vectors > kShortRowMaxVectors) return false;
  const std::int64_t bytes = p.rows * p.cols * std::int64_t(dtype_size(p.dtype));
  const bool short_rows = vectors <= t.forward_short_rows_max_vectors && bytes >= t.forward_short_rows_min_bytes;
  // the longest rows (kShortRowMaxItems vectors a lane) have their own LayerNorm threshold
  const bool longest_rows = vectors > std::int64_t(kShortRowMaxLanes) * (kShortRowMaxItems / 2);
  const bool ln_warp_rows = !is_rms(p.op) && bytes >= (longest_rows ? t.ln_forward_long_warp_rows_min_bytes
                                                                    : t.ln_forward_warp_rows_min_bytes);
  if (!short_rows && !ln_warp_rows) return false;
  RowShape out;
  out.vec = vector_width(p);
  out.threads_per_row = int(std::min<std::int64_t>(next_pow2(vectors), kShortRowMaxLanes));
  out.items = int(next_pow2(ceil_div(vectors, out.threads_per_row)));  // 1, 2, 4, 8, 16
  out.rows_per_block = kShortRowBlockThreads / out.threads_per_row;
  out.blocks = ceil_div(p.rows, std::int64_t(out.rows_per_block) * short_rows_per_group(out.items));
  if (out.blocks > kMaxGridBlocks) return false;  // the walk has no grid stride: its grid covers every row
  out.short_rows = true;
  s = out;
  return true;
}

/// Blocks of a row kernel resident per SM as its __launch_bounds__ guarantee them (the register
/// budget of row_kernel_max_threads(items, vec) threads, row_kernel_min_blocks of them).
int guaranteed_row_blocks_per_sm(const RowShape& s) {
  return std::max(1, row_kernel_max_threads(s.items, s.vec) * row_kernel_min_blocks(s.items, s.vec) / s.block_threads());
}

/// Shared-memory staging of a row-cached kernel (RowShape::stages): `tensors` rows (x; or x and dy)
/// plus, with `stats`, the row's mean and rstd per stage, copied 16 bytes at a time, so only
/// vectorised rows are staged. As many stages as the table asks, fewer when `resident` blocks (what
/// the grid counts on being co-resident) would not fit the SM's shared memory next to the
/// kernels' static scratch, and never more than the row iterations a block walks (a block that
/// walks one iteration has nothing to overlap: it is not staged), nor more than
/// PlannerTable::row_stage_bytes_per_sm asks (`extra_stage`: one stage more, for a walk that holds
/// its previous row's stage or stalls once a row on its cluster). `floor_bytes` is dynamic memory
/// the kernel needs anyway (fused: its block partial staging, which reuses the stages' memory after
/// the walk); `after_stages_bytes` is memory a staged walk keeps next to its stages for the whole walk
/// (fused wide rows: their weights), reserved only where the walk is staged.
void plan_stages(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t, int tensors,
                 bool stats, int resident, std::int64_t grid_blocks, std::int64_t floor_bytes,
                 bool extra_stage = false, std::int64_t after_stages_bytes = 0) {
  // The row kernels' static shared memory, which the dynamic buffer follows: at most 1152 bytes (a
  // split kernel's GroupScratch and ClusterSum storage, 1056, rounded up to the buffer's 128-byte
  // alignment, row_kernel_smem).
  constexpr std::int64_t kStaticScratch = 1152;
  s.stages = 0;
  s.smem_bytes = floor_bytes;
  if (s.items == 0 || s.vec == 1 || t.row_pipeline_stages < 2 || p.rows == 0) return;
  const std::int64_t iterations = ceil_div(p.rows, std::max<std::int64_t>(1, grid_blocks) * s.rows_per_block);
  if (iterations < 2) return;
  const std::int64_t per_stage =
      std::int64_t(s.block_threads()) * (std::int64_t(tensors) * s.items * 16 + (stats ? 2 * std::int64_t(sizeof(float)) : 0));
  // (the opt-in limit counts the static memory too)
  const std::int64_t budget =
      std::min<std::int64_t>(device.smem_per_block_optin, device.smem_per_sm / resident - kSmemReservedPerBlock) -
      kStaticScratch - after_stages_bytes;
  // Row bytes the SM's resident blocks copy per stage (the statistics left out): stages beyond
  // row_stage_bytes_per_sm of them were measured slower, not faster. A walk that holds its previous
  // row's stage (deferred sums), or a split row's (fused_split_extra_stage_min_split), gets one on top.
  const std::int64_t row_bytes_per_sm = std::int64_t(s.block_threads()) * tensors * s.items * 16 * resident;
  std::int64_t cap = std::min(t.row_pipeline_stages, kMaxRowStages);
  if (t.row_stage_bytes_per_sm > 0)
    cap = std::min(cap,
                   std::max<std::int64_t>(2, t.row_stage_bytes_per_sm / row_bytes_per_sm) + (extra_stage ? 1 : 0));
  int stages = int(std::min(cap, iterations));
  while (stages >= 2 && stages * per_stage > budget) --stages;
  if (stages < 2) return;
  s.stages = stages;
  s.smem_bytes = std::max<std::int64_t>(floor_bytes, stages * per_stage + after_stages_bytes);
}

/// Stages for the forward / dX row kernels; a staged grid is sized to the blocks that are resident
/// at once (a grid-stride walk by more blocks than fit would run in waves, the last one partial).
void stage_row_kernel(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t, int tensors,
                      bool stats) {
  const int resident = guaranteed_row_blocks_per_sm(s);
  const std::int64_t resident_grid = std::min<std::int64_t>(s.blocks, std::int64_t(device.sm_count) * resident);
  plan_stages(s, p, device, t, tensors, stats, resident, resident_grid, 0);
  if (s.stages > 0) s.blocks = resident_grid;
}

/// A row split over a thread-block cluster (RowShape::split): `split` blocks of `block_threads`
/// threads, each caching `items` 16-byte vectors per thread of its slice; the grid is as many
/// clusters as the blocks the kernels' launch bounds keep resident, at most one per row (the launch
/// caps it further to the clusters the device holds at once, cluster_grid). Returns false (and
/// leaves `s` alone) when the row needs more than `cap` blocks, or fits one (`s` caches it).
bool split_row_over_cluster(RowShape& s, const Problem& p, const DeviceFacts& device, int block_threads, int items,
                            int cap) {
  if (s.items != 0 || s.vec == 1) return false;
  const std::int64_t vectors = ceil_div(p.cols, s.vec);
  const std::int64_t split = ceil_div(vectors, std::int64_t(block_threads) * items);
  if (cap < 2 || split > cap) return false;
  RowShape out;
  out.vec = s.vec;
  out.items = items;
  out.threads_per_row = block_threads;
  out.rows_per_block = 1;
  out.split = int(std::max<std::int64_t>(split, 2));
  out.slice_cols = split_slice_cols(vectors, out.split, out.vec, dtype_size(p.dtype));
  const std::int64_t resident_clusters =
      std::max<std::int64_t>(1, std::int64_t(device.sm_count) * guaranteed_row_blocks_per_sm(out) / out.split);
  out.blocks = std::min<std::int64_t>(std::max<std::int64_t>(p.rows, 1), resident_clusters) * out.split;
  s = out;
  return true;
}

/// dX rows too long to cache in one block (row_shape streamed them: items = 0), split over a thread-block
/// cluster instead when it can hold them, so the row is read once (streamed rows are read twice):
/// blocks of kSplitBlockThreads threads caching kSplitItems vectors each, at most
/// PlannerTable::row_split_max and DeviceFacts::max_cluster_blocks blocks; rows longer than a portable
/// cluster of those holds, blocks of kWideSplitBlockThreads threads over clusters of up to
/// PlannerTable::row_split_wide_max blocks (above the portable size where the device launches them).
bool split_rows(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  if (split_row_over_cluster(s, p, device, kSplitBlockThreads, kSplitItems,
                             std::min({t.row_split_max, device.max_cluster_blocks, kMaxSplit})))
    return true;
  const std::int64_t portable_vectors = std::int64_t(kSplitBlockThreads) * kSplitItems * kMaxSplit;
  if (device.max_cluster_blocks < 2 || row_vectors(p) <= portable_vectors) return false;
  const int wide = std::min({t.row_split_wide_max, std::max(device.max_cluster_blocks, device.max_nonportable_cluster_blocks),
                             kMaxFusedSplitBlocks});
  return split_row_over_cluster(s, p, device, kWideSplitBlockThreads, kSplitItems, wide);
}

/// Forward rows too long to cache in one block, split over a cluster (PlannerTable::forward_split_max,
/// from forward_split_min_vectors; LayerNorm up to forward_split_ln_max_thread_elements): the dX
/// kernel's blocks up to a portable cluster (rows below forward_split_wide_min_vectors where that is
/// set), then kWideSplitBlockThreads-thread blocks over clusters up to
/// DeviceFacts::max_nonportable_cluster_blocks (and kMaxFusedSplitBlocks), of kSplitItems vectors a
/// thread or, for long rows (forward_split_wide_items_min_vectors / _min_rows) and rows those cannot
/// hold, kWideForwardSplitItems (where forward_split_wide_items_built).
bool forward_split_rows(RowShape& s, const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  if (device.max_cluster_blocks < 2 || row_vectors(p) < t.forward_split_min_vectors) return false;
  if (!is_rms(p.op) && kSplitItems * vector_width(p) > t.forward_split_ln_max_thread_elements) return false;
  const int portable = std::min({t.forward_split_max, device.max_cluster_blocks, kPortableClusterBlocks});
  const bool portable_layout = t.forward_split_wide_min_vectors == 0 || row_vectors(p) < t.forward_split_wide_min_vectors;
  if (portable_layout && split_row_over_cluster(s, p, device, kSplitBlockThreads, kSplitItems, portable)) return true;
  const int wide = std::min({t.forward_split_max, std::max(device.max_cluster_blocks, device.max_nonportable_cluster_blocks),
                             kMaxFusedSplitBlocks});
  const bool more_items = forward_split_wide_items_built(is_rms(p.op), int(dtype_size(p.dtype)));
  if (more_items && row_vectors(p) >= t.forward_split_wide_items_min_vectors && p.rows >= t.forward_split_wide_items_min_rows &&
      split_row_over_cluster(s, p, device, kWideSplitBlockThreads, kWideForwardSplitItems, wide))
    return true;
  if (split_row_over_cluster(s, p, device, kWideSplitBlockThreads, kSplitItems, wide)) return true;
  return more_items && split_row_over_cluster(s, p, device, kWideSplitBlockThreads, kWideForwardSplitItems, wide);
}

/// How the fused backward lays out a row too long for one block: `split` blocks of a cluster (1: the
/// row fits one block; 0: no fused layout holds it), each caching `items` vectors per thread of its
/// slice.
struct FusedSplit {
  int split = 0;
  int items = 0;
};

/// The most blocks a row cached kMaxFusedItems vectors a thread splits over on `device`
/// (PlannerTable::fused_cached_split_max): above the portable cluster only where the device launches
/// larger clusters, and otherwise the portable size.
int fused_cached_split_limit(const DeviceFacts& device, const PlannerTable& t) {
  if (t.fused_cached_split_max <= kPortableClusterBlocks) return t.fused_cached_split_max;
  return std::max(kPortableClusterBlocks, std::min(t.fused_cached_split_max, device.max_nonportable_cluster_blocks));
}

/// The fused backward holds its dgamma/dbeta accumulators in registers next to the cached row,
/// kMaxFusedItems vectors per thread in a block of kFusedBlockThreads threads. Longer 16-byte
/// vectorised rows are split over a cluster of such blocks, up to `cached_split_limit` blocks
/// (fused_cached_split_limit), beyond the portable cluster only from
/// PlannerTable::fused_cached_split_min_beyond_portable blocks; the others, blocks of kFusedWideItems
/// vectors per thread (recomputing the row's terms) over clusters of up to PlannerTable::fused_split_max
/// (at most kMaxFusedSplitBlocks). `why` says why not, when not.
FusedSplit fused_split(const Problem& p, const PlannerTable& t, int cached_split_limit, std::string* why) {
  const int vec = vector_width(p);
  const std::int64_t vectors = ceil_div(std::max<std::int64_t>(p.cols, 1), vec);
  const std::int64_t capacity = std::int64_t(kFusedBlockThreads) * kMaxFusedItems;
  if (vectors <= capacity) return {1, 0};
  const int cap = vec > 1 ? std::min(t.fused_split_max, kMaxFusedSplitBlocks) : 1;
  const int cached_cap = std::min(cap, cached_split_limit);
  const std::int64_t cached_blocks = ceil_div(vectors, capacity);
  // (beyond the portable cluster only rows that need fused_cached_split_min_beyond_portable blocks: for
  // fewer, the wide layout's clusters of half as many blocks, twice as many of them at once, win)
  const bool cached_cluster_taken =
      cached_blocks <= kPortableClusterBlocks || cached_blocks >= t.fused_cached_split_min_beyond_portable;
  if (cached_cap >= 2 && cached_blocks <= cached_cap && cached_cluster_taken) return {int(cached_blocks), kMaxFusedItems};
  const std::int64_t wide_capacity = std::int64_t(kFusedBlockThreads) * kFusedWideItems;
  if (cap >= 2 && vectors <= wide_capacity * cap) return {int(ceil_div(vectors, wide_capacity)), kFusedWideItems};
  if (why) {
    std::ostringstream os;
    os << "fused keeps a row in registers: N = " << p.cols << " needs " << vectors << " vectors of " << vec
       << " elements, more than its " << capacity << " per block (rows up to " << capacity * vec << " elements";
    if (cap >= 2) os << ", or " << wide_capacity * cap * vec << " split over a cluster of " << cap << " blocks";
    else if (vec > 1) os << "; fused_split_max = " << t.fused_split_max << " splits no row over a cluster";
    else os << "; rows that are not 16-byte vectorised are never split over a cluster";
    os << ")";
    *why = os.str();
  }
  return {};
}

/// The cluster size of a fused split row (PlannerTable::fused_split_most_clusters): from the blocks the
/// row needs (`fs`) up to the largest cluster of its layout the device launches, the size of which
/// the device holds the most clusters at once (DeviceFacts::cluster_sms / size), and of those the
/// most blocks (smaller slices). The rules that pick the strategy keep the blocks the row needs
/// (fused_split).
int fused_cluster_split(const FusedSplit& fs, const DeviceFacts& device, const PlannerTable& t) {
  if (!t.fused_split_most_clusters || fs.split < 2) return fs.split;
  // (clusters above the portable size: wide rows always, 2-item rows only when they need more blocks
  // than the portable size, which fused_split allows up to their key)
  const int launchable = std::max(device.max_cluster_blocks, device.max_nonportable_cluster_blocks);
  const int cached_limit = fused_cached_split_limit(device, t);
  const int device_largest =
      fs.items > kMaxFusedItems ? launchable
      : fs.split > kPortableClusterBlocks ? std::min(cached_limit, launchable)
                                          : std::min(cached_limit, device.max_cluster_blocks);
  const int largest = std::min({t.fused_split_max, kMaxFusedSplitBlocks, device_largest});
  int best = fs.split, best_clusters = 0;
  for (int blocks = fs.split; blocks <= largest; ++blocks) {
    const int clusters = device.cluster_sms[blocks - 1] / blocks;
    if (clusters <= 0) return fs.split;  // not known for this size: the blocks the row needs
    if (clusters >= best_clusters) best = blocks, best_clusters = clusters;
  }
  return best;
}

/// fused_split on `device`: the layout the fused backward takes there (fused_cached_split_limit).
FusedSplit fused_split_on(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  return fused_split(p, t, fused_cached_split_limit(device, t), nullptr);
}

// (whether a row fits does not depend on which layout takes it: the wide one holds twice the vectors)
bool fused_fits(const Problem& p, const PlannerTable& t, std::string* why) {
  return fused_split(p, t, t.fused_cached_split_max, why).split > 0;
}

/// Whether the device launches a cluster of `blocks` blocks: the portable sizes where it has clusters
/// at all, larger ones up to DeviceFacts::max_nonportable_cluster_blocks (the kernel opts in).
bool device_holds_cluster(const DeviceFacts& device, int blocks) {
  return device.max_cluster_blocks >= 2 &&
         (blocks <= device.max_cluster_blocks || blocks <= device.max_nonportable_cluster_blocks);
}

/// Column strips of the tiled and two-pass kernels: 32 lanes of `vec` columns each (tiled_shape may
/// narrow scalar tiled strips afterwards). Vectorised
/// strips read 16 bytes per lane (a warp reads 512 contiguous bytes of a row instead of 64 for
/// bf16) but make vec times fewer strips, so they are used only where the sweeps measured them
/// faster (PlannerTable::column_vec_min_cols, column_vec_two_pass_min_rows); every lane of a strip
/// must have columns (N >= 32 * vec). Vectorised lanes unroll fewer rows (2) to stay within the 64
/// registers of a 1024-thread block.
ColumnShape column_strips(const Problem& p, const PlannerTable& t, bool two_pass) {
  ColumnShape c;
  c.block_x = kWarpSize;
  const int width = vector_width(p);
  const bool wide = p.cols >= t.column_vec_min_cols;
  const bool split_tall = two_pass && p.rows >= t.column_vec_two_pass_min_rows;
  c.vec = width > 1 && p.cols >= std::int64_t(kWarpSize) * width && (wide || split_tall) ? width : 1;
  c.col_blocks = ceil_div(std::max<std::int64_t>(p.cols, 1), c.columns_per_block());
  return c;
}

/// Lanes of a tall strip (PlannerTable::tiled_tall_max_strips): the table's fixed count, or the fewest
/// that make at most tiled_tall_max_strips strips (a power of two, at most kTallStripMaxLanes).
int tall_strip_lanes(const Problem& p, const PlannerTable& t) {
  if (t.tiled_tall_strip_lanes > 0) return t.tiled_tall_strip_lanes;
  const std::int64_t vectors = ceil_div(p.cols, vector_width(p));
  int lanes = 1;
  while (lanes < kTallStripMaxLanes && ceil_div(vectors, lanes) > t.tiled_tall_max_strips) lanes *= 2;
  return lanes;
}

/// Whether tiled takes tall vectorised strips (PlannerTable::tiled_tall_max_strips and the keys after
/// it): on, 16-byte vectorised rows, at least tiled_tall_min_rows of them (tiled_tall_gb_min_rows
/// without dX), a vector for every lane.
bool tall_strips_on(const Problem& p, const PlannerTable& t) {
  if ((t.tiled_tall_max_strips <= 0 && t.tiled_tall_strip_lanes <= 0) || vector_width(p) == 1 ||
      p.rows < (p.mask.dx ? t.tiled_tall_min_rows : t.tiled_tall_gb_min_rows))
    return false;
  return p.cols >= std::int64_t(tall_strip_lanes(p, t)) * vector_width(p);
}

/// The tiled strategy's column strips; `bands_only`: the bands' strips even where tall ones apply (the
/// rules auto asks after the tall strips' own were measured on those).
ColumnShape tiled_shape(const Problem& p, const DeviceFacts& device, const PlannerTable& t, bool bands_only = false) {
  ColumnShape c = column_strips(p, t, false);
  // The seed's bands: rows handled per block iteration grow with M so small M wastes no threads.
  if (p.rows < t.tile64_min_rows) {
    c.band = TileBand::Tile8;   c.block_y = 8;  c.rows_per_thread = 1;
  } else if (p.rows < t.tile128_min_rows) {
    c.band = TileBand::Tile64;  c.block_y = 16; c.rows_per_thread = c.vec > 1 ? 2 : 4;
  } else if (p.rows < t.tile256_min_rows) {
    c.band = TileBand::Tile128; c.block_y = 16; c.rows_per_thread = c.vec > 1 ? 2 : 8;
  } else {
    c.band = TileBand::Tile256; c.block_y = 32; c.rows_per_thread = c.vec > 1 ? 2 : 8;
  }
  // A block iteration is one memory round trip (its loads are all issued before its adds), so a
  // small M is covered in as few iterations as the kernel's instances allow (scalar strips: 1, 4, 8
  // rows per thread, 16 in blocks of at most kTiledLongUnrollMaxThreads): Tile-8 at M = 32 took four
  // round trips in series where one is enough; Tile-128 at M = 192 took two (8 rows a thread).
  if (!bands_only && tall_strips_on(p, t)) {
    // Tall vectorised strips (PlannerTable::tiled_tall_max_strips): the band only names the plan
    const int width = vector_width(p);
    c.vec = width;
    c.block_x = tall_strip_lanes(p, t);
    c.block_y = kTallStripThreads / c.block_x;
    c.col_blocks = ceil_div(p.cols, c.columns_per_block());
    c.rows_per_thread = 1;
    while (c.rows_per_thread < t.tiled_tall_strip_max_rows_per_thread &&
           std::int64_t(c.block_y) * c.rows_per_thread < p.rows)
      c.rows_per_thread *= 2;
    return c;
  }
  if (c.vec == 1) {
    // Strips of fewer lanes where the warp-wide ones leave most SMs idle (tiled_min_strip_lanes and
    // the keys after it); the block keeps its threads, so its thread rows double with each halving,
    // and the band's rows a block iteration stay as they were (half the rows a thread, at least the
    // next instance's).
    const int max_strips_percent =
        c.band == TileBand::Tile256 ? t.tiled256_narrow_max_strips_percent : t.tiled_narrow_max_strips_percent;
    while (c.block_x > t.tiled_min_strip_lanes && p.rows >= t.tiled_narrow_strips_min_rows &&
           c.col_blocks * 100 <= std::int64_t(device.sm_count) * max_strips_percent) {
      c.block_x /= 2;
      c.block_y *= 2;
      c.rows_per_thread = std::max(1, c.rows_per_thread / 2);
      c.col_blocks = ceil_div(std::max<std::int64_t>(p.cols, 1), c.columns_per_block());
    }
    for (int rpt : {1, 4, 8, 16}) {
      if (rpt < c.rows_per_thread) continue;
      if (rpt == 16 && c.block_x * c.block_y > kTiledLongUnrollMaxThreads) break;
      c.rows_per_thread = rpt;
      if (std::int64_t(c.block_y) * rpt >= p.rows) break;
    }
  }
  return c;
}

ColumnShape two_pass_shape(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  ColumnShape c = column_strips(p, t, true);
  c.block_y = 16;
  c.rows_per_thread = c.vec > 1 ? 2 : 4;
  // Enough row slices that column strips x slices fill the GPU, but never more than one per
  // two_pass_min_rows_per_part rows of M, rounded up (more would make the partial traffic outgrow
  // the input). Rounded down, M a few rows past a multiple of that minimum gave every slice a few
  // rows more than it, and a block a second load round trip for them (M = 4097, N = 64: 64 slices of
  // 65 rows against block iterations of 16 x 4 = 64 rows; docs/NOTES.md entry 42).
  const std::int64_t target_blocks = std::int64_t(device.sm_count) * t.two_pass_target_blocks_per_sm;
  const std::int64_t wanted_parts = std::max<std::int64_t>(1, ceil_div(target_blocks, c.col_blocks));
  const std::int64_t max_parts = std::max<std::int64_t>(1, ceil_div(p.rows, t.two_pass_min_rows_per_part));
  const std::int64_t parts = std::min({wanted_parts, max_parts, kMaxTwoPassParts});
  c.rows_per_part = std::max<std::int64_t>(1, ceil_div(std::max<std::int64_t>(p.rows, 1), parts));
  c.row_parts = ceil_div(std::max<std::int64_t>(p.rows, 1), c.rows_per_part);
  return c;
}

/// Thread rows of the partial reduce: one batch of kReduceRowsPerThread loads per thread covers
/// `partial_rows` (up to 32 x 8 = 256 of them; taller partials take more batches), and at least
/// PlannerTable::reduce_min_block_y.
int reduce_block_y(std::int64_t partial_rows, const PlannerTable& t) {
  const std::int64_t rows = std::max<std::int64_t>(ceil_div(partial_rows, kReduceRowsPerThread), t.reduce_min_block_y);
  return int(std::clamp<std::int64_t>(rows, 1, 1024 / kWarpSize));
}

int partial_arrays(const Problem& p) {
  return (p.mask.dweight ? 1 : 0) + (p.mask.dbias && !is_rms(p.op) ? 1 : 0);
}

std::size_t partial_bytes(std::int64_t partial_rows, const Problem& p) {
  return std::size_t(partial_rows) * std::size_t(p.cols) * std::size_t(partial_arrays(p)) * sizeof(float);
}

/// Shared memory the fused kernel's staged wide rows (kFusedWideItems vectors a thread, split over a
/// cluster) keep after their stages: the weights of the block's slice, 16 or 32 bytes a slot
/// (fused_wide_weights_in_smem). They read each slot's weights twice a row; from global memory that was
/// mostly L2 traffic (L1 hit rate 28 % beside 192 KB of stages, docs/NOTES.md entries 28, 59 and 85).
/// 0 for every other row layout.
std::int64_t fused_wide_weight_bytes(const Problem& p, const RowShape& s) {
  if (s.items != kFusedWideItems || s.split < 2) return 0;
  const int slot_bytes = int(dtype_size(p.weight_dtype)) * s.vec;
  return fused_wide_weights_in_smem(slot_bytes) ? std::int64_t(s.block_threads()) * s.items * slot_bytes : 0;
}

/// Row layout of the fused kernel: its fixed block, at most kMaxFusedItems vectors per thread; a
/// longer row split over a cluster of fused_split blocks, each caching kMaxFusedItems vectors per
/// thread of its slice (one row group of kFusedBlockThreads threads per block; `blocks` is set by
/// the caller).
RowShape fused_row_shape(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  const FusedSplit fs = fused_split_on(p, device, t);
  if (fs.split >= 2) {
    RowShape s;
    s.vec = vector_width(p);
    s.items = fs.items;
    s.threads_per_row = kFusedBlockThreads;
    s.rows_per_block = 1;
    s.split = fused_cluster_split(fs, device, t);
    s.slice_cols = split_slice_cols(row_vectors(p), s.split, s.vec, dtype_size(p.dtype));
    return s;
  }
  const int items_target = short_vector_rows(p, t) ? t.fused_short_row_items_target : t.row_items_target;
  return row_shape(p, device, t, kMaxFusedItems, kFusedBlockThreads, kFusedBlockThreads, items_target);
}

/// Blocks of a fused plan that runs as one thread-block cluster (0: not a cluster): small problems
/// with gamma/beta to reduce, on devices with clusters. As many blocks as give each a row group's
/// worth of rows, at most the cluster size.
int fused_cluster_blocks(const Problem& p, const DeviceFacts& device, const PlannerTable& t, int rows_per_block) {
  const int cap = std::min(t.fused_cluster_max_blocks, device.max_cluster_blocks);
  if (!p.mask.any_gamma_beta() || cap < 2 || p.rows * p.cols > t.fused_cluster_max_elements ||
      p.cols > t.fused_cluster_max_cols || fused_split_on(p, device, t).split != 1)
    return 0;
  const std::int64_t blocks = std::min<std::int64_t>(cap, ceil_div(p.rows, std::max(1, rows_per_block)));
  return blocks >= 2 ? int(blocks) : 0;  // one block writes dgamma/dbeta directly anyway
}

/// Plan::one_launch for a tiled plan with dX (PlannerTable::one_launch_max_elements): the dX rows
/// are laid out over the tiled block (rows_per_block x threads_per_row = its threads), aiming at
/// one_launch_items_target vectors per thread; only the instances dx_and_tiled_kernel has (16-byte
/// vectorised rows of at most kOneLaunchMaxItems items, scalar column strips, at most
/// kOneLaunchMaxThreads threads within the dX rows' register budget). Leaves the plan alone
/// otherwise.
void one_launch_shape(Plan& out, const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  const int threads = out.columns.block_x * out.columns.block_y;
  const bool tall = out.columns.tall_strips();  // up to tiled_tall_max_rows rows, any N
  if (!p.mask.dx || !p.mask.any_gamma_beta() ||
      (tall ? p.rows > t.tiled_tall_max_rows : p.rows * p.cols > t.one_launch_max_elements) || vector_width(p) == 1 ||
      (out.columns.vec != 1 && !tall) || threads > kOneLaunchMaxThreads)
    return;
  const RowShape rows = row_shape(p, device, t, kOneLaunchMaxItems, threads, threads,
                                  tall ? t.tiled_tall_one_launch_items_target : t.one_launch_items_target);
  if (rows.items == 0 || rows.threads_per_row * rows.rows_per_block != threads || threads > max_row_threads(rows.items, rows.vec))
    return;
  out.row = rows;
  out.one_launch = true;
}

/// Row walkers of the fused kernel's persistent grid for row layout `row`: kFusedBlocksPerSm co-resident
/// blocks per SM (the kernel's launch bounds guarantee the registers), fewer when M is small so the
/// partials stay small. Split rows: the walkers are clusters of `row.split` blocks (the launch caps them
/// further to the clusters the device holds at once, cluster_grid), so each walker's share is counted
/// in clusters.
std::int64_t fused_walkers(const Problem& p, const DeviceFacts& device, const PlannerTable& t, const RowShape& row) {
  const int split = row.split;
  const std::int64_t rows_per_walker_min =
      std::int64_t(row.rows_per_block) * (split > 1 ? t.fused_split_min_rows_per_cluster : t.fused_min_rows_per_block);
  const std::int64_t by_rows = std::max<std::int64_t>(1, ceil_div(p.rows, rows_per_walker_min));
  const std::int64_t walkers = std::int64_t(device.sm_count) * kFusedBlocksPerSm / split;
  return std::max<std::int64_t>(1, std::min<std::int64_t>(by_rows, walkers));
}

/// Whether `walkers` fill enough of the GPU for the grid-wide sync of the single cooperative launch
/// (PlannerTable::fused_single_launch_min_grid_percent; small cooperative grids were slower).
bool fused_walkers_fill_single_launch(std::int64_t walkers, const DeviceFacts& device, const PlannerTable& t) {
  return walkers * 100 >= std::int64_t(device.sm_count) * kFusedBlocksPerSm * t.fused_single_launch_min_grid_percent;
}

/// Whether the fused plan of `p` is one full cooperative launch in which every block walks at most one
/// row group (unsplit rows, the single launch's share of the grid, M within one group a walker).
bool fused_one_full_launch(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  const RowShape rows = fused_row_shape(p, device, t);
  if (!t.fused_single_launch || rows.split != 1 || rows.items == 0) return false;
  const std::int64_t walkers = fused_walkers(p, device, t, rows);
  return fused_walkers_fill_single_launch(walkers, device, t) && p.rows <= walkers * rows.rows_per_block;
}

/// Whether a tiled plan's tall strips are between one and two waves, the second holding fewer than
/// tiled_tall_gb_min_last_wave_percent of one, on at least tiled_tall_short_wave_min_rows rows: each strip
/// walks all M rows, so those few strips take nearly a whole strip's time more
/// (PlannerTable::tiled_tall_gb_min_last_wave_percent). Measured only there; over more waves such a tail
/// is a smaller share of the time, and on fewer rows a strip's walk is short.
bool tall_strips_last_wave_short(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  if (!tall_strips_on(p, t) || p.rows < t.tiled_tall_short_wave_min_rows) return false;
  const ColumnShape tall = tiled_shape(p, device, t);  // tall strips: col_blocks strips
  const std::int64_t strips = tall.col_blocks;
  const std::int64_t wave = std::int64_t(device.sm_count) * tall_strip_blocks_per_sm(tall.rows_per_thread);
  return strips > wave && strips < 2 * wave && (strips - wave) * 100 < wave * t.tiled_tall_gb_min_last_wave_percent;
}

/// Whether auto takes tiled on tall strips (PlannerTable::tiled_tall_max_rows, _max_bytes): rows that
/// take tall strips, at most tiled_tall_max_rows of them and tiled_tall_max_bytes of x, with dX only
/// where both run in one launch, on at least tiled_tall_min_strips strips (tiled_tall_few_min_strips on
/// at most tiled_tall_few_max_rows rows; tiled_tall_gb_min_strips without dX); without dX also at any M
/// and size where the strips fill the GPU (tiled_tall_gb_full_grid_percent).
bool tall_strips_auto(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  if (!p.mask.any_gamma_beta() || !tall_strips_on(p, t)) return false;
  const std::int64_t strips = ceil_div(ceil_div(p.cols, vector_width(p)), tall_strip_lanes(p, t));
  // gamma/beta alone on tall strips that fill the GPU: at any M (PlannerTable::tiled_tall_gb_full_grid_percent),
  // unless a last wave of few strips would walk all M rows again (tiled_tall_gb_min_last_wave_percent)
  if (!p.mask.dx && t.tiled_tall_gb_full_grid_percent > 0 &&
      strips * 100 >= std::int64_t(device.sm_count) * t.tiled_tall_gb_full_grid_percent &&
      !tall_strips_last_wave_short(p, device, t))
    return true;
  if (p.rows > t.tiled_tall_max_rows || p.rows * p.cols * std::int64_t(dtype_size(p.dtype)) > t.tiled_tall_max_bytes)
    return false;
  // with dX, fewer strips on few rows (PlannerTable::tiled_tall_few_max_rows)
  const std::int64_t min_strips = !p.mask.dx ? t.tiled_tall_gb_min_strips
                                  : p.rows <= t.tiled_tall_few_max_rows
                                      ? std::min(t.tiled_tall_min_strips, t.tiled_tall_few_min_strips)
                                      : t.tiled_tall_min_strips;
  if (strips < min_strips) return false;
  if (!p.mask.dx) return true;
  Plan tiled;
  tiled.columns = tiled_shape(p, device, t);
  one_launch_shape(tiled, p, device, t);
  return tiled.one_launch;
}

Strategy auto_strategy(const Problem& p, const DeviceFacts& device, const PlannerTable& t) {
  // Tall strips (with dX: in one launch) before the rest, where measured faster (PlannerTable::
  // tiled_tall_max_rows: fused, two-pass and the bands' strips 1.03-1.47x their time there, H100).
  if (tall_strips_auto(p, device, t)) return Strategy::Tiled;
  // With dX, fused saves the unfused second read of x and dy; without it, only launches. Small
  // problems with dX take it where it is one cluster launch (fused_cluster_max_elements / _cols); a
  // fused grid of one block (too few rows for two) lost to dX + tiled (1.2-1.5x at M <= 64, N = 64,
  // probe at d472e85).
  const bool small = p.mask.dx && p.mask.any_gamma_beta() &&
                     fused_cluster_blocks(p, device, t, fused_row_shape(p, device, t).rows_per_block) >= 2;
  const std::int64_t row_bytes = p.cols * std::int64_t(dtype_size(p.dtype));
  const bool vectorised = vector_width(p) > 1;
  // rows by kind: short vectorised, narrow unvectorised (one thread's worth), the rest
  const std::int64_t x_bytes = p.rows * row_bytes;
  const std::int64_t short_row_dx_min_bytes =
      is_rms(p.op) ? t.rms_fused_short_row_dx_min_bytes : t.fused_short_row_dx_min_bytes;
  const FusedSplit fused_layout_split = fused_split_on(p, device, t);
  const int split = fused_layout_split.split;
  // Rows split over a cluster of 2-item blocks are fused with dX from a size of x at any M (fp32 has
  // its own key), over clusters above the portable size too where a table allows them (H100, bf16,
  // 131072 columns over 16 blocks, docs/NOTES.md entry 91: fused 0.78-0.94x tiled from 128 rows (32 MiB),
  // 1.2x at 64 LayerNorm rows); the wide layout keeps the other rules.
  const bool split_rows_by_bytes =
      split >= 2 && fused_layout_split.items == kMaxFusedItems &&
      x_bytes >= (dtype_size(p.dtype) == 4 ? t.fp32_fused_split_min_bytes : t.fused_split_min_bytes);
  // Rows of the wide layout (4-item blocks over clusters of up to 16), 16-bit: fused with dX from a
  // size of x at any M, LayerNorm and RMSNorm each their own key.
  const bool wide_rows_by_bytes =
      split >= 2 && fused_layout_split.items == kFusedWideItems && dtype_size(p.dtype) == 2 &&
      x_bytes >= (is_rms(p.op) ? t.rms_fused_wide_min_bytes : t.fused_wide_min_bytes);
  // Fused with dX from a size of x: rows of fused_min_row_bytes (fp32: its own key) from fused_min_bytes;
  // LayerNorm mid-length rows only from ln_fused_mid_rows_min_bytes, unless the fused grid is one full
  // single launch of a row group a block (PlannerTable::ln_fused_mid_rows_min_bytes). The grid is
  // asked last: only rows the other tests leave open pay for it.
  const bool ln_mid_rows = !is_rms(p.op) && row_bytes >= t.ln_fused_mid_rows_min_row_bytes &&
                           row_bytes <= t.ln_fused_mid_rows_max_row_bytes;
  const bool rows_by_bytes =
      p.rows >= t.fused_bytes_min_rows && x_bytes >= t.fused_min_bytes &&
      row_bytes >= (dtype_size(p.dtype) == 4 ? t.fp32_fused_min_row_bytes : t.fused_min_row_bytes) &&
      (!ln_mid_rows || x_bytes >= t.ln_fused_mid_rows_min_bytes || fused_one_full_launch(p, device, t));
  const bool fused_size =
      small ||
      (short_vector_rows(p, t) ? p.rows >= t.fused_short_row_min_rows || (p.mask.dx && x_bytes >= short_row_dx_min_bytes)
       : !vectorised           ? p.rows >= t.fused_unaligned_min_rows
       : p.mask.dx ? (p.rows >= t.fused_min_rows || rows_by_bytes || split_rows_by_bytes || wide_rows_by_bytes)
                   : p.rows >= t.fused_gb_min_rows &&
                         (row_vectors(p) >= t.fused_gb_min_vectors ||
                          (row_vectors(p) >= t.fused_gb_mid_min_vectors && row_vectors(p) <= t.fused_gb_mid_max_vectors)));
  const bool fused_layout = vectorised || p.cols <= t.fused_unaligned_max_cols;
  // Rows split over a cluster are fused with dX (that is what saves the second read of x and dy), or
  // without it over clusters of at most fused_gb_max_split blocks; only where the device has clusters.
  const bool fused_rows =
      split == 1 || (split >= 2 && (p.mask.dx || split <= t.fused_gb_max_split) && device_holds_cluster(device, split));
  // Rows longer than the dX kernel's split covers (its wide split off, or beyond it) are streamed by
  // it, one block a row and read twice: few of them leave the GPU nearly idle, so fused takes them at
  // any M (bf16 sweep at 3440edf, N = 262144 full backward: M = 1 fused 22 vs 60 us, M = 7 43 vs 65,
  // M = 64 95 vs 119; M = 255 265 vs tiled 254, M = 1024 950 vs 994). Rows the split covers keep the
  // size rules (docs/NOTES.md entry 38).
  const bool dx_streams = split >= 2 && [&] {
    RowShape dx_rows = row_kernel_shape(p, device, t);
    return dx_rows.items == 0 && !split_rows(dx_rows, p, device, t);
  }();
  // Rows of the fused kernel's wide layout that the dX kernel splits: unfused below
  // PlannerTable::fused_wide_min_element_bytes (2 since NOTES entry 59: fused for every element size).
  const bool wide_unfused = !dx_streams && fused_layout_split.items == kFusedWideItems &&
                            std::int64_t(dtype_size(p.dtype)) < t.fused_wide_min_element_bytes;
  if (t.fused_enabled && (fused_size || dx_streams) && fused_layout && fused_rows && !wide_unfused) return Strategy::Fused;
  // dX and tiled strips in one launch beat simple (dX + a second launch) on the few rows simple takes
  // (bf16 sweep at 4345a27, full backward, M = 1: 1.53 vs 1.79 us at N = 64, 1.65 vs 1.85 at 768).
  // The rules from here on were measured on the bands' strips: they see those (tall strips were
  // asked above; a tiled plan still takes them where they apply, faster than the bands' everywhere
  // measured from 384 rows, entry 94).
  Plan tiled;
  tiled.columns = tiled_shape(p, device, t, /*bands_only=*/true);
  one_launch_shape(tiled, p, device, t);
  if (tiled.one_launch) return Strategy::Tiled;
  // simple_min_cols was measured against scalar strips (one column per lane); vectorised strips read
  // whole sectors themselves.
  const ColumnShape tiled_strips = column_strips(p, t, false);
  const bool few_long_rows =
      !p.mask.dx && ((p.rows <= t.simple_few_rows_max && p.cols >= t.simple_few_rows_min_cols) ||
                     (!is_rms(p.op) && p.rows <= t.ln_simple_few_wide_rows_max && p.cols >= t.ln_simple_few_wide_rows_min_cols));
  if (p.rows <= t.simple_max_rows || few_long_rows || (p.cols >= t.simple_min_cols && tiled_strips.vec == 1))
    return Strategy::Simple;
  // Tiled (one block per column strip walking all M) is best while the strips alone fill the
  // GPU or M is too small to split; otherwise two-pass splits M so every SM has work (the seed's
  // "mixed" rule, which removes its chess board).
  // A vectorised strip carries vec columns a lane: it counts as vec strips of work (bf16 sweep at
  // 3440edf, gamma/beta alone, N = 16384, 64 strips of 8: tiled 0.85-0.99x two-pass up to M = 4097).
  // Strips within tiled_full_grid_percent of the SM count fill the GPU (N = 4097, 129 strips: tiled
  // 0.58-0.96x two-pass at every M of that sweep) -- unless two-pass reads 16 bytes a lane where
  // tiled reads one column (vectorised rows below column_vec_min_cols, from
  // column_vec_two_pass_min_rows rows): there two-pass wins (PlannerTable::tiled_full_grid_percent).
  // Strips narrower than a warp (tiled_min_strip_lanes) count as the strips they are, below
  // column_vec_two_pass_min_rows rows where that was measured (two_pass_min_rows_per_narrow_strip):
  // twice as many, each half as wide, they hold their own against two-pass longer. The full-grid test
  // below keeps the warp-wide count.
  const bool narrow_strips = tiled.columns.block_x < tiled_strips.block_x && p.rows < t.column_vec_two_pass_min_rows;
  const std::int64_t per_strip = p.mask.dx      ? t.two_pass_min_rows_per_strip_with_dx
                                 : narrow_strips ? t.two_pass_min_rows_per_narrow_strip
                                                 : t.two_pass_min_rows_per_strip;
  const ColumnShape& counted = narrow_strips ? tiled.columns : tiled_strips;
  const std::int64_t strip_work = counted.col_blocks * counted.vec;
  const std::int64_t any_two_pass_rows = std::max(2 * t.two_pass_min_rows_per_part, t.two_pass_min_rows);
  const std::int64_t two_pass_rows = std::max(any_two_pass_rows, strip_work * per_strip);
  const bool two_pass_wider = column_strips(p, t, true).vec > tiled_strips.vec;
  if (two_pass_wider && p.rows >= any_two_pass_rows) return Strategy::TwoPass;
  // The tiled plan runs tall strips where they apply: gamma/beta alone, a short last wave of them on
  // many rows loses to two-pass (PlannerTable::tiled_tall_short_wave_min_rows).
  if (!p.mask.dx && p.rows >= any_two_pass_rows && tall_strips_last_wave_short(p, device, t))
    return Strategy::TwoPass;
  if (tiled_strips.col_blocks * 100 >= std::int64_t(device.sm_count) * t.tiled_full_grid_percent ||
      p.rows < two_pass_rows)
    return Strategy::Tiled;
  return Strategy::TwoPass;
}

}  // namespace

const char* builtin_table_name(BuiltinTable table) {
  switch (table) {
    case BuiltinTable::H200: return "H200";
    case BuiltinTable::H100Sxm: return "H100 SXM";
  }
  return "unknown";
}

BuiltinTable builtin_table_for(const std::string& device_name, int sm_count) {
  // The exact GPU the H100 table was measured on: the PCIe (114 SMs) and NVL (94 GB) H100s keep the H200's.
  return device_name.find("H100 80GB HBM3") != std::string::npos && sm_count == 132 ? BuiltinTable::H100Sxm
                                                                                   : BuiltinTable::H200;
}

namespace {

/// The H100 SXM's table: the H200's but where an H100 80GB HBM3 measured a key otherwise. The first three
/// values were chosen by `normkit-bench --tune` on that H100 for bf16 and fp16 alike (bench/results/
/// h100-tune-{bf16,f16}-4aa8155.md) and confirmed by auto under both tables on shapes whose plans they
/// change, three alternating runs each (docs/NOTES.md entry 102, bench/results/h100-builtin-table-ab-04bfcad.md:
/// H100, graph; auto under this table / under the H200's); the tall strips' two by such A/Bs alone
/// (h100-tall-strips-ab-93f84ea.md, h100-tall-few-strips-ab-f98f5b2.md).
/// The tune's other moves are left out: those that differed between its two dtypes (simple_max_rows,
/// the LayerNorm short-row forward cuts; entry 92 found them moving on noise), the forward split's rows
/// of 4 vectors a thread over clusters twice as large where this table keeps 8 (forward_split_wide_items_*:
/// 1.01-1.23x slower at 163840-262144 columns in that A/B; clusters of 10-16, which the GPU holds fewer
/// of), and the 2-item cut at 14 blocks (fused_cached_split_min_beyond_portable, below).
PlannerTable h100_sxm_table() {
  PlannerTable t;
  // Rows that need 15-16 2-item blocks (122881-131072 16-bit / 61441-65536 fp32 columns) stay 2-item
  // over a cluster of 16: full backward 0.92-0.94x at 512 / 2048 x 131072 bf16 (LayerNorm, RMSNorm),
  // 0.95x at RMSNorm fp32 1024 x 65536; entry 91 measured 0.90-0.98x from 15 blocks (the tune's 14 took
  // LayerNorm with fp32 weights 1.01-1.04x there, so the cut stays at 15). The H200 wants 8 (entry 92).
  t.fused_cached_split_max = kMaxFusedSplitBlocks;
  // Short rows fuse from 32768 rows, not 16384: gamma/beta alone at 16384 x 24 / 64 and 24576 x 32 bf16
  // 0.87-0.95x; LayerNorm's full backward at 16384 x 24 1.02x (its rows of 32-64 columns there stay fused,
  // from their bytes: fused_short_row_dx_min_bytes). The tune's step 7 scored it 1.0079 -> 1.0022.
  t.fused_short_row_min_rows = 32768;
  // RMSNorm's packed forward walk from 4 MiB of x, not 64 MiB: 0.983-0.997x at 16384 x 256, 32768 x 128,
  // 8192 x 512 and 65536 x 96 bf16 (the tune: 1.0087 -> 1.0015 over 55 shapes). The tune's cut, 1 KiB under
  // 4 MiB, takes 2730 x 768 bf16 (4193280 bytes) too: packed 0.91x there (h100-tune-bf16-2a43d8e.md).
  t.rms_forward_packed_min_bytes = (std::int64_t(4) << 20) - 1024;
  // Full backwards take tall strips from 9 strips, not 16 (rows of 72-120 16-bit / 36-60 fp32 columns at
  // 256-2048 rows): 0.79-0.98x at 20 of 21 measured cells, RMSNorm 2048 x 96 bf16 1.02x (h100-tall-strips-
  // ab-93f84ea.md). 8 strips (64 16-bit / 32 fp32 columns) only up to 1024 rows: 0.66-0.94x at 384-1024 rows
  // (h100-tall-few-strips-ab-f98f5b2.md), but up to 1.17x at 1280-2048, where RMSNorm's fused short rows and
  // two-pass win.
  t.tiled_tall_min_strips = 9;
  t.tiled_tall_few_min_strips = 8;
  t.tiled_tall_few_max_rows = 1024;
  return t;
}

}  // namespace

const PlannerTable& builtin_planner_table(BuiltinTable table) {
  static const PlannerTable h200{};
  static const PlannerTable h100_sxm = h100_sxm_table();
  return table == BuiltinTable::H100Sxm ? h100_sxm : h200;
}

namespace {

/// The table NORMKIT_PLANNER_TABLE names, if any: it replaces the built-in ones on every device. Read
/// once, at the first plan; a bad file throws normkit::Error naming its line, every time it is asked for
/// (a static whose initialiser throws is initialised again at the next call).
struct TableFile {
  std::string path;
  std::optional<PlannerTable> table;
};
const TableFile& table_file() {
  static const TableFile file = [] {
    TableFile f;
    const char* path = std::getenv("NORMKIT_PLANNER_TABLE");
    if (path != nullptr && *path != '\0') {
      f.table = load_planner_table(path);
      f.path = path;
    }
    return f;
  }();
  return file;
}

}  // namespace

const PlannerTable& default_planner_table(const DeviceFacts& device) {
  const TableFile& file = table_file();
  return file.table ? *file.table : builtin_planner_table(device.builtin_table);
}

std::string planner_table_source(const DeviceFacts& device) {
  const TableFile& file = table_file();
  return file.table ? file.path : std::string("built-in (") + builtin_table_name(device.builtin_table) + ")";
}

const PlannerTable& default_planner_table() { return default_planner_table(DeviceFacts::h200()); }

bool strategy_supported(const Problem& problem, Strategy strategy, std::string* why_not, const PlannerTable& table) {
  if (!is_backward(problem.op)) {
    if (strategy == Strategy::Auto) return true;
    if (why_not) *why_not = "forward ops have no gamma/beta strategy; only auto is accepted";
    return false;
  }
  switch (strategy) {
    case Strategy::Auto:
    case Strategy::Simple:
    case Strategy::Tiled:
    case Strategy::TwoPass:
      return true;
    case Strategy::Fused:
      return fused_fits(problem, table, why_not);
  }
  return false;
}

Plan plan(const Problem& p, const DeviceFacts& device, Strategy requested) {
  return plan(p, device, requested, default_planner_table(device));
}

Plan plan(const Problem& p, const DeviceFacts& device, Strategy requested, const PlannerTable& t) {
  if (p.rows < 0 || p.cols < 0) throw Error("normkit planner: argument 'problem' has negative rows or cols");
  std::string why;
  if (!strategy_supported(p, requested, &why, t))
    throw Error(std::string("normkit: strategy '") + strategy_name(requested) + "' cannot serve " +
                op_name(p.op) + " with M = " + std::to_string(p.rows) + ", N = " + std::to_string(p.cols) + ": " + why);

  Plan out;
  out.op = p.op;
  out.mask = is_backward(p.op) ? p.mask : Mask{false, false, false};
  if (is_rms(p.op)) out.mask.dbias = false;

  if (!is_backward(p.op)) {
    out.strategy = Strategy::Simple;  // unused: forward is one row kernel
    out.row = row_kernel_shape(p, device, t);
    if (forward_block_rows(out.row, p, device, t)) return out;
    if (forward_short_rows(out.row, p, t)) return out;
    if (forward_packed_rows(out.row, p, device, t)) return out;
    // Rows too long to cache: split over a cluster (read once; staged walks send each row's sums one
    // row ahead of its y, so they hold one stage more), else streamed (read twice).
    if (forward_split_rows(out.row, p, device, t))
      plan_stages(out.row, p, device, t, 1, false, guaranteed_row_blocks_per_sm(out.row), out.row.blocks / out.row.split,
                  0, true);
    else
      stage_row_kernel(out.row, p, device, t, 1, false);
    return out;
  }

  const Strategy strategy = requested == Strategy::Auto ? auto_strategy(p, device, t) : requested;
  out.strategy = strategy;
  out.programmatic_launch = t.programmatic_launch && device.programmatic_launch;
  out.partial_arrays = partial_arrays(p);

  if (strategy == Strategy::Fused) {
    out.row = fused_row_shape(p, device, t);
    const int split = out.row.split;
    if (split > 1 && !device_holds_cluster(device, split))
      throw Error("normkit: strategy 'fused' cannot serve " + std::string(op_name(p.op)) + " with M = " +
                  std::to_string(p.rows) + ", N = " + std::to_string(p.cols) + ": its row needs a cluster of " +
                  std::to_string(split) + " blocks and this device holds clusters of at most " +
                  std::to_string(device.max_cluster_blocks < 2 ? 0
                                                               : std::max(device.max_cluster_blocks,
                                                                          device.max_nonportable_cluster_blocks)));
    out.row.blocks = fused_walkers(p, device, t, out.row) * split;  // the persistent grid
    out.cluster_blocks = fused_cluster_blocks(p, device, t, out.row.rows_per_block);
    if (out.cluster_blocks > 0) out.row.blocks = out.cluster_blocks;
    // Dynamic shared memory: the row stages, and (always) the block's partial staging at the end;
    // a cluster block also keeps its finished partial row(s) there for the other blocks to read.
    const std::int64_t partial_staging =
        std::int64_t(out.row.block_threads()) * out.row.vec * std::int64_t(sizeof(float)) +
        (out.cluster_blocks > 0 ? std::int64_t(partial_arrays(p)) * p.cols * std::int64_t(sizeof(float)) : 0);
    // Split rows defer their cluster sums one row where measured faster (the key); wide rows
    // recompute their terms anyway, so deferring costs them nothing (unstaged walks cannot defer).
    // Deferred walks load the row statistics themselves: the stages leave them out.
    const bool defer = split > 1 && (out.row.items > kMaxFusedItems || split >= t.fused_deferred_min_split);
    // Split rows stall once a row on their cluster's sums: from fused_split_extra_stage_min_split
    // blocks (and always when deferred, holding the previous row) they stage one row more.
    const bool extra_stage = defer || (split > 1 && split >= t.fused_split_extra_stage_min_split);
    plan_stages(out.row, p, device, t, 2, !defer, kFusedBlocksPerSm, out.row.blocks / split, partial_staging,
                extra_stage, fused_wide_weight_bytes(p, out.row));
    out.deferred_sums = defer && out.row.stages > 0;
    const std::int64_t walkers_planned = out.row.blocks / split;
    if (p.mask.any_gamma_beta() && walkers_planned > 1 && out.cluster_blocks == 0) {  // one walker writes directly
      // a grid-wide sync needs a cooperative launch, which takes no clusters: split rows take two launches
      // ... and only on a grid that fills the GPU (PlannerTable::fused_single_launch_min_grid_percent)
      out.single_launch = t.fused_single_launch && split == 1 && fused_walkers_fill_single_launch(walkers_planned, device, t);
      out.partial_rows = walkers_planned;
      out.columns.block_x = kWarpSize;
      out.columns.reduce_block_y = reduce_block_y(out.partial_rows, t);
      out.columns.col_blocks = ceil_div(std::max<std::int64_t>(p.cols, 1), kWarpSize);
    }
    out.workspace_bytes = partial_bytes(out.partial_rows, p);
    return out;
  }

  // Unfused: a dX row kernel (when dx is requested) plus a gamma/beta column kernel.
  out.row = row_kernel_shape(p, device, t);
  if (p.mask.dx) {
    if (split_rows(out.row, p, device, t))
      plan_stages(out.row, p, device, t, 2, true, guaranteed_row_blocks_per_sm(out.row), out.row.blocks / out.row.split, 0);
    else stage_row_kernel(out.row, p, device, t, 2, true);
  }
  if (!p.mask.any_gamma_beta()) return out;
  switch (strategy) {
    case Strategy::Simple:
      out.columns.block_x = 256;
      out.columns.block_y = 1;
      out.columns.col_blocks = ceil_div(std::max<std::int64_t>(p.cols, 1), out.columns.block_x);
      break;
    case Strategy::Tiled:
      out.columns = tiled_shape(p, device, t);
      one_launch_shape(out, p, device, t);
      break;
    case Strategy::TwoPass:
      out.columns = two_pass_shape(p, device, t);
      out.columns.reduce_block_y = reduce_block_y(out.columns.row_parts, t);
      out.partial_rows = out.columns.row_parts;
      out.workspace_bytes = partial_bytes(out.partial_rows, p);
      break;
    default:
      break;
  }
  return out;
}

std::string Plan::describe() const {
  std::ostringstream os;
  if (!is_backward(op)) {
    os << "forward";
  } else if (!mask.any_gamma_beta()) {
    os << "dx_only";
  } else {
    os << strategy_name(strategy);
    if (strategy == Strategy::Tiled) {
      os << " " << band_name(columns.band) << (one_launch ? " one-launch" : "");
      if (columns.block_x < kWarpSize) os << " lanes=" << columns.block_x;
    }
    if (strategy == Strategy::TwoPass) os << " parts=" << columns.row_parts;
    if ((strategy == Strategy::Tiled || strategy == Strategy::TwoPass) && columns.vec > 1) os << " cols=vec" << columns.vec;
    if (strategy == Strategy::Fused)
      os << " blocks=" << row.blocks << (cluster_blocks > 0 ? " cluster" : single_launch ? " one-launch" : "");
  }
  if (!is_backward(op) || mask.dx || strategy == Strategy::Fused) {
    os << " row=vec" << row.vec << "x" << row.items << "/" << row.threads_per_row << "t";
    if (row.split > 1) os << " split=" << row.split << (deferred_sums ? " deferred" : "");
    if (row.stages > 0) os << " stages=" << row.stages;
    if (row.packed) os << " packed";
    if (row.short_rows) os << " short";
    if (row.block_rows) os << (row.block_rows_packed ? " block-rows packed" : " block-rows");
  }
  return os.str();
}

namespace {

/// One key of the planner table's text format: how it is written and read. format_planner_table and
/// load_planner_table both walk kTableKeys, so a key is declared once. `check` returns why a value
/// (already >= 0) is rejected, or "" to accept it; `set` may still clamp it.
struct TableKey {
  const char* name;
  long long (*get)(const PlannerTable&);
  void (*set)(PlannerTable&, long long);
  std::string (*check)(long long);
  long long max;  ///< the largest value the field holds (1 for a flag): larger ones are rejected, not cast
};

template <auto M>
long long read_member(const PlannerTable& t) {
  return static_cast<long long>(t.*M);
}
template <auto M>
void write_member(PlannerTable& t, long long v) {
  using Field = std::remove_reference_t<decltype(t.*M)>;
  t.*M = static_cast<Field>(v);
}
template <auto M>
void write_at_least_one(PlannerTable& t, long long v) {
  write_member<M>(t, std::max(v, 1LL));
}
std::string accept(long long) { return ""; }
/// Checks: why a value is rejected ("" = accepted); load_planner_table names the key before it.
std::string block_threads_check(long long v) {
  return (v < 32 || v > 1024 || (v & (v - 1))) ? "must be a power of two in [32, 1024]" : "";
}
std::string portable_cluster_check(long long v) {
  return v > kPortableClusterBlocks
             ? "must be at most " + std::to_string(kPortableClusterBlocks) + " (the portable cluster size normkit launches)"
             : "";
}
std::string largest_cluster_check(long long v) {
  return v > kMaxFusedSplitBlocks ? "must be at most " + std::to_string(kMaxFusedSplitBlocks) +
                                        " (the largest cluster normkit launches)"
                                  : "";
}
// (fused_cached_split_max at least 2, since a row beyond the cached blocks' capacity then needs two wide
// blocks, the wide layout's smallest split -- the wide kernel has no unsplit instance; its companion
// fused_cached_split_min_beyond_portable takes the same range)
std::string cached_split_check(long long v) {
  return v < 2 ? std::string("must be at least 2") : largest_cluster_check(v);
}
template <auto M, int kMax>
void write_items(PlannerTable& t, long long v) {  // vectors per thread: clamped to the kernels' instances
  write_member<M>(t, std::clamp<long long>(v, 1, kMax));
}

/// The range of a table field: a value of 2^32 + 1 for an int key was cast to 1, silently.
template <auto M>
constexpr long long field_max() {
  using Field = std::remove_reference_t<decltype(std::declval<PlannerTable&>().*M)>;
  return static_cast<long long>(std::numeric_limits<Field>::max());
}
template <auto M>
constexpr TableKey key(const char* name, std::string (*check)(long long) = accept) {
  return {name, read_member<M>, write_member<M>, check, field_max<M>()};
}
template <auto M>
constexpr TableKey key_at_least_one(const char* name) {
  return {name, read_member<M>, write_at_least_one<M>, accept, field_max<M>()};
}
template <auto M, int kMax>
constexpr TableKey key_items(const char* name) {
  return {name, read_member<M>, write_items<M, kMax>, accept, field_max<M>()};
}

using Table = PlannerTable;
const TableKey kTableKeys[] = {
    key<&Table::simple_max_rows>("simple_max_rows"),
    key<&Table::tile64_min_rows>("tile64_min_rows"),
    key<&Table::tile128_min_rows>("tile128_min_rows"),
    key<&Table::tile256_min_rows>("tile256_min_rows"),
    key_at_least_one<&Table::two_pass_min_rows_per_part>("two_pass_min_rows_per_part"),
    key_at_least_one<&Table::two_pass_target_blocks_per_sm>("two_pass_target_blocks_per_sm"),
    key<&Table::two_pass_min_rows>("two_pass_min_rows"),
    key<&Table::two_pass_min_rows_per_strip>("two_pass_min_rows_per_strip"),
    key<&Table::two_pass_min_rows_per_strip_with_dx>("two_pass_min_rows_per_strip_with_dx"),
    key<&Table::two_pass_min_rows_per_narrow_strip>("two_pass_min_rows_per_narrow_strip"),
    key<&Table::tiled_full_grid_percent>("tiled_full_grid_percent"),
    key<&Table::fused_enabled>("fused_enabled"),
    key<&Table::fused_min_bytes>("fused_min_bytes"),
    key<&Table::fused_bytes_min_rows>("fused_bytes_min_rows"),
    key<&Table::fused_min_row_bytes>("fused_min_row_bytes"),
    key<&Table::fp32_fused_min_row_bytes>("fp32_fused_min_row_bytes"),
    key<&Table::ln_fused_mid_rows_min_row_bytes>("ln_fused_mid_rows_min_row_bytes"),
    key<&Table::ln_fused_mid_rows_max_row_bytes>("ln_fused_mid_rows_max_row_bytes"),
    key<&Table::ln_fused_mid_rows_min_bytes>("ln_fused_mid_rows_min_bytes"),
    key<&Table::fused_split_min_bytes>("fused_split_min_bytes"),
    key<&Table::fp32_fused_split_min_bytes>("fp32_fused_split_min_bytes"),
    key<&Table::fused_wide_min_bytes>("fused_wide_min_bytes"),
    key<&Table::rms_fused_wide_min_bytes>("rms_fused_wide_min_bytes"),
    key<&Table::fused_min_rows>("fused_min_rows"),
    key<&Table::fused_gb_min_rows>("fused_gb_min_rows"),
    key<&Table::fused_gb_min_vectors>("fused_gb_min_vectors"),
    key<&Table::fused_gb_mid_min_vectors>("fused_gb_mid_min_vectors"),
    key<&Table::fused_gb_mid_max_vectors>("fused_gb_mid_max_vectors"),
    key<&Table::fused_gb_max_split>("fused_gb_max_split"),
    key<&Table::fused_unaligned_max_cols>("fused_unaligned_max_cols"),
    key<&Table::fused_unaligned_min_rows>("fused_unaligned_min_rows"),
    key<&Table::simple_min_cols>("simple_min_cols"),
    key<&Table::simple_few_rows_max>("simple_few_rows_max"),
    key<&Table::simple_few_rows_min_cols>("simple_few_rows_min_cols"),
    key<&Table::ln_simple_few_wide_rows_max>("ln_simple_few_wide_rows_max"),
    key<&Table::ln_simple_few_wide_rows_min_cols>("ln_simple_few_wide_rows_min_cols"),
    key_at_least_one<&Table::fused_min_rows_per_block>("fused_min_rows_per_block"),
    key_at_least_one<&Table::fused_split_min_rows_per_cluster>("fused_split_min_rows_per_cluster"),
    key<&Table::fused_single_launch>("fused_single_launch"),
    key<&Table::fused_single_launch_min_grid_percent>("fused_single_launch_min_grid_percent"),
    key<&Table::fused_cluster_max_elements>("fused_cluster_max_elements"),
    key<&Table::fused_cluster_max_cols>("fused_cluster_max_cols"),
    key<&Table::fused_cluster_max_blocks>("fused_cluster_max_blocks", portable_cluster_check),
    key<&Table::one_launch_max_elements>("one_launch_max_elements"),
    key_items<&Table::one_launch_items_target, kOneLaunchMaxItems>("one_launch_items_target"),
    key<&Table::reduce_min_block_y>("reduce_min_block_y", [](long long v) {
      return v > 1024 / kWarpSize ? "must be at most " + std::to_string(1024 / kWarpSize) : std::string();
    }),
    key<&Table::programmatic_launch>("programmatic_launch"),
    key<&Table::column_vec_min_cols>("column_vec_min_cols"),
    key<&Table::column_vec_two_pass_min_rows>("column_vec_two_pass_min_rows"),
    key<&Table::tiled_min_strip_lanes>("tiled_min_strip_lanes", [](long long v) {
      return v == 8 || v == 16 || v == kWarpSize ? std::string() : "must be 8, 16 or " + std::to_string(kWarpSize);
    }),
    key<&Table::tiled_narrow_strips_min_rows>("tiled_narrow_strips_min_rows"),
    key<&Table::tiled_narrow_max_strips_percent>("tiled_narrow_max_strips_percent"),
    key<&Table::tiled256_narrow_max_strips_percent>("tiled256_narrow_max_strips_percent"),
    key<&Table::tiled_tall_max_strips>("tiled_tall_max_strips"),
    key<&Table::tiled_tall_min_rows>("tiled_tall_min_rows"),
    key<&Table::tiled_tall_gb_min_rows>("tiled_tall_gb_min_rows"),
    key<&Table::tiled_tall_max_rows>("tiled_tall_max_rows"),
    key<&Table::tiled_tall_max_bytes>("tiled_tall_max_bytes"),
    key<&Table::tiled_tall_min_strips>("tiled_tall_min_strips"),
    key<&Table::tiled_tall_gb_min_strips>("tiled_tall_gb_min_strips"),
    key<&Table::tiled_tall_few_min_strips>("tiled_tall_few_min_strips"),
    key<&Table::tiled_tall_few_max_rows>("tiled_tall_few_max_rows"),
    key<&Table::tiled_tall_gb_full_grid_percent>("tiled_tall_gb_full_grid_percent"),
    key<&Table::tiled_tall_gb_min_last_wave_percent>("tiled_tall_gb_min_last_wave_percent"),
    key<&Table::tiled_tall_short_wave_min_rows>("tiled_tall_short_wave_min_rows"),
    key_items<&Table::tiled_tall_one_launch_items_target, kOneLaunchMaxItems>("tiled_tall_one_launch_items_target"),
    key<&Table::tiled_tall_strip_lanes>("tiled_tall_strip_lanes", [](long long v) {
      return v == 0 || v == 1 || v == 2 || v == 4 || v == 8 || v == 16 ? std::string() : "must be 0, 1, 2, 4, 8 or 16";
    }),
    key<&Table::tiled_tall_strip_max_rows_per_thread>("tiled_tall_strip_max_rows_per_thread", [](long long v) {
      return v == 1 || v == 2 || v == 4 || v == kTallStripMaxRowsPerThread ? std::string() : "must be 1, 2, 4 or 8";
    }),
    key_items<&Table::row_items_target, kMaxRowItems>("row_items_target"),
    key<&Table::row_block_threads>("row_block_threads", block_threads_check),
    key_at_least_one<&Table::row_blocks_per_sm>("row_blocks_per_sm"),
    key<&Table::small_grid_blocks>("small_grid_blocks"),
    key<&Table::forward_small_grid_blocks>("forward_small_grid_blocks"),
    key_items<&Table::small_grid_items_target, kMaxRowItems>("small_grid_items_target"),
    key<&Table::small_grid_block_threads>("small_grid_block_threads", block_threads_check),
    key<&Table::short_row_max_vectors>("short_row_max_vectors"),
    key<&Table::scalar_row_widest_group_min_cols>("scalar_row_widest_group_min_cols"),
    key_items<&Table::forward_short_row_items_target, kMaxRowItems>("forward_short_row_items_target"),
    key_items<&Table::fused_short_row_items_target, kMaxFusedItems>("fused_short_row_items_target"),
    key<&Table::rms_forward_one_item_min_vectors>("rms_forward_one_item_min_vectors"),
    key<&Table::rms_forward_packed_min_bytes>("rms_forward_packed_min_bytes"),
    key<&Table::forward_short_rows_min_bytes>("forward_short_rows_min_bytes"),
    key<&Table::forward_short_rows_max_vectors>("forward_short_rows_max_vectors", [](long long v) {
      return v > kShortRowMaxVectors ? "must be at most " + std::to_string(kShortRowMaxVectors) + " (kShortRowMaxVectors)"
                                     : std::string();
    }),
    key<&Table::ln_forward_warp_rows_min_bytes>("ln_forward_warp_rows_min_bytes"),
    key<&Table::ln_forward_long_warp_rows_min_bytes>("ln_forward_long_warp_rows_min_bytes"),
    key<&Table::forward_block_rows_below_bytes>("forward_block_rows_below_bytes"),
    key_items<&Table::forward_block_rows_items_target, kBlockRowMaxItems>("forward_block_rows_items_target"),
    key<&Table::ln_forward_block_rows_wide_below_bytes>("ln_forward_block_rows_wide_below_bytes"),
    key<&Table::forward_block_rows_narrow_below_bytes>("forward_block_rows_narrow_below_bytes"),
    key<&Table::ln_forward_block_rows_four_items_min_bytes>("ln_forward_block_rows_four_items_min_bytes"),
    key<&Table::forward_block_rows_packed_min_rows_per_sm>("forward_block_rows_packed_min_rows_per_sm"),
    key<&Table::forward_block_rows_packed_mixed_min_bytes>("forward_block_rows_packed_mixed_min_bytes"),
    key<&Table::forward_block_rows_packed_mixed_widest_min_bytes>("forward_block_rows_packed_mixed_widest_min_bytes"),
    key_items<&Table::forward_packed_items_target, kMaxRowItems>("forward_packed_items_target"),
    key<&Table::forward_packed_block_threads>("forward_packed_block_threads", [](long long v) {
      return block_threads_check(v).empty() && v > kPackedRowMaxThreads
                 ? "must be at most " + std::to_string(kPackedRowMaxThreads) + " (kPackedRowMaxThreads)"
                 : block_threads_check(v);
    }),
    key<&Table::fused_short_row_min_rows>("fused_short_row_min_rows"),
    key<&Table::fused_short_row_dx_min_bytes>("fused_short_row_dx_min_bytes"),
    key<&Table::rms_fused_short_row_dx_min_bytes>("rms_fused_short_row_dx_min_bytes"),
    key<&Table::row_pipeline_stages>("row_pipeline_stages",
                                 [](long long v) {
                                   return v > kMaxRowStages ? "must be at most " + std::to_string(kMaxRowStages)
                                                            : std::string();
                                 }),
    key<&Table::row_stage_bytes_per_sm>("row_stage_bytes_per_sm"),
    key<&Table::row_split_max>("row_split_max", portable_cluster_check),
    key<&Table::row_split_wide_max>("row_split_wide_max", largest_cluster_check),
    key<&Table::forward_split_max>("forward_split_max", largest_cluster_check),
    key<&Table::forward_split_min_vectors>("forward_split_min_vectors"),
    key<&Table::forward_split_ln_max_thread_elements>("forward_split_ln_max_thread_elements"),
    key<&Table::forward_split_wide_items_min_vectors>("forward_split_wide_items_min_vectors"),
    key<&Table::forward_split_wide_items_min_rows>("forward_split_wide_items_min_rows"),
    key<&Table::forward_split_wide_min_vectors>("forward_split_wide_min_vectors"),
    key<&Table::fused_split_max>("fused_split_max", largest_cluster_check),
    key<&Table::fused_cached_split_max>("fused_cached_split_max", cached_split_check),
    key<&Table::fused_cached_split_min_beyond_portable>("fused_cached_split_min_beyond_portable", cached_split_check),
    key<&Table::fused_split_most_clusters>("fused_split_most_clusters"),
    key<&Table::fused_deferred_min_split>("fused_deferred_min_split"),
    key<&Table::fused_split_extra_stage_min_split>("fused_split_extra_stage_min_split"),
    key<&Table::fused_wide_min_element_bytes>("fused_wide_min_element_bytes"),
};

/// Keys of older tables, with what replaced them (a clear error instead of "unknown key").
const std::pair<const char*, const char*> kReplacedKeys[] = {
    {"fused_min_elements", "fused_min_bytes and fused_min_row_bytes"},
    {"tiled_with_dx_max_rows", "two_pass_min_rows and two_pass_min_rows_per_strip_with_dx"},
};

}  // namespace

std::string format_planner_table(const PlannerTable& t) {
  std::ostringstream os;
  os << "# normkit planner table (key = value); read by load_planner_table()\n";
  for (const TableKey& k : kTableKeys) os << k.name << " = " << k.get(t) << "\n";
  return os.str();
}

PlannerTable load_planner_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("normkit: argument 'path': cannot open planner table '" + path + "'");
  PlannerTable t;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto eq = line.find('=');
    auto fail = [&](const std::string& what) {
      throw Error("normkit: planner table '" + path + "' line " + std::to_string(line_no) + ": " + what);
    };
    if (eq == std::string::npos) fail("expected 'key = value'");
    auto trim = [](std::string s) {
      const auto b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
      return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
    };
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    long long v = 0;
    try {
      std::size_t used = 0;
      v = std::stoll(value, &used);
      if (used != value.size()) fail("value '" + value + "' is not an integer");
    } catch (const std::logic_error&) {
      fail("value '" + value + "' is not an integer");
    }
    if (v < 0) fail("value of '" + key + "' must be >= 0");
    for (const auto& [old_key, replacement] : kReplacedKeys)
      if (key == old_key) fail(key + " was replaced by " + replacement);
    const TableKey* found = nullptr;
    for (const TableKey& k : kTableKeys)
      if (key == k.name) found = &k;
    if (found == nullptr) fail("unknown key '" + key + "'");
    if (v > found->max)
      fail(key + (found->max == 1 ? " must be 0 or 1" : " must be at most " + std::to_string(found->max)));
    const std::string why = found->check(v);
    if (!why.empty()) fail(key + " " + why);
    found->set(t, v);
  }
  if (!(t.tile64_min_rows <= t.tile128_min_rows && t.tile128_min_rows <= t.tile256_min_rows))
    throw Error("normkit: planner table '" + path + "': tile band thresholds must be increasing");
  return t;
}

}  // namespace normkit
