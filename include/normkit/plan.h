// normkit planner: the one place that turns a problem (op, M, N, dtypes, mask, device) into a plan
// (strategy, launch shapes, workspace bytes). Pure host C++: no CUDA headers, unit-tested on the CPU.
// Every threshold lives in PlannerTable (src/planner/planner.cpp documents where each was measured).
#pragma once

#include <cstdint>
#include <string>

#include "normkit/types.h"

namespace normkit {

/// Warp size of the target. NVIDIA: 32 (AMD wavefronts are 64; DeviceFacts::warp_size carries it).
constexpr int kWarpSize = 32;
constexpr int kWarpSizeLog2 = 5;
static_assert((1 << kWarpSizeLog2) == kWarpSize, "kWarpSizeLog2 is log2(kWarpSize)");
/// Tall vectorised strips (PlannerTable::tiled_tall_max_strips): threads a block, lanes and rows a thread
/// unrolled a block iteration at most (8 rows of x and dy in 16-byte packs are 64 registers of the 128
/// that 512-thread blocks leave a thread) at most.
constexpr int kTallStripThreads = 512;
constexpr int kTallStripMaxRowsPerThread = 8;
constexpr int kTallStripMaxLanes = 16;
/// Tall-strip blocks an SM holds by rows a thread: from 4 rows x and dy take 76-128 registers (ptxas,
/// sm_90: 8 rows 121-128, 4 rows 76-79), one 512-thread block an SM; 1-2 rows take 42-62, two.
constexpr int tall_strip_blocks_per_sm(int rows_per_thread) { return rows_per_thread >= 4 ? 1 : 2; }

enum class Op : std::uint8_t { LayerNormForward, LayerNormBackward, RmsNormForward, RmsNormBackward };
const char* op_name(Op op);
inline bool is_rms(Op op) { return op == Op::RmsNormForward || op == Op::RmsNormBackward; }
inline bool is_backward(Op op) { return op == Op::LayerNormBackward || op == Op::RmsNormBackward; }

/// Which backward outputs are requested (PyTorch's output_mask). RMSNorm never has dbias.
struct Mask {
  bool dx = true;
  bool dweight = true;
  bool dbias = true;
  bool any_gamma_beta() const { return dweight || dbias; }
};

/// The seed's tiled bands, chosen by M: Tile-8 (M < 64), Tile-64, Tile-128, Tile-256 (M >= 256).
enum class TileBand : std::uint8_t { None, Tile8, Tile64, Tile128, Tile256 };
const char* band_name(TileBand band);

/// Blocks of a fused row split over the largest cluster (PlannerTable::fused_split_max's cap): 16, the
/// non-portable cluster size of sm_90 (kernels opt in per launch).
constexpr int kMaxFusedSplitBlocks = 16;

/// The GPUs with a built-in planner table of their own (builtin_planner_table). Every other GPU, and
/// the CPU path, plans with the H200's, on which the thresholds were measured.
enum class BuiltinTable : std::uint8_t { H200, H100Sxm };
const char* builtin_table_name(BuiltinTable table);  ///< "H200", "H100 SXM"
/// The built-in table for a device, from its name (cudaDeviceProp::name) and SM count: the H100 SXM's
/// for "NVIDIA H100 80GB HBM3" with 132 SMs (the GPU its table was measured on; the PCIe and NVL
/// H100s differ in SMs, clocks and memory), the H200's for any other.
BuiltinTable builtin_table_for(const std::string& device_name, int sm_count);

/// What the planner needs to know about the GPU. Filled from cudaGetDeviceProperties by the CUDA
/// layer; tests construct it by hand (AMD-like warp_size 64 included).
struct DeviceFacts {
  int sm_count = 132;
  std::int64_t l2_bytes = 60LL << 20;
  std::int64_t smem_per_block = 48 << 10;  ///< without opt-in
  std::int64_t smem_per_block_optin = 227 << 10;  ///< with cudaFuncAttributeMaxDynamicSharedMemorySize
  std::int64_t smem_per_sm = 228 << 10;
  int warp_size = 32;
  int max_threads_per_block = 1024;
  /// Blocks a thread-block cluster may hold (sm_90 and later: 8, the portable size; 0 = no clusters).
  int max_cluster_blocks = 8;
  /// The largest cluster a kernel that opts in to non-portable sizes may launch (sm_90: 16; 0 = none).
  /// Only the fused backward's widest rows use it (kMaxFusedSplit).
  int max_nonportable_cluster_blocks = 16;
  /// Programmatic dependent launch (sm_90 on): a kernel may start before the previous one ends.
  bool programmatic_launch = true;
  /// SMs that clusters of k blocks fill at once at one block an SM (cudaOccupancyMaxActiveClusters
  /// times k), for k = 1..16 at index k - 1; 0 = not known. The GPCs decide it, not the SM count: the
  /// H200's 132 SMs hold 15 clusters of 8 (120 SMs) and 15 of 7 (105), 17 of 6 (102), 7 of 16 (112)
  /// and 7 of 12 (84). Filled by the CUDA layer from the device; these are the H200's (measured,
  /// docs/NOTES.md entry 70). The fused split walk sizes its clusters by them
  /// (PlannerTable::fused_split_most_clusters).
  int cluster_sms[kMaxFusedSplitBlocks] = {132, 132, 117, 120, 110, 102, 105, 120, 81, 70, 77, 84, 91, 98, 105, 112};
  /// The built-in table a call on this device plans with when it names none (default_planner_table).
  BuiltinTable builtin_table = BuiltinTable::H200;
  static DeviceFacts h200() { return {}; }
  /// An H100 SXM (80GB HBM3) as its CUDA layer reports it: the H200's SMs and cluster counts (normkit-bench's
  /// header on both), 50 MiB of L2, and the H100's built-in table.
  static DeviceFacts h100_sxm() {
    DeviceFacts d;
    d.l2_bytes = std::int64_t(50) << 20;
    d.builtin_table = BuiltinTable::H100Sxm;
    return d;
  }
};

/// The problem as the planner sees it.
struct Problem {
  Op op = Op::LayerNormBackward;
  std::int64_t rows = 0;  ///< M
  std::int64_t cols = 0;  ///< N
  DType dtype = DType::F16;         ///< activation dtype (x, dy, y, dx)
  DType weight_dtype = DType::F16;  ///< weight / dweight dtype
  Mask mask{};
  bool rows_vector_aligned = true;  ///< every row pointer 16-byte aligned (data and strides)
};

/// Shape of a row-wise kernel (forward, dX, and the row walk of the fused backward): each row is
/// handled by a group of `threads_per_row` threads; each thread caches `items` vectors of `vec`
/// elements in registers (items == 0: the row is streamed from memory twice instead).
struct RowShape {
  int vec = 1;              ///< elements per vector access (16 bytes / element size, or 1)
  int items = 0;            ///< vectors per thread kept in registers; 0 = streaming path
  int threads_per_row = 32; ///< power of two, 1..1024
  int rows_per_block = 1;   ///< groups per block
  std::int64_t blocks = 0;  ///< grid size; rows are grid-strided when blocks * rows_per_block < M
  /// Rows staged through shared memory by cp.async, this many row iterations deep (stages - 1 in
  /// flight while one is used); 0 = loaded straight into registers. Needs vec > 1 (16-byte copies).
  int stages = 0;
  std::int64_t smem_bytes = 0;  ///< dynamic shared memory per block for the stages
  /// Blocks per row (the dX and fused kernels, rows too long to cache in one block): a thread-block cluster of
  /// `split` blocks holds one row in registers, block r owning slice_cols columns from r *
  /// slice_cols; its row sums add over the cluster. `blocks` counts blocks (split per cluster).
  /// 1 = a row lies in one block.
  int split = 1;
  int slice_cols = 0;           ///< columns per block of a split row (a multiple of vec)
  /// RMSNorm forward's lean walk (rms_forward_packed_kernel; PlannerTable::rms_forward_packed_min_bytes): a block
  /// per `rows_per_block` rows, the row kept in registers in its storage type and converted where
  /// used, in few registers (kPackedRowMinBlocks) so that many blocks are resident; never staged or
  /// split. `blocks` covers every row.
  bool packed = false;
  /// The forward's short-row walk (forward_short_rows_kernel; PlannerTable::forward_short_rows_min_bytes,
  /// ln_forward_warp_rows_min_bytes): `items` 16-byte vectors a lane, threads_per_row lanes a row (a
  /// compile-time width of at most a warp), each group short_rows_per_group(items) rows at once,
  /// blocks of kShortRowBlockThreads threads, a grid over every row; never staged or split.
  bool short_rows = false;
  /// The forward's one-row-a-block walk (forward_block_rows_kernel; PlannerTable::forward_block_rows_below_bytes):
  /// a block of threads_per_row threads (a compile-time width, kBlockRowMinThreads..kBlockRowMaxThreads)
  /// holds one row, `items` 16-byte vectors a thread; a grid of one block per row; never staged or split.
  bool block_rows = false;
  /// One row a block in the instance that holds x packed across its row sums, under launch bounds
  /// of its register budget (block_rows_packed_instance, block_row_min_blocks;
  /// PlannerTable::forward_block_rows_packed_min_rows_per_sm).
  bool block_rows_packed = false;
  int block_threads() const { return threads_per_row * rows_per_block; }
};

/// Shape of a column-strip gamma/beta kernel (simple, tiled, two-pass pass 1) and of the partial
/// reduce (two-pass pass 2, fused final reduce).
struct ColumnShape {
  TileBand band = TileBand::None;
  int block_x = 32;              ///< lanes per block row
  int vec = 1;                   ///< columns per lane, read 16 bytes at a time when > 1 (vector rule)
  int block_y = 1;               ///< thread rows per block
  int rows_per_thread = 1;       ///< rows a thread accumulates per block iteration
  std::int64_t col_blocks = 0;   ///< column strips
  std::int64_t row_parts = 1;    ///< two-pass: row slices (= partial rows); 1 otherwise
  std::int64_t rows_per_part = 0;
  int reduce_block_y = 8;        ///< partial reduce: thread rows summing one column strip together
  int rows_per_iteration() const { return block_y * rows_per_thread; }
  int columns_per_block() const { return block_x * vec; }
  /// Tall vectorised strips (PlannerTable::tiled_tall_max_strips): 16 bytes a lane, fewer lanes than a warp.
  bool tall_strips() const { return vec > 1 && block_x < kWarpSize; }
};

struct Plan {
  Op op = Op::LayerNormBackward;
  Strategy strategy = Strategy::Simple;  ///< never Auto once planned
  Mask mask{};
  RowShape row;            ///< forward / dX kernel, or the fused kernel's row walk
  ColumnShape columns;     ///< gamma/beta kernels (unused by forward and fused)
  std::int64_t partial_rows = 0;  ///< rows of fp32 partials [partial_rows, N] (two-pass, fused)
  int partial_arrays = 0;         ///< 2 for LayerNorm dweight+dbias, 1 otherwise
  bool single_launch = false;     ///< fused: final reduce after a grid-wide sync in the same (cooperative) launch
  /// tiled with dX: one launch of row.blocks dX blocks followed by columns.col_blocks column strips,
  /// all of columns.block_x * columns.block_y threads (PlannerTable::one_launch_max_elements)
  bool one_launch = false;
  /// fused: the grid is one thread-block cluster of this many blocks, which sum their block
  /// partials through distributed shared memory and write dgamma/dbeta themselves (one launch, no
  /// workspace); 0 = not a cluster
  int cluster_blocks = 0;
  /// fused, staged split rows: each row's cluster sums are sent after its accumulation and received
  /// for its dX one row later, after the next row's accumulation, so the exchange overlaps work
  /// (PlannerTable::fused_deferred_min_split; rows of kFusedWideItems always)
  bool deferred_sums = false;
  /// The call's second kernel (gamma/beta after dX, a partial reduce after its partials) is launched
  /// programmatically: it may start while the first still runs (PlannerTable::programmatic_launch)
  bool programmatic_launch = false;
  std::size_t workspace_bytes = 0;
  std::string describe() const;   ///< one line, e.g. "two_pass parts=33 row=vec8x1/64t"
};

/// Thresholds. The defaults were measured on the H200 (see docs/NOTES.md); an H100 SXM plans with a
/// built-in table of its own (builtin_planner_table), and normkit-bench --tune can write a table for
/// another GPU which load_planner_table() reads.
struct PlannerTable {
  // gamma/beta strategy choice when the fused path cannot serve the call (or is not chosen)
  /// M <= this: simple (one thread per column). The bf16 sweep at 57bda28 (docs/NOTES.md, entry 9):
  /// at M = 7 tiled beat simple 1.6-2.25x for N = 64..16384; at M = 1 they tie.
  std::int64_t simple_max_rows = 1;
  /// N >= this: simple at any M that tiled would serve, when the rows are not vectorised (scalar
  /// 32-column strips read 64-byte pieces of a row; simple's 256 columns per block read whole
  /// sectors). Sweep at 57bda28, scalar strips: simple won 1.07-1.46x at N = 262144 for M = 64..1024
  /// and 1.02x at M = 4096; tiled won 3x at N = 65536. Vectorised strips (16 bytes per lane) never
  /// take simple for width.
  std::int64_t simple_min_cols = 262144;
  /// Gamma/beta alone (no dX) on M <= this many rows of at least simple_few_rows_min_cols columns:
  /// simple too. H200, graph, tiled / simple (docs/NOTES.md entry 60, bf16 / fp16, LayerNorm and
  /// RMSNorm): M = 2..4 at N = 4096..262144 1.04-1.48 (2 x 262144 LayerNorm bf16: 4.25 vs 2.87 us), N =
  /// 512 0.95-1.10; M = 5, 6 0.82-0.92 below N = 262144 (tiled faster). With dX they tie (tiled 0.97-1.01
  /// where its dX is not in the strips' launch, one-launch tiled 0.84-0.88): dX keeps tiled.
  std::int64_t simple_few_rows_max = 4;
  std::int64_t simple_few_rows_min_cols = 4096;
  /// ... and LayerNorm's (dgamma and dbeta) on up to this many rows of at least
  /// ln_simple_few_wide_rows_min_cols columns: tiled / simple 1.04-1.10 at M = 5..7, N = 196608 and
  /// 262144 (bf16 / fp16; the quick sweep's 7 x 262144 cell 1.03-1.07), 1.01 at M = 8. RMSNorm's went
  /// either way there (bf16 1.02-1.04, fp16 0.93-0.98): not taken.
  std::int64_t ln_simple_few_wide_rows_max = 7;
  std::int64_t ln_simple_few_wide_rows_min_cols = 196608;
  std::int64_t tile64_min_rows = 64;         ///< seed bands
  std::int64_t tile128_min_rows = 128;
  std::int64_t tile256_min_rows = 256;
  /// two-pass once the tiled grid (N / 32 column strips) leaves SMs idle and M is large enough
  /// to give every part this many rows
  std::int64_t two_pass_min_rows_per_part = 64;
  int two_pass_target_blocks_per_sm = 4;
  /// ... and only from max(two_pass_min_rows, strips x two_pass_min_rows_per_strip) rows (strips =
  /// tiled's column strips; _with_dx when dX is computed too: tiled runs beside the dX kernel). Since
  /// tiled issues a block iteration's loads together (a602991), one iteration covering up to 256
  /// rows, it beat two-pass (fp16 sweep, graph): gamma/beta alone up to M = 256 at N = 512..1024
  /// (two-pass from 384: 3.96 vs 4.71 us at N = 512), up to 1024 at N = 2048 and 2048 at N = 4096
  /// (16.6 vs 20.6 us: a known loss of this rule); with dX up to 256 at N = 512, 768 at N = 1024
  /// and 1024 at N = 2048..4096.
  std::int64_t two_pass_min_rows = 384;
  std::int64_t two_pass_min_rows_per_strip = 16;
  std::int64_t two_pass_min_rows_per_strip_with_dx = 24;
  /// Gamma/beta alone on strips narrower than a warp (tiled_min_strip_lanes), below
  /// column_vec_two_pass_min_rows rows: rows a strip, counted on the narrowed strips (with dX:
  /// two_pass_min_rows_per_strip_with_dx on them). bf16 / fp32, graph, M = 384..1024, N = 264..2048
  /// (docs/NOTES.md entry 56): tiled with 16-lane strips 0.72-0.93x two-pass up to 48 strips x 24 rows
  /// (384 x 264, 512 x 512, 768 x 768 RMSNorm), two-pass ahead at 1024 x 768 / 1024; the warp-wide
  /// rule (16 rows a warp-wide strip) had missed 93 of the 184 cells measured by > 3 % (worst 1.44x),
  /// this one misses 10 (worst 1.11x: 600 x 768 LayerNorm bf16).
  std::int64_t two_pass_min_rows_per_narrow_strip = 24;
  /// Tiled is taken at any M once its strips number at least this percent of the SMs (they fill the
  /// GPU; 100 = one strip per SM). bf16 sweep at 3440edf, gamma/beta alone, N = 4097 (129 strips on
  /// 132 SMs): tiled 0.58-0.96x two-pass at M = 255..65535. Vectorised strips count vec times in the
  /// strips x two_pass_min_rows_per_strip rule above (docs/NOTES.md entry 27). Not where two-pass
  /// reads 16 bytes a lane and tiled one column (vectorised rows of fewer than column_vec_min_cols
  /// columns, from column_vec_two_pass_min_rows rows): there two-pass is taken. Under this rule
  /// tiled's 256 scalar strips at N = 8192 had made it 1.37-1.43x two-pass at 4096 x 8192, and 1.5-
  /// 1.9x at 4096..16384 x 12288 (bf16 gamma/beta, graph, docs/NOTES.md entry 30).
  /// 97 -> 96 at the sweep after entry 31 (docs/NOTES.md entry 32): 128 vectorised strips (N = 32768
  /// bf16, 97.0 % of 132) measured tiled 0.93x two-pass at 16384 x 32768 gamma/beta (468.6 vs 500.8 us
  /// LayerNorm, 467.0 vs 492.1 RMSNorm) and 0.92-0.94x at M = 4096 and 8192.
  std::int64_t tiled_full_grid_percent = 96;
  /// fused backward: used by auto whenever the row fits the register-cached layout
  bool fused_enabled = true;
  /// ... and only from fused_min_bytes of x (M x N x element size) on, with at least
  /// fused_bytes_min_rows rows of at least fused_min_row_bytes each, or from fused_min_rows rows at
  /// any N. Only when dX is requested (see fused_gb_min_rows). With the single cooperative launch
  /// (fused_single_launch) and a block per row group (fused_min_rows_per_block), H200 full backward,
  /// graph (docs/NOTES.md entry 30): fused / the best unfused at M = 1024 was 0.81-0.94x for N =
  /// 768..2048 in bf16, fp16 and fp32 (a tie at 4096: tiled 15.9 vs fused 15.8-15.9 us; 1024 x 512
  /// bf16, 1 MiB, a tie: 6.77 vs 6.71), at M = 2048..4096 0.67-0.95x from 2 MiB (2048 x 512 bf16 LN
  /// 7.63 vs 8.41, RMS 6.73 vs 8.17; 4096 x 256 0.88-0.95x; one loss: fp16 LayerNorm 4096 x 768,
  /// 12.45 vs 12.00); below 1.5 MiB it lost (1024 x 256 fp32 1.23x, 2048 x 128 16-bit 1.2-1.5x), and
  /// at M = 512 whatever the bytes (LayerNorm 512 x 4096 1.33x). Before (second launch, 0b45745 ..
  /// d8c31aa): 16 MiB and rows of 4096 bytes (entries 19, 27). Rows the dX kernel would stream
  /// (longer than its split covers) are fused at any size (entry 27). 16-bit rows of 256-511 bytes
  /// since entry 66 (512 before; bf16, graph, N = 128 / 192 / 248, M = 3072..8191): auto within 3 % of
  /// the best forced plan on 26 of 36 cells (12 before), geometric mean auto / best 1.086 -> 1.034;
  /// RMSNorm 6144 x 128 7.54 -> 6.10 us, LayerNorm 8191 x 248 11.71 -> 10.35; the new losses where
  /// fused turns into its persistent staged walk (LayerNorm 4608 / 5000 x 192, 1.13 / 1.09). fp32 rows keep
  /// their own key, fp32_fused_min_row_bytes.
  std::int64_t fused_min_bytes = 3 << 19;
  std::int64_t fused_bytes_min_rows = 1024;
  std::int64_t fused_min_row_bytes = 256;
  /// ... for fp32 rows: 512 bytes (128 columns). Entry 66's probe at 256 (N = 64 and 96, M = 3072..8191)
  /// was a wash: 14 of 24 cells within 3 % either way, LayerNorm 4096..5000 x 96 1.05-1.17x slower.
  std::int64_t fp32_fused_min_row_bytes = 512;
  /// LayerNorm rows of ln_fused_mid_rows_min_row_bytes..ln_fused_mid_rows_max_row_bytes bytes (16-bit N =
  /// 256..768, fp32 N = 128..384) take fused with dX by the byte rule only from ln_fused_mid_rows_min_bytes
  /// of x, unless the fused grid is one full launch of a row group a block (the single launch's share of
  /// the SMs, at most one group each). Fused there steps up as soon as its blocks walk a second group,
  /// and catches two-pass again only from ~4 MiB. H200, graph (docs/NOTES.md entry 68; bf16 / fp16 /
  /// fp32, M = 1536..5000): auto within 3 % of the better of two-pass and fused on 45 / 45 / 27 of 49 /
  /// 49 / 28 cells (21 / 27 / 15 before), e.g. 1536 x 768 bf16 8.83 -> 7.70 us; out of sample (other N,
  /// M = 1800..6000) 25 / 25 / 17 of 28 / 28 / 21 (13 / 13 / 7 with the rule off).
  std::int64_t ln_fused_mid_rows_min_row_bytes = 512;
  std::int64_t ln_fused_mid_rows_max_row_bytes = 1536;
  std::int64_t ln_fused_mid_rows_min_bytes = std::int64_t(4) << 20;
  /// ... and rows split over a cluster of 2-item blocks (with dX; not the wide layout of
  /// kFusedWideItems) from this many bytes of x at any M. H200, graph,
  /// every strategy forced at 64..768 rows (docs/NOTES.md entry 50), fused / tiled (+ the split dX):
  /// from 32 MiB fused won or tied in every case (bf16 255 x 65536 LN 1.02, RMS 0.91; 512 x 65536
  /// 0.92 / 0.85; 512 x 32768 0.97 / 0.90; fp32 255 x 32768 0.84 / 0.76, 512 x 16384 0.83 / 0.77);
  /// at 16 MiB it lost in bf16 (128 x 65536 1.31 / 1.12, 255 x 32768 1.16 / 1.04, 512 x 16384 1.05 /
  /// 0.93) and won in fp32 (512 x 8192 0.91 / 0.86, 255 x 16384 0.99 / 0.92): fp32 has its own key.
  /// Nothing was measured between 16 and 32 MiB; 24 MiB takes 255 x 65536 (31.9 MiB) in.
  std::int64_t fused_split_min_bytes = std::int64_t(24) << 20;
  /// ... the same for fp32 rows (4-byte elements: half the elements, and fewer instructions, a byte
  /// of x): fused won at both fp32 cells of about 16 MiB measured (above: 512 x 8192 at 16 MiB, and
  /// 255 x 16384 at 15.9, just below the key); smaller ones were not measured.
  std::int64_t fp32_fused_split_min_bytes = std::int64_t(16) << 20;
  /// Rows of the fused kernel's wide layout (kFusedWideItems vectors a thread over up to
  /// kMaxFusedSplitBlocks blocks: more than a portable cluster of 2-item blocks holds, 65536 16-bit
  /// columns) are fused with dX from this size of x at any M, 16-bit rows (from 1024 rows the size
  /// rules take them anyway): LayerNorm fused_wide_min_bytes, RMSNorm rms_fused_wide_min_bytes. H200,
  /// graph, fused / tiled + split dX (docs/NOTES.md entry 60, bf16 / fp16): LayerNorm N = 262144 0.92-0.94
  /// at 256 rows (128 MiB), 0.81-0.86 at 512-768, 1.10-1.11 at 128 (64 MiB); N = 131072 0.90 at 512
  /// rows (128 MiB), 1.02-1.03 at 256 (64 MiB). RMSNorm N = 262144 0.93 at 128 rows (64 MiB), 1.09 at
  /// 64; N = 131072 0.88-0.90 at 256 (64 MiB), 1.03-1.07 at 128 (32 MiB). Thresholds between the two.
  std::int64_t fused_wide_min_bytes = std::int64_t(96) << 20;
  std::int64_t rms_fused_wide_min_bytes = std::int64_t(48) << 20;
  /// ... or from this many rows on, whatever N (narrow rows with huge M: fused 1.8-4.9x faster than
  /// two-pass at N = 1 and 64 from M = 16384; with programmatic launch from M = 8192, same sweep).
  std::int64_t fused_min_rows = 8192;
  /// Without dX (gamma/beta only) the unfused strategies read x and dy once too, so fused is chosen
  /// from this many rows on, and (vectorised rows) only for rows of at least fused_gb_min_vectors
  /// 16-byte vectors (short rows: fused_short_row_min_rows). Since the batched partial reduce
  /// (65c23e7) two-pass beat fused on gamma/beta alone at N = 768 and 1024 at every M of the bf16
  /// sweep (1.02-1.19x, 4345a27; no longer from 8192 rows, see fused_gb_mid_min_vectors) and at 131072
  /// x 4096 (481 vs 496 us, llm suite); fused still wins at 16384 x 8192 (139 vs 149 us). Before
  /// (3adcbae): fused from 8192 rows whatever N.
  std::int64_t fused_gb_min_rows = 8192;
  std::int64_t fused_gb_min_vectors = 1024;
  /// ... and on rows of fused_gb_mid_min_vectors..fused_gb_mid_max_vectors 16-byte vectors (16-bit N =
  /// 768..1024) from fused_gb_min_rows too (min above max = off). H200, graph, fused / two-pass: quick
  /// sweeps at 7f62504 (bf16, fp16, LayerNorm and RMSNorm) 0.962-0.991 at 16384 rows, 0.982-0.994 at
  /// 65535, 0.998-1.012 at 262144, but 0.975-1.23 at 4097; llm suite at b805800, 8192 x 768 / 1000
  /// 0.972-1.013 (docs/NOTES.md entry 95). Rows between 128 and 1024 vectors were not measured apart
  /// (131072 x 4096, 512 vectors: fused 1.004-1.005x two-pass at b805800).
  std::int64_t fused_gb_mid_min_vectors = 96;
  std::int64_t fused_gb_mid_max_vectors = 128;
  /// ... and on rows split over a cluster of at most this many blocks (rows longer than one block
  /// holds; 1 = never split without dX). bf16, graph (docs/NOTES.md entry 32): N = 16384 (split 2)
  /// fused / best unfused at M = 8192, 16384, 32768: LayerNorm 0.95, 0.92, 0.91; RMSNorm 0.99, 0.96,
  /// 0.95 (16384 x 16384: 254.7 vs two-pass 275.8 us). N = 32768 (split 4): 1.06-1.21x tiled.
  int fused_gb_max_split = 2;
  /// Rows that are not 16-byte vectorised take fused only up to this N (one thread's worth): the
  /// scalar fused path lost 2x to two-pass at N = 255 (M >= 16384) and won 2-5x at N = 1.
  std::int64_t fused_unaligned_max_cols = 32;
  /// ... and only from this many rows on, with or without dX: at N = 1 (bf16 sweep at 4345a27, after
  /// the batched partial reduce) fused / two-pass was 1.33 / 1.60 (full backward / gamma/beta) at M
  /// = 16384 and 0.82 / 0.83 at 65535 (0.60 / 0.63 at 16384 before it, c825604); the crossover,
  /// interpolated, is near 44K rows.
  std::int64_t fused_unaligned_min_rows = 49152;
  /// Row groups per fused block at least (fewer blocks for small M: less partial traffic). 1 since
  /// entry 30 (same probe, fused forced, graph): LayerNorm fp16 1024 x 768 8.73 -> 7.28 us and bf16
  /// 2048 x 512 8.88 -> 7.61 (single launch), fp16 96 x 768 7.67 -> 5.63 (second launch); within
  /// 1-2 % from M = 2048 on longer rows, where the grid is full either way.
  std::int64_t fused_min_rows_per_block = 1;
  /// ... and rows per cluster of a split row at least: 2 (a cluster that walks one row has nothing
  /// to overlap it with). Same build, fused forced, bf16 graph, 2 vs 1: 7 x 262144 (auto: fused)
  /// LayerNorm 42.9 vs 47.8 us, RMSNorm 27.7 vs 31.9; 64 x 262144 and wider M equal.
  std::int64_t fused_split_min_rows_per_cluster = 2;
  /// Grid-wide sync + final reduce in one cooperative launch (else a second, programmatic launch).
  /// On since entry 30: fused 0.9-1.3 us faster from M = 1024 (H200, graph: LayerNorm fp16 4096 x
  /// 1024 13.89 -> 12.90 us, 8192 x 768 18.67 -> 17.77, bf16 2048 x 2048 14.89 -> 13.69; within 1 % at
  /// 16384 x 8192 and 131072 x 4096) and no slower in eager launches (events: 4096 x 1024 16.24 ->
  /// 14.39 us). Split rows (clusters) always take two launches.
  bool fused_single_launch = true;
  /// ... on grids of at least this percent of the SMs' fused blocks only: small cooperative grids
  /// were slower, as entry 2 found (16 us at one block, 6d79149). Same probe, cooperative vs second
  /// launch, LayerNorm fp16: 128 blocks (1024 x 768) 7.28 vs 8.87 us, 64 blocks 8.73 vs 8.21, 2
  /// blocks (32 x 512) 14.55 vs 5.47.
  int fused_single_launch_min_grid_percent = 95;
  /// Small problems (M x N up to this many elements, N up to fused_cluster_max_cols) run fused as one
  /// launch: a single cluster of up to fused_cluster_max_blocks blocks (capped by
  /// DeviceFacts::max_cluster_blocks) whose partials meet in distributed shared memory. Auto takes it
  /// only with dX (gamma/beta alone is one tiled launch already) and only when the cluster has at
  /// least two blocks. 0 = never, the default since programmatic launch (docs/NOTES.md entries 16
  /// and 19): against two launches the cluster won 0.75-0.99x for N <= 512 and M x N <= 64K (probe
  /// at d472e85); once gamma/beta runs beside dX it lost everywhere, 1.08-1.58x (M = 32..128, N =
  /// 256..512, bf16 and fp32, 0b45745). `normkit-bench --tune` re-measures it.
  std::int64_t fused_cluster_max_elements = 0;
  std::int64_t fused_cluster_max_cols = 512;
  int fused_cluster_max_blocks = 8;
  /// Tiled gamma/beta with dX on problems of at most this many elements (M x N) runs both as the
  /// blocks of one launch (Plan::one_launch, dx_and_tiled_kernel): the dX rows laid out over the
  /// tiled block (32 x block_y threads, at most kOneLaunchMaxThreads), on 16-byte vectorised rows,
  /// scalar column strips, dX items of at most 2. The second launch was ~0.7 us of the small full
  /// backward (32 x 512: dX + tiled 2.61 us, tiled alone 1.94, dX-like forward 1.85; 877b21c).
  /// 0 = two launches.
  std::int64_t one_launch_max_elements = 1 << 18;
  /// dX vectors a thread aimed for in those launches' rows (at most kOneLaunchMaxItems): more threads
  /// a row, each waiting on fewer loads. 2 -> 1 (fp16, graph, docs/NOTES.md entry 32): full backward
  /// 32 x 512 LayerNorm 2.04 -> 1.93 us, RMSNorm 1.99 -> 1.93; 96 x 768 2.61 -> 2.22, 2.48 -> 2.19; 192 x
  /// 1024 3.14 -> 3.05, 3.00 -> 2.93. Before: small_grid_items_target (2), the forward's.
  int one_launch_items_target = 1;
  /// Thread rows of the partial reduce (two-pass pass 2, fused final step): enough that a thread
  /// sums at most kReduceRowsPerThread partial rows, and at least this many. Probe at 65c23e7+ (fp16,
  /// graph, 1 / 4 / 8 / 16): two-pass gamma/beta 1024 x 768 (16 partial rows) 7.31 / 5.33 / 6.14 /
  /// 6.26 us (5.83 before 65c23e7), its full backward 7.48 / 7.80 / 8.46 / 8.82; taller partials
  /// (64..264 rows) within 1 % from 1 to 8; 16 cost RMSNorm 4096 x 1024 gamma/beta 8.4 -> 9.5 us.
  int reduce_min_block_y = 4;
  /// Launch a backward's second kernel programmatically (DeviceFacts::programmatic_launch): it hides
  /// that launch's latency and lets gamma/beta run beside dX. Seed suite, full backward, graph
  /// (0b45745 vs cd78ebb): dX + tiled at 32 x 512 5.20 -> 3.47 us, 96 x 768 6.00 -> 4.38 us, 192 x
  /// 1024 7.70 -> 5.43 us, dX + two-pass at 4096 x 1024 18.25 -> 16.58 us (docs/NOTES.md entry 19).
  bool programmatic_launch = true;
  // column strips (tiled, two-pass): 16 bytes per lane on vectorised rows, where measured faster
  /// Vectorised strips from this N on (both strategies). bf16, graph: at N = 65536 / 262144 tiled
  /// 2-2.3x faster than scalar strips at every M; at N = 16384 1.6x at M = 1024..4097 and 4-7 %
  /// slower at M <= 255; at N <= 1024 slower at every M (3-4 strips: 1.2-1.3x), sweeps at 57bda28
  /// (scalar) and 3adcbae (vectorised), docs/NOTES.md entry 15.
  std::int64_t column_vec_min_cols = 16384;
  /// ... and for two-pass also from this many rows on, whatever N: its row parts restore the grid
  /// (N = 768..1024: 1.07-3x faster from M = 4097, 1.03-1.1x slower at M <= 1024; same sweeps).
  /// 4096 -> 1024 at entry 30 (881af14 + tables, bf16, graph): two-pass gamma/beta at M = 2048..3072
  /// 1.2-1.65x faster for N = 512..8192 (RMSNorm 2048 x 2048 14.2 -> 8.7 us), at M = 1024 1.05-1.5x
  /// for N = 768..8192 (LayerNorm 1024 x 2048 8.98 -> 6.97), and dX + two-pass 1024 x 512 6.72 ->
  /// 5.03; slower only at 1024 x 512 gamma/beta (two strips: LayerNorm 4.67 -> 4.93, RMSNorm 4.27
  /// -> 4.68). At M = 4096 it changes nothing.
  std::int64_t column_vec_two_pass_min_rows = 1024;
  /// Scalar tiled strips narrower than a warp: while the strips would leave SMs without one (at most
  /// tiled_narrow_max_strips_percent of the SM count have one; Tile-256: the key after it), from
  /// tiled_narrow_strips_min_rows rows on, the lanes halve (the thread rows double: the block keeps
  /// its size, each thread takes half the rows) down to this many (a warp = never; 16 or 8). A warp
  /// then reads two or four rows of 16 or 8 columns. bf16 / fp16, graph (docs/NOTES.md entry 55):
  /// 16 lanes 0.86-0.96x at M = 129..600 for N = 512..2048 (full backward 192 x 1024 LayerNorm bf16
  /// 3.11 -> 2.78 us, gamma/beta 3.09 -> 2.88); 8 lanes worse than 16 at all but 600 x 1024 (and
  /// 1.4-1.7x slower at fp32 300 x 2048).
  int tiled_min_strip_lanes = 16;
  /// ... from this M on: at M <= 128 (Tile-8 / Tile-64 bands, and 128 rows of Tile-128: eight rows a
  /// thread in warp-wide strips already) 16 lanes were 1.0-1.10x slower (64 x 2048 1.09x).
  std::int64_t tiled_narrow_strips_min_rows = 129;
  /// ... while the strips are at most this share of the SM count (percent): 32 strips of 132 SMs
  /// narrowed 0.89-0.96x (192 / 255 x 1024), 63 (Tile-128, 200 x 2000) 1.03-1.25x slower.
  int tiled_narrow_max_strips_percent = 25;
  /// ... Tile-256 (M >= tile256_min_rows, rows walked in block iterations): narrow strips also halve
  /// the iterations, 64 strips narrowed 0.86-0.94x (300 x 2048).
  int tiled256_narrow_max_strips_percent = 50;
  /// Tall vectorised strips: on 16-byte vectorised rows from tiled_tall_min_rows rows on, tiled strips
  /// of fewer 16-byte lanes than a warp and kTallStripThreads / lanes thread rows, so that a block
  /// iteration covers hundreds of rows and the strips are many where warp-wide vectorised strips are a
  /// handful (N = 768: 3) and scalar ones read 2 bytes a lane. The thread rows of a warp fold by
  /// shuffles before the block's shared-memory sum. With dX they run in one launch beside the dX rows,
  /// the strips first. The lanes: the fewest (a power of two, at most 16) that make at most
  /// tiled_tall_max_strips strips (0 = no tall strips). H100, bf16, graph (docs/NOTES.md entry 94): the
  /// best of 1..16 lanes was the one giving 48-64 strips at N = 768..4096.
  std::int64_t tiled_tall_max_strips = 64;
  /// ... the lanes, fixed (1, 2, 4, 8 or 16; 0 = from tiled_tall_max_strips): probes and tests. A fixed
  /// count takes tall strips even where tiled_tall_max_strips is 0.
  int tiled_tall_strip_lanes = 0;
  /// ... from this M on with dX, and from tiled_tall_gb_min_rows for gamma/beta alone (fewer rows keep
  /// the bands' strips). H100, bf16 / fp16 / fp32, graph (entry 94), against the built-in plans: tall
  /// from 128 rows 1.16-1.25x slower with dX at N <= 2048; 256 rows 0.82-0.95x; gamma/beta alone 1.02-1.11x
  /// at 256 rows and N <= 768, 0.88-1.04x at 384.
  std::int64_t tiled_tall_min_rows = 256;
  std::int64_t tiled_tall_gb_min_rows = 384;
  /// ... rows a thread a block iteration at most (1, 2, 4 or 8; fewer where the block's thread rows cover
  /// M): 8 rows of 16-byte x and dy take 123-128 registers, which leaves one 512-thread block an SM
  /// (the dX blocks of a one-launch plan too); 2 rows fit in 64 registers, two blocks an SM.
  int tiled_tall_strip_max_rows_per_thread = kTallStripMaxRowsPerThread;
  /// Auto takes tiled on tall strips (with dX: in one launch) over fused, two-pass and the bands' strips
  /// up to this M (0 = never) and this many bytes of x; a one-launch plan of tall strips is made up to
  /// this M at any size (when tiled is asked for). H100 (entry 94), the built-in plans against tall
  /// strips over M = 256..4096 x N = 256..8192: with dX 0.68-0.97x wherever x <= 4 MiB and M <= 2048
  /// but 2048 x 256 (1.05-1.07x), 1.0-1.45x from 3072 rows and 1.03-1.36x at 8-25 MiB; gamma/beta alone
  /// 0.82-0.98x there (2048 x 256 / 512 1.02-1.05x; fp32 0.82-0.96x, fp32 with dX 0.79-0.89x).
  std::int64_t tiled_tall_max_rows = 2048;
  std::int64_t tiled_tall_max_bytes = std::int64_t(4) << 20;
  /// ... on at least this many strips with dX, tiled_tall_gb_min_strips without: H200, 1024 rows (entry
  /// 94), with dX 8 strips (N = 64, 16-bit) 1.03-1.08x two-pass, 16 (N = 128) 0.93-0.98x; gamma/beta alone
  /// 8 strips 1.11-1.15x two-pass (H100 and H200 quick sweeps), 32 (N = 256) 0.85-0.89x. 9-15 strips were
  /// not measured on the H200; on an H100 they are 0.79-0.98x the plans they replace (9 in the H100 SXM's
  /// built-in table, docs/NOTES.md entry 102).
  std::int64_t tiled_tall_min_strips = 16;
  std::int64_t tiled_tall_gb_min_strips = 32;
  /// With dX, rows of at most tiled_tall_few_max_rows take tall strips from tiled_tall_few_min_strips strips
  /// (where that is fewer than tiled_tall_min_strips); 0 rows: never. H100 (docs/NOTES.md entry 102), 8 strips
  /// (64 16-bit / 32 fp32 columns) against the plans they replace, full backward: 0.66-0.94x at 384-1024 rows,
  /// 0.92-1.17x at 1280-2048 (1024 in the H100 SXM's built-in table). Not measured on the H200: off there.
  std::int64_t tiled_tall_few_min_strips = 8;
  std::int64_t tiled_tall_few_max_rows = 0;
  /// Gamma/beta alone: auto takes tiled on tall strips at any M (from tiled_tall_gb_min_rows) where
  /// they number at least this percent of the SMs (0 = off), ahead of fused and two-pass. They fill
  /// the GPU from 16-bit N = 16384 (128 strips of 16 lanes): H200 quick sweeps at 7f62504, 16384 x
  /// 16384, forced tiled 0.934-0.956x auto's fused (split rows; LayerNorm and RMSNorm, bf16 and fp16;
  /// docs/NOTES.md entry 95). Where the bands' strips already fill the GPU (N >= 32768) tiled was
  /// taken anyway, and it took tall strips. Not measured apart then: the other rows of the same bytes
  /// (fp32 N = 8192..12288, two-pass below 8192 rows and fused from there; 16-bit N = 20480, two-pass from
  /// 16384 rows; both measured on an H100 since, entry 97: fp32 0.94-1.00x, N = 20480 see the next key);
  /// at 1024 and 4097 x 16384 bf16 (tiled already) two-pass took 1.21-1.35x tiled's time.
  std::int64_t tiled_tall_gb_full_grid_percent = 96;
  /// ... and, where the strips are between one and two waves (tall_strip_blocks_per_sm of them an SM)
  /// on at least tiled_tall_short_wave_min_rows rows, only when their second wave holds at least this
  /// percent of a wave (0 = any); there two-pass takes gamma/beta alone wherever the mixed rule would
  /// take tiled too. A strip walks all M rows, so a second wave of a few strips costs nearly a whole
  /// strip's time. H100, bf16 / fp16, graph (docs/NOTES.md entry 97), tiled against the best other:
  /// 16384 rows, 128 strips (one wave) 0.96-0.97x; 136 / 144 / 160 strips (second wave 3 / 9 / 21 %)
  /// 1.09-1.13x; 192 (45 %) 0.97-0.99x; 256 (94 %) 0.99x; fp32 192 strips at 4096 rows 0.94x, 320 (2.4
  /// waves, not this rule's) 1.015x. 4096 rows, 136 / 144 strips: tiled 1.04-1.09x two-pass, 160 1.02x.
  std::int64_t tiled_tall_gb_min_last_wave_percent = 40;
  /// ... from this many rows: at 384-1024 rows two-pass took 1.06-1.19x tiled's time on 136 and 160
  /// strips, at 2048 rows 1.00 (136) and 1.06-1.07x (160) (H100, bf16, the same probe).
  std::int64_t tiled_tall_short_wave_min_rows = 4096;
  /// dX vectors a thread in a one launch beside tall strips (at most kOneLaunchMaxItems).
  int tiled_tall_one_launch_items_target = 2;
  // row kernels
  int row_items_target = 4;                  ///< vectors per thread aimed for when sizing a group
  int row_block_threads = 256;               ///< threads per block when several rows share a block (power of 2)
  int row_blocks_per_sm = 8;                 ///< grid-stride cap for row kernels
  /// dX launches to which the layout above gives fewer than small_grid_blocks blocks (a
  /// few rows: 32 x 512 made 2 blocks of 16 rows) aim at small_grid_items_target vectors per thread in
  /// blocks of small_grid_block_threads instead: the rows spread over more SMs, and each thread waits
  /// for fewer loads. Probe at 41c76c0 (bf16, graph, docs/NOTES.md entry 23): forward 32 x 512 LN
  /// 2.29 -> 1.85 us, RMS 2.02 -> 1.76 us; at 96 x 768 (12 blocks) within 2 %.
  std::int64_t small_grid_blocks = 16;
  /// The same rule for the forward, from this many blocks (small_grid_blocks is the dX kernel's).
  /// Measured 16 -> 64 (bf16, graph, docs/NOTES.md entry 32): forward 32 x 4096 LN 2.87 -> 2.58 us,
  /// RMS 2.48 -> 2.28; 64 x 4096 2.99 -> 2.68, 2.61 -> 2.39; RMS 16 x 8192 2.71 -> 2.53, 32 x 8192 2.85
  /// -> 2.67, 192 x 1024 2.31 -> 2.26; LayerNorm 16 / 32 x 8192 and 192 / 256 x 1024 within 1 %. The
  /// dX kernel stays at 16: at 64 its 256 x 1024 full backward (tiled, two launches) lost 12 %
  /// (4.19 -> 4.70 us).
  std::int64_t forward_small_grid_blocks = 64;
  int small_grid_items_target = 2;
  int small_grid_block_threads = 64;
  /// Vectorised rows of at most short_row_max_vectors 16-byte vectors (64 16-bit columns) spread
  /// over more lanes: the forward aims at forward_short_row_items_target vectors per thread, the
  /// fused backward at fused_short_row_items_target. Same probe: forward 131072 x 64 LN 14.10 ->
  /// 11.52 us, RMS 13.51 -> 11.04 us (2 items); seed suite, table row_items_target = 1: fused full
  /// backward 131072 x 64 LN 24.97 -> 21.88 us, RMS 20.33 -> 18.46 us (1 item).
  std::int64_t short_row_max_vectors = 8;
  /// Scalar rows (not 16-byte vectorised) of 4097-8192 columns fill a group of kScalarRowMaxThreads
  /// threads 8 elements a thread: the SM's one block, holding one row at a time. Cached so from this
  /// many columns (but in LayerNorm's forward, kLnForwardScalarRowMaxThreads); shorter ones are
  /// streamed (read twice by two blocks an SM). H100, bf16, graph
  /// (docs/NOTES.md entry 106), dX and RMSNorm forward, cached / streamed: 4097 columns 1.07-1.10x (half
  /// the slots filled), 6001 0.92-1.00x, 6500 0.83-0.96x, 7001-8191 0.75-0.94x.
  std::int64_t scalar_row_widest_group_min_cols = 6145;
  int forward_short_row_items_target = 2;
  int fused_short_row_items_target = 1;
  /// With one item per thread the fused backward wins on such rows (16-byte vectorised) from this
  /// many rows, with or without dX. bf16 sweep at 4345a27 (the batched partial reduce made two-pass
  /// faster), N = 64, fused / two-pass: M = 4097 1.07 (full backward), 1.23 (gamma/beta), 1.09
  /// (RMSNorm gamma/beta); M = 16384 0.75 / 0.88 / 0.79. It was 4096 from the c825604 sweep (fused
  /// 7.02 vs two-pass 7.72 us at M = 4097 then). Unvectorised short rows (N = 1) keep their own rule.
  /// `normkit-bench --tune` re-measures it (step 7: an H100 wants it higher, docs/NOTES.md entry 93; 32768
  /// in the H100 SXM's built-in table, entry 102).
  std::int64_t fused_short_row_min_rows = 16384;
  /// With dX such rows are fused from fewer rows too: from this many bytes of x (M x N x element
  /// size), LayerNorm and RMSNorm (rms_ key) apart. bf16, graph, fused vs two-pass (docs/NOTES.md entry
  /// 32): LayerNorm N = 64 M = 2048 / 4096 4.98 / 5.24 vs 4.57 / 4.83 us, 8192 6.24 vs 7.31; N = 32 M =
  /// 8192 (512 KiB) 5.59 vs 5.47 (two-pass at M = 4097 lost to its odd row count: 5.79 us, fused 5.42).
  /// RMSNorm N = 64 M = 2048 4.16 vs 4.44, 4096 4.36 vs 4.60, 8192 5.45 vs 6.59; N = 32 M = 4096 4.31
  /// vs 4.84; N = 16 M = 4097 (128 KiB) 4.71 vs 4.12.
  std::int64_t fused_short_row_dx_min_bytes = 1 << 20;
  std::int64_t rms_fused_short_row_dx_min_bytes = 256 << 10;
  /// Vectorised RMSNorm forward rows of at least this many vectors that one block covers with one
  /// vector per thread (at most max_threads_per_block vectors) take one vector per thread: a
  /// 1024-thread block per row, 32 warps per SM where the 4-item layout had 16. Same probe: 16384 x
  /// 8192 151.3 -> 135.6 us. Not LayerNorm: its two block-wide sums per row made it slower (154 ->
  /// 186 us).
  std::int64_t rms_forward_one_item_min_vectors = 1024;
  /// RMSNorm forward rows that one block of at most kPackedRowMaxThreads threads caches take the lean
  /// packed walk (RowShape::packed) from this many bytes of x on (M x N x element size):
  /// forward_packed_items_target vectors a thread, blocks of forward_packed_block_threads threads when
  /// several rows share one, a grid over every row. Why: the staged walk holds 128 registers a thread
  /// (16 warps an SM) where Liger's RMSNorm forward reaches 99 % of the floor at 38 registers and 71 %
  /// occupancy (docs/NOTES.md entries 23, 30). H200, graph, staged vs packed (2 items, 256 threads;
  /// docs/NOTES.md entry 31): 131072 x 4096 bf16 558.8 -> 512.1 us (90 -> 99 % of the floor), fp32
  /// 1114.7 -> 1036.1; 16384 x 8192 bf16 143.3 -> 137.1; at 8 - 16 MB slower (bf16 4096 x 1024 6.50
  /// -> 6.87 us, 8192 x 768 8.59 -> 9.24, 2048 x 2048 6.39 -> 6.67) or tied (8192 x 1000, 131072 x
  /// 64). LayerNorm has no packed walk (it lost everywhere: 131072 x 4096 bf16 563.7 -> 639.4 us). The H100
  /// SXM's built-in table takes it from 4 MiB (entry 102).
  std::int64_t rms_forward_packed_min_bytes = std::int64_t(64) << 20;
  /// Forward rows of at most forward_short_rows_max_vectors 16-byte vectors take the short-row walk
  /// (RowShape::short_rows) from this many bytes of x on (M x N x element size).
  /// Why: the general walk spends ~26 instructions an element on such rows (its row sums compiled for
  /// every group width, stage addressing and a run-time cp.async depth per row: 419 a row iteration at
  /// N = 64 bf16) and is issue-bound there (ncu: an eligible warp in 64 % of the issue slots at 24 %
  /// occupancy; docs/NOTES.md entry 38). H200, graph, short walk / general walk (entry 39): bf16 / fp16
  /// 32768 x 64 0.81-0.86, 262144 x 32 0.88-0.92, 131072 x 40 0.89-0.97, 65536 x 16 0.81, 16384 x 64
  /// 0.92-0.94, 4096 x 64 0.92-0.94, 131072 x 64 0.96-1.00; fp32 131072 x 16 0.81-0.88; 1024 x 64
  /// (128 KiB, the smallest measured) 0.97-1.00. Below it: not measured, the general walk.
  std::int64_t forward_short_rows_min_bytes = std::int64_t(128) << 10;
  /// ... and rows of at most this many 16-byte vectors (at most kShortRowMaxVectors).
  std::int64_t forward_short_rows_max_vectors = 8;
  /// LayerNorm forward rows of up to 256 vectors (a warp a row, up to 8 vectors a lane; longer
  /// ones: ln_forward_long_warp_rows_min_bytes) take the short-row walk from this many bytes of x.
  /// Why: LayerNorm's two row sums in a lean walk are warp butterflies there, where the packed
  /// walk's block barriers lost to the staged walk (entry 31); at this size its resident warps beat
  /// the staged walk's 16 an SM. H200, graph, short / staged (docs/NOTES.md entry 41): bf16 / fp16
  /// / fp32 131072 x 1024 0.92 / 0.90 / 0.92, 65536 x 1024 0.92 (bf16, fp32), 262144 x 256
  /// 0.93-0.94, 131072 x 512 0.94, 65536 x 2048 0.91 / 0.94, 32768 x 2048 0.95, 131072 x 768
  /// 0.96-1.00, 32768 x 1024 0.99 / 0.97 / 0.93, 16384 x 2048 bf16 (64 MiB, 8 vectors a lane)
  /// 1.03-1.05 the one loss; below it (8 - 32 MiB) mixed, 0.95 - 1.13 (fp32 slower), and the small
  /// shapes 1.06 - 1.6 slower. RMSNorm has the packed walk there (the short one tied it).
  std::int64_t ln_forward_warp_rows_min_bytes = std::int64_t(64) << 20;
  /// LayerNorm rows of 16 vectors a lane (257 - kShortRowMaxVectors vectors: 2056 - 4096 16-bit, 1028 -
  /// 2048 fp32 columns) take the short-row walk only from this many bytes of x. Why: H200, graph, short
  /// / staged (docs/NOTES.md entry 45): from 512 MiB bf16 / fp16 131072 x 2560 0.90 / 0.86, fp32 65536 x
  /// 2048 0.93, 65536 x 4096 0.99 / 1.00, 131072 x 4096 0.99 / 1.01; below it 16-bit rows lost (65536 x
  /// 3072 1.02-1.07, 32768 x 4096 1.02-1.04, 16384 x 4096 1.10, 8192 x 4096 1.22-1.28), fp32 32768 x 2048
  /// won (0.945), 16384 x 2048 tied.
  std::int64_t ln_forward_long_warp_rows_min_bytes = std::int64_t(512) << 20;
  /// Forward rows of kShortRowMaxLanes + 1 .. kBlockRowMaxThreads x kBlockRowMaxItems 16-byte vectors
  /// take the one-row-a-block walk (RowShape::block_rows) while x has fewer bytes than this (0: never),
  /// forward_block_rows_items_target vectors a thread (more where the row needs them). It comes before
  /// the short-row, packed and staged walks.
  /// Why: the general walk's per-row chain (its group decoded from a parameter, the walk's loop, row
  /// sums for a run-time width) was twice Liger's one-row-a-program chain (456 vs 208 SASS instructions,
  /// docs/NOTES.md entry 33), and a grid over every row hides latency with resident blocks. H200,
  /// graph, one-row-a-block (2 vectors a thread) / the walks before it (docs/NOTES.md entry 53): small
  /// grids 0.85-0.95 (32 x 512 - 128 x 4096, all dtypes), rows of 1024-2048 vectors at few rows
  /// 0.55-0.8 (streamed before), 8 - 32 MiB 0.80-0.96, LayerNorm 16-bit 64 MiB - 3 GiB 0.91-0.99
  /// (131072 x 4096 with 4 vectors a thread 0.91), fp32 0.86-0.98 up to 2 GiB (131072 x 4096: 0.93);
  /// RMSNorm against its packed walk from 64 MiB 0.80-1.01 (131072 x 4096 and 393216 x 4096 16-bit
  /// 1.01, fp32 65536 x 2048 1.016). Misses left: LayerNorm fp32 rows that fill half a block's slots
  /// from 64 MiB (65536 x 264 1.11x, 131072 x 300 1.04x, 131072 x 520 1.05x). 4 GiB: the largest x
  /// measured is 3 GiB (393216 x 4096 bf16; fp32 there is 6 GiB, another walk).
  std::int64_t forward_block_rows_below_bytes = std::int64_t(4) << 30;
  /// Why 2: 1 vector a thread (wider blocks) lost to 2 from 8 MiB (LayerNorm 2048 x 2048 bf16 6.75 vs
  /// 5.97 us, 131072 x 4096 642 vs 538) and tied below; 4 lost at mid shapes (2048 x 2048 6.91).
  int forward_block_rows_items_target = 2;
  /// 16-bit LayerNorm rows of more than kBlockRowMaxThreads vectors (4097 - 16384 columns) take the
  /// one-row-a-block walk at 2 vectors a thread (512 x 2 blocks) only below this many bytes of x; at
  /// 4 (kBlockRowMaxItems: from ln_forward_block_rows_four_items_min_bytes, or rows of more than 1024
  /// vectors) below forward_block_rows_below_bytes. Why: from 16 MiB the staged walk (4 x 8 elements a
  /// thread, 256 threads) beat 512 x 2 blocks, 1.03-1.10x at 1024 - 2048 x 8192 with 40 registers
  /// (docs/NOTES.md entry 61; 1.15-1.28x with the 63 before it, entry 53); 8 MiB tied (512 x 8192),
  /// 4 MiB won (256 x 8192 0.92-0.94, 128 x 16384 0.74-0.76). The 4-vector blocks (64 registers since
  /// entry 61) won from 32 MiB: 16384 x 8192 0.89-0.93, 4096 x 8192 0.96, 2048 - 8192 x 16384 bf16 0.81-0.84
  /// against the streamed walk.
  std::int64_t ln_forward_block_rows_wide_below_bytes = std::int64_t(8) << 20;
  /// Rows of at most kBlockRowMinThreads vectors (one vector a thread, or less, in the narrowest block)
  /// take the one-row-a-block walk only below this many bytes of x (and below
  /// forward_block_rows_below_bytes). Why: from 2 MiB the other walks beat it (16-bit, 64 and 33
  /// vectors: 4096 x 512 1.08-1.11x, 65536 x 512 1.12-1.17x, 4096 x 264 1.23-1.31x, 65536 x 264
  /// 1.8-1.9x, 16384 x 400 1.27-1.29x); 1 MiB won (1024 x 512 0.88), as did the small grids below it.
  std::int64_t forward_block_rows_narrow_below_bytes = std::int64_t(2) << 20;
  /// 16-bit LayerNorm rows take 4 vectors a thread (narrower blocks) from this many bytes of x. Why:
  /// 131072 x 4096 511 vs 537-539 us at 2 (bf16 and fp16: 99 % of the floor), 16384 x 4096 67.0 vs
  /// 69.3-69.7, 65536 x 2048 0.99, 131072 x 1024 1.00; at 32 MiB 4 lost (4096 x 4096 19.75 vs 19.33).
  std::int64_t ln_forward_block_rows_four_items_min_bytes = std::int64_t(64) << 20;
  /// The one-row-a-block blocks that have a packed instance (block_rows_packed_instance) take it for
  /// more rows than this many a SM. Why: the packed form pays conversions in every block for more
  /// resident blocks, which a grid of at most a block an SM does not have: 512 x 4 at 2 - 128 x 16384
  /// 1.06-1.12x the unpacked instance, 256 x 16384 (two rows an SM) 0.83, 16384 x 8192 (256 x 4)
  /// 0.89-0.93 (docs/NOTES.md entry 61).
  std::int64_t forward_block_rows_packed_min_rows_per_sm = 1;
  /// ... and the blocks of 16-bit rows with fp32 weights (whose packed form loads the weights after
  /// the row sums) only from this many bytes of x. Why (bf16 / fp16 with fp32 weights, against the
  /// unpacked instances; docs/NOTES.md entry 62): from 128 MiB 0.68-0.85 (LayerNorm 131072 x 4096 699
  /// -> 521 us, 16384 x 8192 160 -> 134; RMSNorm 8192 x 12288 146 -> 100; RMSNorm 16384 x 4096, whose
  /// blocks already had 57 registers, 0.99-1.00); up to 16 MiB the weights' round trip after the sums
  /// cost the latency-bound grids 1.05-1.22x (1024 x 768, 4096 x 1024, 8192 x 1000, 256 x 8192). At
  /// 64 MiB (8192 x 4096) LayerNorm 0.77, RMSNorm 1.00; 32 MiB was not measured packed.
  std::int64_t forward_block_rows_packed_mixed_min_bytes = std::int64_t(64) << 20;
  /// ... and from this many for the widest blocks (kBlockRowMaxThreads threads). Why (bf16 rows, fp32
  /// weights, against the unpacked instances, aba88a1's kernels; docs/NOTES.md entry 64): RMSNorm
  /// 2048 x 8192 (32 MiB) 22.0 -> 19.5 us, 3072 x 8192 (48 MiB) 31.6 -> 27.2, where the blocks of
  /// 64-256 threads at 16-48 MiB were 0.98-1.07x (LayerNorm 4096 x 2048 1.06, RMSNorm 8192 x 2048 1.04).
  std::int64_t forward_block_rows_packed_mixed_widest_min_bytes = std::int64_t(32) << 20;
  int forward_packed_items_target = 2;
  int forward_packed_block_threads = 256;
  /// Row iterations staged through shared memory by cp.async in the row-cached kernels (forward,
  /// dX, fused); 0 or 1 = no staging (loads straight into registers). Why: a row kernel's registers
  /// cap its resident warps (16 per SM at 128 registers), so register-only loads keep too few bytes
  /// in flight for HBM; the stages keep stages - 1 row iterations in flight from shared memory.
  int row_pipeline_stages = 4;
  /// Fewer stages where the staged rows of the SM's resident blocks would hold more than this many
  /// bytes: stages = max(2, this / (bytes a stage copies for all resident blocks)), at most
  /// row_pipeline_stages; deferred and split fused walks get one stage more
  /// (fused_split_extra_stage_min_split). 0 = off (row_pipeline_stages everywhere). Blocks copying
  /// 32 KB a stage per SM (fused 512 x 2 items, forward 2 x 256 x 4 items) get 2 stages, 16 KB a
  /// stage (fused 1-item short rows, the 1024-thread RMSNorm forward) 4. H200, bf16, graph, this cap
  /// vs 0 in one call (docs/NOTES.md entry 29, bench/results/h200-forward-split-probe.md section 1):
  /// RMSNorm full backward 16384 x 8192 224.5 -> 198.5 us, 131072 x 4096 813 -> 776; LayerNorm
  /// forward 16384 x 8192 154.0 -> 145.9, 131072 x 4096 576.5 -> 563.9; LayerNorm full backward
  /// unchanged. (The session that wrote the rule had
  /// also probed 2 stages at 16 KB a stage: 131072 x 64 LN +7 %, RMS forward 16384 x 8192 +12 %; that
  /// probe's tables were not kept.)
  std::int64_t row_stage_bytes_per_sm = 65536;
  /// The dX kernel splits rows too long to cache in one block (above 8192 16-bit / 4096 fp32
  /// columns) over a thread-block cluster of up to this many blocks (RowShape::split; devices with
  /// clusters), which holds them in registers and reads x and dy once; longer rows, and every row
  /// when this is 0 or 1, are streamed by one block (read twice). At most kMaxSplit. H200, bf16,
  /// graph, split vs streamed (docs/NOTES.md entry 20): full backward 2048 x 65536 LN 36.9 -> 46.7 %
  /// of the floor, RMS 37.6 -> 48.0 %; 1024 x 32768 38 -> 43 %, 2048 x 16384 41 -> 44 %. The forward
  /// stayed streamed then (split with a cluster barrier per row it was 8-16 % slower at N =
  /// 16384..32768 and no faster at 65536); it has its own key now, forward_split_max.
  int row_split_max = 8;
  /// dX rows longer than a portable cluster of those blocks holds (65536 16-bit / 32768 fp32
  /// columns) are split over clusters of up to this many blocks of kWideSplitBlockThreads threads
  /// (kSplitItems vectors each, the forward's wide split layout; devices with clusters above the
  /// portable size, sm_90: 16), up to 262144 16-bit / 131072 fp32 columns; longer rows, and every
  /// such row when this is 0 or 1, are streamed by one block, read twice. Why: a streamed row is one
  /// block's work, so few of them leave the GPU nearly idle -- 1 x 262144 bf16 took 60 us streamed
  /// and 22 us in the fused wide walk, itself latency-bound at ~10 cycles an instruction
  /// (docs/NOTES.md entries 37 and 38).
  int row_split_wide_max = kMaxFusedSplitBlocks;
  /// The forward splits rows too long to cache in one block over a thread-block cluster of up to this
  /// many blocks (devices with clusters): up to a portable cluster, kSplitBlockThreads x kSplitItems
  /// vectors a block (the dX kernel's layout); longer rows, blocks of kWideSplitBlockThreads x
  /// kSplitItems vectors over clusters of up to kMaxFusedSplitBlocks (non-portable, where the device
  /// has them). x is read once and each row's statistics go to the cluster one row ahead of its y
  /// (staged walks), so the exchange overlaps the next row's loads. 0 or 1 = never (streamed, read
  /// twice). Only rows of at least forward_split_min_vectors 16-byte vectors: H200, graph, split vs
  /// streamed (docs/NOTES.md entry 29): RMSNorm bf16 2048 x 65536 204 -> 159 us, 1024 x 131072 223 ->
  /// 162, 4096 x 262144 1723 -> 1336, fp32 2048 x 65536 428 -> 308; at 2048-4096 vectors the split
  /// lost or tied (bf16 2048 x 16384 RMS 43.2 -> 45.3, LN 45.2 -> 49.3; fp32 4096 x 16384 RMS 160 -> 167).
  int forward_split_max = kMaxFusedSplitBlocks;
  std::int64_t forward_split_min_vectors = 8192;
  /// ... and LayerNorm rows only where a thread holds at most this many elements of the slice
  /// (kSplitItems x the vector width: fp32 16, 16-bit 32; 32 splits both). Its split walk does more
  /// than RMSNorm's per element (two sums, the merge of the slices' moments, the bias): 16-bit rows
  /// were first no faster split than streamed (entry 29: bf16 2048 x 65536 210.6 vs 212.5 us, 4096 x
  /// 262144 2069 vs 1784), so only fp32 split (16); since the walk forms its deviations once, merges
  /// a lane per rank and tests the weight pointers instead of filling 1 and 0 (the loop's static
  /// instruction count 1745 -> 1190), 16-bit rows split faster everywhere measured (docs/NOTES.md entry
  /// 52, H200 graph, bf16 / fp16): 512 x 65536 47.6 / 49.3 vs 53.7 / 53.3 us, 2048 x 65536 170 / 171 vs
  /// 212.5 / 211.3, 1024 x 131072 174 / 179 vs 232 / 231, 4096 x 262144 1572 / 1612 vs 1782 / 1777,
  /// 64 x 262144 33 / 34 vs 62.
  int forward_split_ln_max_thread_elements = 32;
  /// The forward's wide split blocks (kWideSplitBlockThreads threads) cache kWideForwardSplitItems
  /// vectors a thread instead of kSplitItems for rows of more than this many 16-byte vectors, from
  /// forward_split_wide_items_min_rows rows -- and at any M for rows kSplitItems blocks cannot hold
  /// (above 262144 16-bit / 131072 fp32 columns). RMSNorm and 16-bit LayerNorm rows only: the LayerNorm fp32
  /// instance of 8 vectors spills (ptxas, 76 bytes) and measured 1.06-1.37x slower. Why: half the
  /// cluster a row needs -- a 262144-column 16-bit row takes 8 blocks instead of 16, and the H200 holds
  /// 16 clusters of 8 such blocks at once (128 SMs) but only 7 of 16 (112 SMs). Default: above a
  /// portable cluster of kSplitItems blocks (16384 vectors: 131072 16-bit, 65536 fp32 columns).
  /// H200, graph, 8 / 4 vectors (docs/NOTES.md entry 60): 16-bit N = 262144 LayerNorm 0.88-0.98 from 128
  /// rows (4096 rows: 1583 -> 1396 us), RMSNorm 0.92-0.96, but 1.08-1.10 at 64 rows; RMSNorm fp32 N =
  /// 131072 0.88-0.95 from 256 rows, 1.05 at 64; N = 131072 16-bit (4 blocks instead of 8) LayerNorm
  /// 1.02-1.19 slower, RMSNorm 0.95-1.15.
  std::int64_t forward_split_wide_items_min_vectors = 16385;
  std::int64_t forward_split_wide_items_min_rows = 128;
  /// Rows of at least this many 16-byte vectors take the wide split blocks even where the portable
  /// layout (kSplitBlockThreads x kSplitItems vectors a block, up to a portable cluster) holds them (0:
  /// never). Measured no faster (docs/NOTES.md entry 60, bf16 65536 columns: 4 wide blocks a row 0.99-1.07x,
  /// 2 of 8 vectors 1.01-1.09x against 8 portable ones, whose clusters fill 120 of 132 SMs): a key for
  /// probes and for the tests, which run every split layout on every row width.
  std::int64_t forward_split_wide_min_vectors = 0;
  /// The fused backward splits rows too long for one block (above kFusedBlockThreads x
  /// kMaxFusedItems vectors: 8192 16-bit / 4096 fp32 columns) over a cluster of up to this many
  /// blocks (RowShape::split, devices with clusters): each block caches its slice, accumulates
  /// dgamma/dbeta for it, and the row sums add over the cluster. Rows longer than a portable cluster
  /// of such blocks holds (65536 16-bit / 32768 fp32 columns) take kFusedWideItems vectors per thread
  /// and clusters above the portable size (up to kMaxFusedSplit, DeviceFacts::
  /// max_nonportable_cluster_blocks). 0 or 1 = such rows are never fused (forcing fused on them
  /// throws). Measured in docs/NOTES.md entries 25 and 26.
  int fused_split_max = kMaxFusedSplitBlocks;
  /// The most blocks a fused row cached kMaxFusedItems vectors a thread (the split walk that keeps its
  /// row's terms in registers) is split over; longer rows take the wide layout (kFusedWideItems, terms
  /// recomputed). Above kPortableClusterBlocks only where the device launches such clusters
  /// (DeviceFacts::max_nonportable_cluster_blocks; elsewhere the portable size) and only for rows that
  /// need fused_cached_split_min_beyond_portable blocks or more; at most fused_split_max; at least 2.
  /// Default: the portable size -- on the H200 the wide layout beat 2-item blocks over larger clusters at
  /// every width that needs 9-16 of them, by 1.14-1.80x at 2048 rows (`normkit-bench --tune` step 5; the
  /// A/B at 122880-131072 columns: 2-item 1.00-1.28x the wide layout's time; docs/NOTES.md entry 92), while
  /// an H100 measured 2-item over 16 blocks 0.90-0.98x the wide layout from 15 blocks (entry 91): 16 there
  /// (the H100 SXM's built-in table, entry 102).
  int fused_cached_split_max = 8;  // kPortableClusterBlocks (declared below)
  /// Rows that need more 2-item blocks than the portable cluster holds (rows of 65537..131072 16-bit /
  /// 32769..65536 fp32 columns) stay 2-item over a cluster above the portable size only from this many
  /// blocks; fewer take the wide layout over clusters of half as many blocks, of which the device holds
  /// twice as many at once (read where a table raises fused_cached_split_max). Measured (docs/NOTES.md
  /// entry 91, H100, graph, full backward, 2-item over 16 blocks against the wide layout over 8 or fewer):
  /// rows that need 15 or 16 blocks 0.90-0.98x; 14: bf16 weights 0.92-0.98x, fp32 rows 0.95x, but LayerNorm
  /// with fp32 weights on 16-bit rows 1.01-1.04x; 13: 0.92-1.09x; 12: 0.93-1.17x; 9-10: 1.10-1.34x.
  int fused_cached_split_min_beyond_portable = 15;
  /// Fused rows split over a cluster take, from the blocks the row needs up to the largest cluster
  /// of their layout (2-item blocks: fused_cached_split_max; the wide layout: fused_split_max), the size
  /// of which the device holds the most clusters at once (DeviceFacts::cluster_sms), and of those
  /// the most blocks, each a smaller slice. The split walk costs about the same per row and block
  /// whatever the slice's width (its layout's lanes and items run either way), so its time follows
  /// the rows walked at once, the clusters: H200, bf16 / fp32, graph, against the blocks the row needs
  /// (docs/NOTES.md entry 70): a row of 7 2-item blocks over 8 (15 clusters either way) 0.977-0.990,
  /// a wide row of 12 over 16 (7 clusters) 0.913-0.921; more blocks where they hold fewer clusters
  /// lost (5 -> 8: 22 -> 15 clusters, 1.29-1.41x; 3 -> 4 1.11-1.25x; 6 -> 8 1.07-1.11x; wide 9 -> 16
  /// 1.07x). Only where the device's cluster_sms are known for every size considered. 0 = the blocks
  /// the row needs.
  int fused_split_most_clusters = 1;
  /// Staged fused rows split over at least this many blocks defer their cluster sums one row
  /// (Plan::deferred_sums): a row's dX waits for the cluster after the next row's accumulation
  /// instead of stalling the block once per row, at the cost of recomputing xhat and g from the
  /// staged row (its float terms cannot stay in registers across the next row). Staged rows of
  /// kFusedWideItems recompute anyway and always defer, whatever this key. H200, bf16 / fp32, graph, deferred vs not
  /// (docs/NOTES.md entry 28): split 8 LN 16-bit 0 %, RMS -3.5 %, fp32 -5 %; split 2..4 LN 16-bit +2
  /// to +4 % (slower), RMS -2 to -3 %; wide rows (split 8 / 16) -13 to -16 %. Since the statistics'
  /// stat leader (entry 48) and the 128-byte aligned stages (entry 50) the undeferred walk of split 8
  /// with its third stage (fused_split_extra_stage_min_split) is the faster one: against deferred,
  /// bf16 -3.5 to -6.5 %, fp32 -1.3 to -2.5 %, fp16 -1.1 to +0.9 % (entry 50). 17 (above any cluster,
  /// kMaxFusedSplitBlocks) = 2-item rows never defer.
  int fused_deferred_min_split = kMaxFusedSplitBlocks + 1;
  /// Fused split rows over at least this many blocks stage one row more than row_stage_bytes_per_sm
  /// gives (deferred walks always do: they hold their previous row): a block stalls once a row on
  /// its cluster's sums, and a third row in flight keeps its copies going through the stall. H200,
  /// graph, 3 stages vs 2, undeferred (docs/NOTES.md entry 50): split 4 and 8 faster in every case
  /// measured (bf16 -0.5 to -1 %, fp16 -0.7 to -0.9 %, fp32 -1.3 to -3.3 %); split 2 bf16 -0.8 to
  /// -1 % and fp32 LayerNorm -2.5 to -3.8 %, but fp32 RMSNorm +0.5 to +6.6 % (8192 x 8192): not
  /// from 2. 0 or 1 = every split row.
  int fused_split_extra_stage_min_split = 4;
  /// Auto fuses rows of the fused kernel's wide layout (kFusedWideItems vectors a thread: above 65536
  /// 16-bit / 32768 fp32 columns) only for elements of at least this many bytes, where the dX kernel
  /// splits such rows too (row_split_wide_max); narrower elements take an unfused strategy with the
  /// split dX (rows the dX kernel streams are fused at any M, whatever this key; the size rules still
  /// decide below fused_bytes_min_rows). 4 from entry 40 (best unfused / fused 0.90-0.96 for 16-bit
  /// rows) to entry 59, whose weights in shared memory cut the wide walk's time to 0.71-0.79x: H200,
  /// graph, fused / unfused at c325898 (same call): LayerNorm bf16 4096 x 262144 2012 / 2556 us,
  /// 1024 x 262144 531 / 651, 2048 x 131072 489 / 626; RMSNorm bf16 1849 / 2514, 481 / 637, 446 / 628;
  /// fp16 alike. 2: every element size.
  int fused_wide_min_element_bytes = 2;
};

/// The built-in table measured on `table`'s GPU (the H200's is PlannerTable{}; the H100 SXM's changes
/// the keys that GPU measured otherwise, planner.cpp says which and where).
const PlannerTable& builtin_planner_table(BuiltinTable table);
/// The table a call on `device` plans with when ExecConfig::table is null: the file NORMKIT_PLANNER_TABLE
/// names (read once, at the first plan, for every device; a bad file throws normkit::Error naming its
/// line, every time it is asked for), else the device's built-in table (DeviceFacts::builtin_table).
const PlannerTable& default_planner_table(const DeviceFacts& device);
/// The same for the H200 (and the CPU path): NORMKIT_PLANNER_TABLE's file, else PlannerTable{}.
const PlannerTable& default_planner_table();
/// Which table default_planner_table(device) is, for reports: the path NORMKIT_PLANNER_TABLE names, or
/// "built-in (H200)" / "built-in (H100 SXM)". Throws like it for a bad file.
std::string planner_table_source(const DeviceFacts& device);
/// Reads a table written by `normkit-bench --tune` (key = value lines). Throws normkit::Error on a
/// malformed file, naming the line.
PlannerTable load_planner_table(const std::string& path);
std::string format_planner_table(const PlannerTable& table);

/// Largest register-cached items per thread (template instances exist for 1, 2, 4).
constexpr int kMaxRowItems = 4;
/// Rows that are not 16-byte vectorised (vec 1: odd N, unaligned rows) are cached an element a slot,
/// a quarter or less of a 16-byte vector's registers: the forward and dX kernels have scalar instances
/// of 8 elements a thread too (kMaxScalarRowItems), in groups of at most kScalarRowMaxThreads threads
/// (56-64 registers), so rows of up to 8192 columns can be read once instead of streamed twice
/// (PlannerTable::scalar_row_widest_group_min_cols). 16 elements a thread in 512 (92-124 registers)
/// lost to the streamed walk at 4097 columns (docs/NOTES.md entry 105).
constexpr int kMaxScalarRowItems = 8;
constexpr int kScalarRowMaxThreads = 1024;
/// LayerNorm's forward keeps its wide scalar instance at 512 threads: built for 1024 it measured 2.6 %
/// slower at 16384 x 3001 (a group of 512 either way), and its 1024-thread groups gained only 3-4 %
/// where the dX kernel's gained 4-7 % and RMSNorm's forward 8-25 % (docs/NOTES.md entry 106).
constexpr int kLnForwardScalarRowMaxThreads = 512;
/// Whether a row layout of `items` slots of `vec` elements is one of the wide scalar instances.
constexpr bool scalar_wide_row_items(int items, int vec) { return vec == 1 && items > kMaxRowItems; }
/// The largest group of a kernel's wide scalar instances: the LayerNorm forward's, or the others'.
constexpr int scalar_row_max_threads(bool layer_norm_forward) {
  return layer_norm_forward ? kLnForwardScalarRowMaxThreads : kScalarRowMaxThreads;
}
/// RMSNorm forward's packed walk (RowShape::packed): blocks of at most kPackedRowMaxThreads threads, of
/// which the kernel's __launch_bounds__ keep kPackedRowMinBlocks resident per SM, i.e. at most 40
/// registers a thread (65536 / (512 x 3), rounded down to the allocation granule of 8): 48 warps an
/// SM where the staged walk has 16.
constexpr int kPackedRowMaxThreads = 512;
constexpr int kPackedRowMinBlocks = 3;
/// The forward's short-row walk (RowShape::short_rows): blocks of kShortRowBlockThreads threads, of
/// which its __launch_bounds__ keep short_row_min_blocks(items x rows) resident per SM; a row takes the
/// next power of two of its 16-byte vectors in lanes, at most kShortRowMaxLanes (a warp: its sums are
/// warp butterflies, never a block barrier), and longer rows take more vectors a lane, up to
/// kShortRowMaxItems (items 1, 2, 4, 8, 16); each group of one vector a lane holds kShortRowsPerGroup rows
/// at once (two 16-byte loads in flight a lane), of more vectors one row. Groups of 1 or 4 rows
/// measured slower on most short rows (docs/NOTES.md entry 41).
constexpr int kShortRowBlockThreads = 256;
constexpr int kShortRowsPerGroup = 2;
constexpr int short_rows_per_group(int items) { return items == 1 ? kShortRowsPerGroup : 1; }
constexpr int kShortRowMaxLanes = 32;
constexpr int kShortRowMaxItems = 16;
/// The longest row the short-row walk serves, in 16-byte vectors (PlannerTable::forward_short_rows_max_vectors).
constexpr int kShortRowMaxVectors = kShortRowMaxLanes * kShortRowMaxItems;
/// Blocks of the short-row walk its __launch_bounds__ keep resident per SM, by the 16-byte vectors a
/// lane holds (items x rows a group): 5 (48 registers a thread, 40 warps an SM) for one or two; with
/// 6 (40 registers) the one-vector 16-bit instances spilled 12-36 bytes. Four, eight and sixteen
/// vectors hold 16-64 more registers of row (at 48 registers four rows of a vector spilled 84 bytes);
/// sixteen take two blocks (128 registers, the staged walk's 16 warps an SM).
constexpr int short_row_min_blocks(int vectors) {
  return vectors <= 2 ? 5 : vectors <= 4 ? 4 : vectors <= 8 ? 3 : 2;
}
/// The forward's one-row-a-block walk (RowShape::block_rows): rows of more than a warp's worth of
/// 16-byte vectors (shorter ones have the short-row walk) in blocks of kBlockRowMinThreads to
/// kBlockRowMaxThreads threads (powers of two), 1, 2 or 4 vectors a thread (kBlockRowMaxItems): rows
/// of up to 2048 vectors (16384 16-bit, 8192 fp32 columns).
constexpr int kBlockRowMinThreads = 64;
constexpr int kBlockRowMaxThreads = 512;
constexpr int kBlockRowMaxItems = 4;
/// The one-row-a-block blocks with a packed instance (forward_packed_block_rows_kernel,
/// RowShape::block_rows_packed): 16-bit rows with fp32 weights (autocast's mixed precision: under
/// launch bounds of their threads alone ptxas gave them up to 123 registers, and they took 1.29-1.63x
/// the time of 16-bit weights on large LayerNorm rows), and the 16-bit LayerNorm blocks of 4 vectors a
/// thread and more than kBlockRowMaxThreads vectors (83-103 registers: one or two blocks an SM).
/// The packed form holds only its row's x across the row sums (16-bit halves stay halves), fp32
/// weights loaded after them a slot at a time, under launch bounds of that register budget
/// (block_row_min_blocks): the loads in flight are all the bytes an SM has in flight
/// (docs/NOTES.md entries 61, 62).
constexpr bool block_rows_packed_instance(bool rms, int element_bytes, int weight_bytes, int threads, int items) {
  return element_bytes < 4 &&
         (weight_bytes > element_bytes || (!rms && items == kBlockRowMaxItems && threads * items > kBlockRowMaxThreads));
}
/// Blocks per SM the packed instances' launch bounds keep resident: registers for the row's x, its
/// weights and bias (16-bit: all of them; fp32 on 16-bit rows: a slot), plus kBlockRowOtherRegisters
/// (addresses, sums, conversions): 64 registers for the 16-bit LayerNorm 256 x 4 blocks (4 an SM, where
/// ptxas had chosen 83 and 2), 48 for the same with fp32 weights (5; 123 and 2 before).
constexpr int kBlockRowOtherRegisters = 16;
constexpr int kRegistersPerSm = 65536;
constexpr int kMaxThreadsPerSm = 2048;
constexpr int kBlockRowMaxBoundBlocks = 16;
constexpr int block_row_min_blocks(int threads, int items, int vec, int x_bytes, int weight_bytes, bool rms) {
  // weights wider than x are loaded after the row sums, a slot at a time
  const int weight_registers = (rms ? 1 : 2) * (weight_bytes > x_bytes ? 1 : items) * vec * weight_bytes / 4;
  const int row_registers = items * vec * x_bytes / 4 + weight_registers;
  const int per_sm = kRegistersPerSm / (row_registers + kBlockRowOtherRegisters);
  const int blocks = (per_sm < kMaxThreadsPerSm ? per_sm : kMaxThreadsPerSm) / threads;
  // at most 16 (64-thread blocks: 1024 threads): asked for 25 blocks of 64 threads, ptxas gave 32
  // registers where 40 fit, and spilled
  return blocks < 1 ? 1 : blocks > kBlockRowMaxBoundBlocks ? kBlockRowMaxBoundBlocks : blocks;
}
/// The largest x dimension of a CUDA grid (2^31 - 1): a packed grid covers every row up to it and
/// walks the rest by grid stride.
constexpr std::int64_t kMaxGridBlocks = 0x7fffffff;
/// Split rows (RowShape::split, the dX kernel; the fused kernel splits with its own block and items): a block of kSplitBlockThreads threads caches
/// kSplitItems 16-byte vectors per thread of its slice (8192 16-bit or 4096 fp32 columns), two blocks
/// per SM as for any 4-item row kernel; clusters of up to kMaxSplit blocks (the portable cluster size).
/// Longer rows take kWideSplitBlockThreads-thread blocks (PlannerTable::row_split_wide_max).
constexpr int kSplitItems = 4;
constexpr int kSplitBlockThreads = 256;
/// The largest thread-block cluster every sm_90 device launches without opting in (the portable size).
constexpr int kPortableClusterBlocks = 8;
constexpr int kMaxSplit = kPortableClusterBlocks;
/// Forward and dX rows longer than a portable cluster of kSplitBlockThreads-thread blocks holds (65536
/// 16-bit / 32768 fp32 columns) take blocks of this many threads, kSplitItems vectors each, over
/// clusters of up to kMaxFusedSplitBlocks (262144 16-bit / 131072 fp32 columns). The split instances
/// of both kernels are built for this block (__launch_bounds__(kWideSplitBlockThreads, 1): 128
/// registers a thread, the same budget as two kSplitBlockThreads blocks per SM).
constexpr int kWideSplitBlockThreads = 512;
/// The forward's wide split blocks may also cache this many vectors a thread
/// (PlannerTable::forward_split_wide_items_min_vectors): 131072 16-bit / 65536 fp32 columns a block.
constexpr int kWideForwardSplitItems = 8;
/// Whether forward_split_kernel is built with kWideForwardSplitItems vectors a thread for these rows:
/// RMSNorm and 16-bit LayerNorm. The LayerNorm fp32 instance spilled (ptxas, 76 bytes) and measured
/// 1.06-1.37x slower than 4 vectors (docs/NOTES.md entry 60), so the planner never plans it and it is
/// not built.
constexpr bool forward_split_wide_items_built(bool rms, int element_bytes) { return rms || element_bytes == 2; }
/// Register budget of the row kernels: a block of T threads gets 65536 / T registers per thread
/// (at most 255), and a thread holds its fragment and, for small fragments, its weights. A group
/// caching more items per thread must therefore be smaller.
/// The kernels' __launch_bounds__ use this; ptxas -v shows which instances still spill.
constexpr int max_row_threads(int items) { return items >= 8 ? 128 : items >= 4 ? 256 : items >= 2 ? 512 : 1024; }
/// The same for a layout of `vec` elements a slot: the wide scalar instances (scalar_wide_row_items)
/// hold 8 elements, 8 registers a tensor (ptxas: 56-64 registers a thread), in blocks of up to
/// kScalarRowMaxThreads.
constexpr int max_row_threads(int items, int vec) {
  return scalar_wide_row_items(items, vec) ? kScalarRowMaxThreads : max_row_threads(items);
}
/// A lane keeps a weight (or bias) array in registers for the whole row walk when its slots take at
/// most this many bytes (16 registers); larger fragments re-read it per row (16-byte L1 hits). Part
/// of the kernels' register budget, like max_row_threads.
constexpr int kKeptWeightBytes = 64;
/// Rows too long to cache are streamed (read twice) by groups of this many threads.
constexpr int kStreamRowThreads = 512;
/// Row kernels ask the compiler for at least 16 resident warps per SM (512 threads): enough loads
/// in flight for HBM without starving a thread's fragment of registers (128 per thread).
constexpr int row_min_blocks_per_sm(int threads) { return threads >= 512 ? 1 : 512 / threads; }
/// Streamed rows hold only kStreamUnroll vectors per tensor per thread, so they need more resident
/// warps instead: two blocks of kStreamRowThreads per SM (64 registers a thread). With one (76-80
/// registers, 16 warps) the streamed kernels reached 39-48 % of DRAM bandwidth (ncu, 2048 x 65536
/// bf16, docs/NOTES.md entry 12).
constexpr int kStreamMinBlocksPerSm = 2;
/// __launch_bounds__ of a row kernel that caches `items` vectors per thread (0 = streamed rows):
/// its largest block, and the blocks per SM the compiler must leave registers for.
constexpr int row_kernel_max_threads(int items, int vec) {
  return items == 0 ? kStreamRowThreads : max_row_threads(items, vec);
}
constexpr int row_kernel_min_blocks(int items, int vec) {
  return items == 0 ? kStreamMinBlocksPerSm : row_min_blocks_per_sm(max_row_threads(items, vec));
}
/// The forward kernel's __launch_bounds__ max threads: row_kernel_max_threads but for LayerNorm's wide
/// scalar instance (kLnForwardScalarRowMaxThreads; one block an SM either way).
constexpr int forward_kernel_max_threads(bool rms, int items, int vec) {
  return scalar_wide_row_items(items, vec) ? scalar_row_max_threads(!rms) : row_kernel_max_threads(items, vec);
}
/// The fused backward keeps dgamma/dbeta accumulators in registers next to the cached row: at most
/// kMaxFusedItems vectors per thread, in blocks of kFusedBlockThreads threads, one block per SM
/// (its __launch_bounds__(kFusedBlockThreads, 1) guarantee co-residency for the grid-wide reduce).
constexpr int kMaxFusedItems = 2;
constexpr int kFusedBlockThreads = 512;
constexpr int kFusedBlocksPerSm = 1;
/// Fused rows split over a cluster take kMaxFusedItems vectors per thread up to a portable cluster's
/// worth (65536 16-bit columns); longer ones take kFusedWideItems, with the row's terms recomputed
/// from the packed fragment instead of cached as floats (the register budget of kFusedBlockThreads
/// threads holds the accumulators and the fragment, not both float arrays), over clusters of up to
/// kMaxFusedSplitBlocks blocks (262144 16-bit / 131072 fp32 columns).
constexpr int kFusedWideItems = 4;
/// Whether the fused kernel's staged wide rows keep their weights in shared memory after the stages,
/// by the bytes of a slot's weights (the weights of its 16-byte vector of x): 16 (16-bit weights on
/// 16-bit rows, fp32 on fp32: 32 KB a block beside three stages of 64 KB) or 32 (fp32 weights on 16-bit
/// rows, autocast's case: 64 KB, which leaves room for two stages). Measured on the H200 (docs/NOTES.md
/// entry 85), fp32 weights from global memory: 54-58 % of the floor; half the slots in shared memory with
/// three stages: 0.84-0.88x that time; all of them with two stages: 0.77-0.80x (70-75 % of the floor).
constexpr bool fused_wide_weights_in_smem(int slot_bytes) { return slot_bytes == 16 || slot_bytes == 32; }
/// Scalar column strips (tiled, dx_and_tiled_kernel) unroll up to 16 rows a thread only in blocks of
/// at most this many threads: 16 rows hold 64 registers of loads (x, dy, mean, rstd), which the 64
/// registers a thread of a 1024-thread block (Tile-256) do not leave room for; 512-thread blocks have
/// 128 (the kernels' __launch_bounds__ follow the unroll).
constexpr int kTiledLongUnrollMaxThreads = 512;
/// dx_and_tiled_kernel (Plan::one_launch): its block size at most, the largest tiled band it takes
/// (Tile-64 and Tile-128 blocks are 32 x 16), and the register budget of 2-item dX rows.
constexpr int kOneLaunchMaxThreads = 512;
static_assert(kOneLaunchMaxThreads <= kTiledLongUnrollMaxThreads, "one-launch strips may unroll 16 rows");
constexpr int kOneLaunchMaxItems = 2;
static_assert(kTallStripThreads <= kOneLaunchMaxThreads, "tall strips run in dx_and_tiled_kernel's blocks");
/// Row slices of two-pass at most: pass 1's grid is col_blocks x row_parts, and a grid's y dimension
/// holds 65535 blocks (a table raising two_pass_target_blocks_per_sm asked for more: a grid that would not launch).
constexpr std::int64_t kMaxTwoPassParts = 65535;
/// The partial reduce (two-pass pass 2, fused final step) has a thread sum up to this many partial
/// rows per batch of loads in flight; the planner gives it enough thread rows (ColumnShape::
/// reduce_block_y, at most 1024 / kWarpSize) that one batch covers the partials where it can.
constexpr int kReduceRowsPerThread = 8;
/// Row pipelines hold at most this many stages (the kernels' cp.async wait takes it as a constant).
constexpr int kMaxRowStages = 8;
/// Shared memory the CUDA runtime reserves per resident block (sm_80 and later).
constexpr int kSmemReservedPerBlock = 1 << 10;

/// The planner. `requested` = Auto chooses; anything else is honoured or throws normkit::Error
/// (e.g. fused for a row too wide for its register layout) -- never a silent substitute.
Plan plan(const Problem& problem, const DeviceFacts& device, Strategy requested, const PlannerTable& table);
/// The same with the device's table (default_planner_table(device)).
Plan plan(const Problem& problem, const DeviceFacts& device, Strategy requested = Strategy::Auto);

/// Whether `strategy` can serve `problem` (and why not, when it cannot).
bool strategy_supported(const Problem& problem, Strategy strategy, std::string* why_not = nullptr,
                        const PlannerTable& table = default_planner_table());

}  // namespace normkit
