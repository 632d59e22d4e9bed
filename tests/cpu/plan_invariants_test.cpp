// Plan invariants: over a large deterministic pseudo-random set of problems (every op, dtype, weight
// dtype, output mask, row alignment, forced strategy) on several devices, every property of a Plan that
// the CUDA launch code (src/cuda/*.cu, *.cuh) relies on without checking it, or checks only by
// throwing an "internal error" at launch time. Each invariant names the kernel code that needs it.
// A failure prints the reproducer: the Problem, the device, the requested strategy, the table, and
// every field of the plan (Plan::describe() and the rest).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "normkit/normkit.h"
#include "normkit/plan.h"

namespace normkit {
namespace {

// ---------------------------------------------------------------------------------------------
// constants of the kernels that the plan must respect
// ---------------------------------------------------------------------------------------------

/// Static shared memory of the row kernels, at most: GroupScratch (512 bytes) plus a split kernel's
/// ClusterSum<2>::Storage (544), 1056, before the 128-byte aligned dynamic buffer row_kernel_smem
/// (row_layout.cuh); ptxas reports 1152 for the split dX instances (build-prebuilt/ptxas.log), and
/// plan_stages budgets the same (kStaticScratch, planner.cpp). The opt-in limit counts it too.
constexpr std::int64_t kRowKernelStaticSmem = 1152;
/// gridDim.y limit (two-pass: row parts are gridDim.y, gamma_beta_two_pass.cu): CUDA's, not the
/// planner's kMaxTwoPassParts, so that the test does not take the planner's word for it.
constexpr std::int64_t kMaxGridY = 65535;

bool pow2(std::int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/// Dynamic shared memory of a column-strip block (column_block_smem, column_reduce.cuh): both arrays'
/// sums of every thread, 2 x vec floats a thread.
std::int64_t column_smem_bytes(const ColumnShape& c) {
  return 2 * std::int64_t(sizeof(float)) * c.block_x * c.block_y * c.vec;
}

// ---------------------------------------------------------------------------------------------
// devices
// ---------------------------------------------------------------------------------------------

struct NamedDevice {
  const char* name;
  DeviceFacts facts;
};

std::vector<NamedDevice> test_devices() {
  std::vector<NamedDevice> out;
  out.push_back({"h200", DeviceFacts::h200()});
  {
    // H100 SXM: 132 SMs, 50 MB L2, sm_90 clusters; the cluster occupancy queries did not answer
    // (cluster_sms all 0: the planner keeps the blocks a row needs, fused_cluster_split)
    DeviceFacts d = DeviceFacts::h200();
    d.l2_bytes = 50LL << 20;
    for (int& s : d.cluster_sms) s = 0;
    out.push_back({"h100-like(132 SMs, cluster_sms unknown)", d});
  }
  {
    // a small sm_90 part: 20 SMs, portable clusters only (no non-portable opt-in)
    DeviceFacts d = DeviceFacts::h200();
    d.sm_count = 20;
    d.l2_bytes = 12LL << 20;
    d.max_nonportable_cluster_blocks = 0;
    for (int k = 1; k <= kMaxFusedSplitBlocks; ++k) d.cluster_sms[k - 1] = k <= 8 ? d.sm_count / k * k : 0;
    out.push_back({"small-sm90(20 SMs, portable clusters only)", d});
  }
  // GPUs without clusters or programmatic launch (before sm_90)
  const auto pre_hopper = [](int sms, std::int64_t l2_mib, std::int64_t optin_kib) {
    DeviceFacts d;
    d.sm_count = sms;
    d.l2_bytes = l2_mib << 20;
    d.smem_per_block = 48 << 10;
    d.smem_per_block_optin = optin_kib << 10;
    d.smem_per_sm = (optin_kib + 1) << 10;
    d.max_cluster_blocks = 0;
    d.max_nonportable_cluster_blocks = 0;
    d.programmatic_launch = false;
    for (int& s : d.cluster_sms) s = 0;
    return d;
  };
  out.push_back({"small-sm89(24 SMs, 99 KB smem, no clusters)", pre_hopper(24, 32, 99)});
  out.push_back({"a100-sm80(108 SMs, no clusters)", pre_hopper(108, 40, 163)});
  return out;
}

// ---------------------------------------------------------------------------------------------
// reproducer text
// ---------------------------------------------------------------------------------------------

std::string problem_text(const Problem& p) {
  std::ostringstream os;
  os << "Problem{op=" << op_name(p.op) << ", rows=" << p.rows << ", cols=" << p.cols << ", dtype=" << dtype_name(p.dtype)
     << ", weight_dtype=" << dtype_name(p.weight_dtype) << ", mask={dx=" << p.mask.dx << ", dweight=" << p.mask.dweight
     << ", dbias=" << p.mask.dbias << "}, rows_vector_aligned=" << p.rows_vector_aligned << "}";
  return os.str();
}

std::string plan_text(const Plan& plan) {
  std::ostringstream os;
  const RowShape& r = plan.row;
  const ColumnShape& c = plan.columns;
  os << "'" << plan.describe() << "' {strategy=" << strategy_name(plan.strategy) << " row{vec=" << r.vec
     << " items=" << r.items << " tpr=" << r.threads_per_row << " rpb=" << r.rows_per_block << " blocks=" << r.blocks
     << " stages=" << r.stages << " smem=" << r.smem_bytes << " split=" << r.split << " slice_cols=" << r.slice_cols
     << " packed=" << r.packed << " short=" << r.short_rows << " block_rows=" << r.block_rows
     << " block_rows_packed=" << r.block_rows_packed << "} columns{band=" << band_name(c.band) << " bx=" << c.block_x
     << " vec=" << c.vec << " by=" << c.block_y << " rpt=" << c.rows_per_thread << " col_blocks=" << c.col_blocks
     << " row_parts=" << c.row_parts << " rows_per_part=" << c.rows_per_part << " reduce_by=" << c.reduce_block_y
     << "} partial_rows=" << plan.partial_rows << " partial_arrays=" << plan.partial_arrays
     << " single_launch=" << plan.single_launch << " one_launch=" << plan.one_launch
     << " cluster_blocks=" << plan.cluster_blocks << " deferred=" << plan.deferred_sums
     << " programmatic=" << plan.programmatic_launch << " workspace=" << plan.workspace_bytes << "}";
  return os.str();
}

// ---------------------------------------------------------------------------------------------
// failure collection: one gtest failure per invariant, with a count and the first reproducers
// ---------------------------------------------------------------------------------------------

class Checker {
 public:
  void set_case(const Problem* p, const NamedDevice* device, Strategy requested, const char* table, const Plan* plan) {
    problem_ = p;
    device_ = device;
    requested_ = requested;
    table_ = table;
    plan_ = plan;
  }
  void expect(bool ok, const char* invariant) {
    ++checks_;
    if (!ok) fail(invariant);
  }
  void fail(const std::string& invariant, const std::string& detail = "") {
    Failures& f = failures_[invariant];
    ++f.count;
    // the first few distinct problems (the same problem usually fails on every device alike)
    const std::string problem = problem_text(*problem_);
    if (f.examples.size() < kExamples && f.problems.insert(problem).second) {
      std::ostringstream os;
      os << "plan(" << problem << ", device=" << device_->name
         << ", requested=" << strategy_name(requested_) << ", table=" << table_ << ")";
      if (plan_ != nullptr) os << "\n      -> " << plan_text(*plan_);
      if (!detail.empty()) os << "\n      " << detail;
      f.examples.push_back(os.str());
    }
  }
  void cover(const std::string& kind) { ++coverage_[kind]; }
  std::int64_t covered(const std::string& kind) const {
    const auto it = coverage_.find(kind);
    return it == coverage_.end() ? 0 : it->second;
  }
  std::int64_t checks() const { return checks_; }
  bool failed() const { return !failures_.empty(); }
  void report() const {
    for (const auto& [invariant, f] : failures_) {
      std::ostringstream os;
      os << "INVARIANT VIOLATED: " << invariant << "\n  " << f.count << " failing plan(s); first ones:";
      for (const std::string& e : f.examples) os << "\n    " << e;
      ADD_FAILURE() << os.str();
    }
  }
  void print_coverage(const char* title) const {
    std::printf("[plan invariants] %s coverage:\n", title);
    for (const auto& [kind, n] : coverage_) std::printf("  %-44s %lld\n", kind.c_str(), static_cast<long long>(n));
  }

 private:
  static constexpr std::size_t kExamples = 4;
  struct Failures {
    std::int64_t count = 0;
    std::vector<std::string> examples;
    std::set<std::string> problems;
  };
  const Problem* problem_ = nullptr;
  const NamedDevice* device_ = nullptr;
  Strategy requested_ = Strategy::Auto;
  const char* table_ = "";
  const Plan* plan_ = nullptr;
  std::map<std::string, Failures> failures_;
  std::map<std::string, std::int64_t> coverage_;
  std::int64_t checks_ = 0;
};

// ---------------------------------------------------------------------------------------------
// the invariants
// ---------------------------------------------------------------------------------------------

/// The row-wise kernels that take RowShape through RowGroup / RowWalk / dispatch_row_shape.
enum class RowKernel {
  Forward,       // forward.cu forward_kernel (unsplit, staged or not, or streamed)
  ForwardPacked, // forward.cu rms_forward_packed_kernel
  ForwardSplit,  // forward.cu forward_split_kernel
  Dx,            // backward_dx.cu backward_dx_kernel (unsplit or split)
  Fused,         // fused_backward.cu fused_backward_kernel
  DxAndTiled,    // gamma_beta_tiled.cu dx_and_tiled_kernel (its dX blocks)
};

const char* row_kernel_name(RowKernel k) {
  switch (k) {
    case RowKernel::Forward: return "forward_kernel";
    case RowKernel::ForwardPacked: return "rms_forward_packed_kernel";
    case RowKernel::ForwardSplit: return "forward_split_kernel";
    case RowKernel::Dx: return "backward_dx_kernel";
    case RowKernel::Fused: return "fused_backward_kernel";
    case RowKernel::DxAndTiled: return "dx_and_tiled_kernel";
  }
  return "?";
}

struct Context {
  const Problem& p;
  const DeviceFacts& d;
  const Plan& plan;
  Checker& ck;
  int elem;   // bytes of an activation element
  int kvec;   // elements of a 16-byte vector: the only vectorised instance (dispatch_row_shape, kVec)
  bool rms;
  int arrays; // gamma/beta outputs the kernels write (gamma_beta_outputs: dweight, then dbias)
};

/// One block of `block_smem` dynamic + `static_smem` static bytes must launch at all: within the
/// opt-in limit (allow_dynamic_smem asks for the dynamic part; the limit counts the static part too)
/// and within an SM next to the runtime's reserved kilobyte.
void check_smem_fits(Context& c, std::int64_t dynamic_smem, std::int64_t static_smem, const char* what_optin,
                     const char* what_sm) {
  c.ck.expect(dynamic_smem >= 0 && dynamic_smem + static_smem <= c.d.smem_per_block_optin, what_optin);
  c.ck.expect(dynamic_smem + static_smem + kSmemReservedPerBlock <= c.d.smem_per_sm, what_sm);
}

/// Invariants of a RowShape that one of the row kernels is launched with.
void check_row_kernel(Context& c, RowKernel kernel) {
  const RowShape& r = c.plan.row;
  Checker& ck = c.ck;
  const bool split = r.split > 1;
  ck.cover(std::string("row kernel: ") + row_kernel_name(kernel) + (split ? " split" : "") +
           (r.stages > 0 ? " staged" : "") + (r.items == 0 ? " streamed" : "") + (r.vec == 1 ? " scalar" : ""));

  // RowGroup::of_this_thread (row_layout.cuh) takes a lane and a group index by mask and shift, and
  // row_group_sum's group barriers assume power-of-two groups (common.cuh).
  ck.expect(pow2(r.threads_per_row) && r.threads_per_row <= 1024,
            "row.threads_per_row is a power of two in [1, 1024] (RowGroup::of_this_thread, row_group_sum)");
  ck.expect(r.rows_per_block >= 1, "row.rows_per_block >= 1");
  const std::int64_t block = std::int64_t(r.threads_per_row) * r.rows_per_block;
  // group_sum_in_warp / warp_sum shuffle with the full mask 0xffffffff: every lane of every warp of
  // the block must exist (common.cuh); GroupScratch holds the sums of at most 1024 / kWarpSize warps.
  ck.expect(block % kWarpSize == 0, "row block (threads_per_row x rows_per_block) is whole warps (full-mask shuffles, common.cuh)");
  ck.expect(block <= 1024 && block <= c.d.max_threads_per_block, "row block <= 1024 and <= the device's max threads per block");

  // __launch_bounds__ of each kernel: a launch with more threads than its bound fails.
  std::int64_t bound = 0;
  switch (kernel) {
    case RowKernel::Forward: bound = forward_kernel_max_threads(c.rms, r.items, r.vec); break;  // forward_kernel
    case RowKernel::ForwardPacked: bound = kPackedRowMaxThreads; break;            // rms_forward_packed_kernel
    case RowKernel::ForwardSplit: bound = kWideSplitBlockThreads; break;           // forward_split_kernel
    case RowKernel::Dx: bound = split ? kWideSplitBlockThreads : row_kernel_max_threads(r.items, r.vec); break;  // dx_kernel_max_threads
    case RowKernel::Fused: bound = kFusedBlockThreads; break;                      // fused_backward_kernel
    case RowKernel::DxAndTiled: bound = kOneLaunchMaxThreads; break;               // dx_and_tiled_kernel
  }
  ck.expect(block <= bound, "row block <= the kernel's __launch_bounds__ max threads");

  // Template instances (dispatch_row_shape, row_layout.cuh, and each launcher): any other items throw
  // "internal error: no kernel instance" at launch.
  bool items_ok = false;
  const int it = r.items;
  const bool scalar_wide = r.vec == 1 && it == kMaxScalarRowItems;  // the wide scalar instances (unsplit, unstaged)
  switch (kernel) {
    case RowKernel::Forward: items_ok = it == 0 || it == 1 || it == 2 || it == 4 || scalar_wide; break;
    case RowKernel::ForwardPacked: items_ok = it == 1 || it == 2 || it == 4; break;
    case RowKernel::ForwardSplit:
      items_ok = it == kSplitItems || (it == kWideForwardSplitItems && forward_split_wide_items_built(c.rms, c.elem));
      break;
    case RowKernel::Dx: items_ok = split ? it == kSplitItems : (it == 0 || it == 1 || it == 2 || it == 4 || scalar_wide); break;
    case RowKernel::Fused: items_ok = split ? (it == kMaxFusedItems || it == kFusedWideItems) : (it == 1 || it == 2); break;
    case RowKernel::DxAndTiled: items_ok = it == 1 || it == 2; break;
  }
  ck.expect(items_ok, "row.items has a template instance in the launched kernel (dispatch_row_shape / launcher switch)");

  // The vector rule: 16-byte Pack loads and cp.async need 16-byte aligned rows and N % VEC == 0
  // (RowFragment::load, RowStages, "the planner's vec rule"); the only vectorised instance is kVec.
  ck.expect(r.vec == 1 || r.vec == c.kvec, "row.vec is 1 or 16 / sizeof(T) (dispatch_row_shape has no other instance)");
  if (r.vec > 1)
    ck.expect(c.p.rows_vector_aligned && c.p.cols % r.vec == 0,
              "row.vec > 1 only on 16-byte aligned rows with N % vec == 0 (RowFragment::load, cp.async)");

  // Stages: cp.async copies are 16 bytes (staged instances exist for cached 16-byte vectors only,
  // dispatch_row_shape); cp_async_wait covers at most kMaxRowStages - 1 pending groups;
  // staged_row_walk_deferred waits on depth - 2 groups (depth >= 2).
  ck.expect(r.stages >= 0 && r.stages <= kMaxRowStages, "row.stages in [0, kMaxRowStages] (cp_async_wait)");
  if (r.stages > 0) ck.expect(r.items > 0 && r.vec == c.kvec, "staged rows are cached 16-byte vectors (dispatch_row_shape)");
  const bool deferred_walk = r.stages > 0 && ((kernel == RowKernel::ForwardSplit) ||
                                              (kernel == RowKernel::Fused && c.plan.deferred_sums));
  if (deferred_walk) ck.expect(r.stages >= 2, "deferred staged walks have >= 2 stages (staged_row_walk_deferred)");
  if (kernel == RowKernel::ForwardPacked || kernel == RowKernel::DxAndTiled)
    ck.expect(r.stages == 0, "the packed forward and dx_and_tiled rows are unstaged (their launchers throw otherwise)");

  // Split rows over a thread-block cluster (RowWalk::of_this_block<true>, ClusterSum).
  ck.expect(r.split >= 1, "row.split >= 1");
  if (split) {
    ck.expect(r.rows_per_block == 1 && r.threads_per_row == block,
              "split rows: the block is the row group (rows_per_block == 1; block_sum_in_first_warp, RowWalk)");
    ck.expect(r.vec == c.kvec, "split rows are 16-byte vectorised (dispatch_row_shape has split instances for kVec only)");
    ck.expect(r.slice_cols > 0 && r.vec > 0 && r.slice_cols % r.vec == 0,
              "split slices start on whole 16-byte vectors (slice_cols % vec == 0; col0 = rank * slice_cols)");
    ck.expect(std::int64_t(r.split) * r.slice_cols >= c.p.cols, "split slices cover the row (split * slice_cols >= N)");
    ck.expect(r.split <= kMaxFusedSplitBlocks, "split <= kMaxFusedSplitBlocks (ClusterSum::kMaxRanks slots)");
    ck.expect(c.d.max_cluster_blocks >= 2 &&
                  (r.split <= c.d.max_cluster_blocks || r.split <= c.d.max_nonportable_cluster_blocks),
              "split rows only on devices that launch clusters of that size (ClusterSum traps below sm_90)");
    ck.expect(r.blocks % r.split == 0, "split grid is whole clusters (row.blocks % split == 0; cluster launch)");
    if (kernel == RowKernel::ForwardSplit && !c.rms) {
      ck.cover("forward split LayerNorm (Chan merge)");
      ck.expect(std::int64_t(r.split - 1) * r.slice_cols <= c.p.cols,
                "LayerNorm split forward: every rank but the last holds slice_cols columns (Chan merge n_b, forward_split_kernel)");
    }
  }
  // Coverage: a lane caches slots k * G + lane, k < items, of VEC elements; columns past them are never
  // read nor written (RowFragment::load, store_slot). Streamed rows (items 0) loop over the row.
  if (r.items > 0) {
    const std::int64_t cols_per_block = std::int64_t(r.threads_per_row) * r.items * r.vec;
    ck.expect(cols_per_block >= (split ? std::int64_t(r.slice_cols) : c.p.cols),
              "row layout covers every column: threads_per_row * items * vec >= N (split: >= slice_cols)");
  }
  // Grid: 1-D, x dimension at most 2^31 - 1, at least one block (unsigned(plan.row.blocks)).
  ck.expect(r.blocks >= 1 && r.blocks <= kMaxGridBlocks, "row grid: 1 <= row.blocks <= kMaxGridBlocks");

  // Dynamic shared memory: the stages' layout (RowStages: [stage][tensor][item][thread] 16-byte packs,
  // then [stage][2][thread] floats when the statistics are staged: StagedBackwardRows with
  // kStagedStats), and the fused kernel's extras.
  int tensors = 1;
  bool staged_stats = false;
  std::int64_t after_stages = 0;
  if (kernel == RowKernel::Dx) {
    tensors = 2;
    staged_stats = true;
  } else if (kernel == RowKernel::Fused) {
    tensors = 2;
    staged_stats = !c.plan.deferred_sums;  // walk_backward_rows_deferred loads them into registers
    // Staged wide rows keep their weights after the stages (kWeightsInSmem, fused_backward_kernel)
    const int slot_bytes = int(dtype_size(c.p.weight_dtype)) * r.vec;
    if (r.items > kMaxFusedItems && split && r.stages > 0 && fused_wide_weights_in_smem(slot_bytes))
      after_stages = std::int64_t(slot_bytes) * r.items * block;
  }
  if (r.stages > 0) {
    const std::int64_t needed =
        std::int64_t(r.stages) * block * (std::int64_t(tensors) * r.items * 16 + (staged_stats ? 8 : 0)) + after_stages;
    ck.expect(r.smem_bytes >= needed, "row.smem_bytes holds the stages (RowStages layout; + statistics, + fused wide weights)");
  }
  if (kernel == RowKernel::Fused && after_stages > 0) {
    // the launcher's own test (launch_fused_backward throws "a wide fused plan without room for its weights")
    const std::int64_t launcher_needed = (std::int64_t(r.stages) * 2 * 16 + int(dtype_size(c.p.weight_dtype)) * r.vec) *
                                         r.items * block;
    ck.expect(r.smem_bytes >= launcher_needed, "fused staged wide rows reserve their weights' shared memory (launch_fused_backward)");
  }
  check_smem_fits(c, r.smem_bytes, kRowKernelStaticSmem,
                  "row.smem_bytes + the kernel's static shared memory <= the device's opt-in maximum",
                  "row.smem_bytes + static + reserved shared memory fit one SM");
}

/// forward_short_rows_kernel (launch_forward's short-row branch): instances for 1..32 lanes at one
/// vector a lane and 2, 4, 8, 16 vectors a lane at 32 lanes; blocks of kShortRowBlockThreads; no grid
/// stride: the grid covers every row.
void check_short_rows(Context& c) {
  const RowShape& r = c.plan.row;
  Checker& ck = c.ck;
  ck.cover("forward: short rows");
  ck.expect(r.vec == c.kvec && r.stages == 0 && r.split == 1 && r.block_threads() == kShortRowBlockThreads,
            "short rows: vec == kVec, unstaged, unsplit, kShortRowBlockThreads threads (launch_forward throws otherwise)");
  const bool instance = (r.items == 1 && pow2(r.threads_per_row) && r.threads_per_row <= kShortRowMaxLanes) ||
                        (r.threads_per_row == kShortRowMaxLanes && (r.items == 2 || r.items == 4 || r.items == 8 || r.items == 16));
  ck.expect(instance, "short rows: (lanes, items) has a forward_short_rows_kernel instance");
  if (r.vec == c.kvec) ck.expect(c.p.rows_vector_aligned && c.p.cols % r.vec == 0, "short rows: 16-byte aligned rows, N % vec == 0");
  ck.expect(std::int64_t(r.threads_per_row) * std::max(r.items, 0) * r.vec >= c.p.cols,
            "short rows: lanes * items * vec >= N (the row's slots)");
  const std::int64_t rows_per_block =
      std::int64_t(kShortRowBlockThreads / std::max(1, r.threads_per_row)) * short_rows_per_group(r.items);
  ck.expect(r.blocks >= 1 && r.blocks <= kMaxGridBlocks && r.blocks >= (c.p.rows + rows_per_block - 1) / rows_per_block,
            "short rows: the grid covers every row (no grid stride; blocks * groups * rows_per_group >= M, <= kMaxGridBlocks)");
}

/// launch_forward_block_rows (forward_block_rows.cu): one row a block, instances 64..512 threads x
/// 1, 2, 4 vectors; the launcher throws unless blocks == M, vec == kVec, unstaged and unsplit.
void check_block_rows(Context& c) {
  const RowShape& r = c.plan.row;
  Checker& ck = c.ck;
  ck.cover(std::string("forward: block rows") + (r.block_rows_packed ? " packed" : ""));
  ck.expect(r.vec == c.kvec && r.rows_per_block == 1 && r.stages == 0 && r.split == 1 && r.blocks == c.p.rows,
            "block rows: vec == kVec, one row a block, unstaged, unsplit, blocks == M (launch_forward_block_rows throws otherwise)");
  ck.expect(r.blocks >= 1 && r.blocks <= kMaxGridBlocks, "block rows: 1 <= blocks (= M) <= kMaxGridBlocks");
  const int t = r.threads_per_row;
  ck.expect((t == 64 || t == 128 || t == 256 || t == 512) && (r.items == 1 || r.items == 2 || r.items == 4),
            "block rows: (threads, items) has a forward_block_rows_kernel instance");
  if (r.vec == c.kvec) ck.expect(c.p.rows_vector_aligned && c.p.cols % r.vec == 0, "block rows: 16-byte aligned rows, N % vec == 0");
  ck.expect(std::int64_t(t) * r.items * r.vec >= c.p.cols, "block rows: threads * items * vec >= N");
  if (r.block_rows_packed)
    ck.expect(block_rows_packed_instance(c.rms, c.elem, int(dtype_size(c.p.weight_dtype)), t, r.items),
              "block rows packed only where forward_packed_block_rows_kernel is built (kHoldPackedRow, else no_instance)");
}

void check_forward(Context& c) {
  const RowShape& r = c.plan.row;
  if (c.p.rows == 0) return;  // launch_forward / launch_forward_block_rows return before any launch
  // cuda_forward (dispatch.cu): block_rows first, then launch_forward's short rows, packed, split, plain
  if (r.block_rows) return check_block_rows(c);
  if (r.short_rows) return check_short_rows(c);
  if (r.packed) {
    c.ck.expect(c.rms && r.items > 0 && r.stages == 0 && r.split == 1,
                "packed forward: RMSNorm, cached, unstaged, unsplit (launch_forward throws 'a packed forward plan' otherwise)");
    return check_row_kernel(c, RowKernel::ForwardPacked);
  }
  check_row_kernel(c, r.split > 1 ? RowKernel::ForwardSplit : RowKernel::Forward);
}

/// Column strips (tiled, two-pass pass 1): vector rule, sum_over_thread_rows' layout, grid.
void check_columns_common(Context& c, const char* who) {
  const ColumnShape& s = c.plan.columns;
  Checker& ck = c.ck;
  const std::string w(who);
  ck.expect(s.vec == 1 || s.vec == c.kvec, (w + ": columns.vec is 1 or 16 / sizeof(T) (launcher instances)").c_str());
  if (s.vec > 1)
    ck.expect(c.p.rows_vector_aligned && c.p.cols % s.vec == 0,
              (w + ": columns.vec > 1 only on 16-byte aligned rows with N % vec == 0 (accumulate_columns' Pack loads)").c_str());
  ck.expect(s.block_x >= 1 && s.block_y >= 1 && std::int64_t(s.block_x) * s.block_y <= 1024 &&
                std::int64_t(s.block_x) * s.block_y <= c.d.max_threads_per_block,
            (w + ": column block 1 <= block_x * block_y <= 1024").c_str());
  if (s.vec == 8)  // tall strips of fewer lanes: no lane has bit 2 set, the swap never applies
    ck.expect(s.block_x % 8 == 0 || s.tall_strips(),
              (w + ": 8-column lanes come in groups of 8 (sum_over_thread_rows' half swap) unless tall").c_str());
  if (s.tall_strips())
    ck.expect(pow2(s.block_x) && s.block_x * s.block_y == kTallStripThreads,
              (w + ": tall strips: a power of two of lanes, kTallStripThreads a block (the warps' fold)").c_str());
  ck.expect(s.col_blocks >= 1 && s.col_blocks <= kMaxGridBlocks, (w + ": 1 <= col_blocks <= kMaxGridBlocks").c_str());
  ck.expect(s.col_blocks * s.block_x * std::int64_t(s.vec) >= c.p.cols,
            (w + ": column strips cover N (col_blocks * block_x * vec >= N)").c_str());
}

/// The partial reduce (two-pass pass 2, fused second launch): a 32 x reduce_block_y block.
void check_reduce(Context& c, const char* who) {
  c.ck.expect(c.plan.columns.reduce_block_y >= 1 && c.plan.columns.reduce_block_y <= 1024 / kWarpSize,
              (std::string(who) + ": 1 <= reduce_block_y <= 32 (reduce_partials_kernel's 32 x block_y block)").c_str());
}

void check_tiled(Context& c) {
  const ColumnShape& s = c.plan.columns;
  Checker& ck = c.ck;
  ck.cover(std::string("tiled ") + band_name(s.band) + (s.vec > 1 ? " vec" : "") + (s.block_x < kWarpSize ? " narrow" : "") +
           (c.plan.one_launch ? " one-launch" : ""));
  check_columns_common(c, "tiled");
  bool instance = false;
  if (s.vec == 1)
    instance = s.rows_per_thread == 1 || s.rows_per_thread == 4 || s.rows_per_thread == 8 ||
               (s.rows_per_thread == 16 && s.block_x * s.block_y <= kTiledLongUnrollMaxThreads);
  else if (s.tall_strips())  // the tall instances (kTall: folded thread rows), in <= 512-thread blocks
    instance = (s.rows_per_thread == 1 || s.rows_per_thread == 2 || s.rows_per_thread == 4 || s.rows_per_thread == 8) &&
               s.block_x * s.block_y <= kTiledLongUnrollMaxThreads;
  else  // warp-wide vectorised strips
    instance = s.rows_per_thread == 1 || s.rows_per_thread == 2;
  ck.expect(instance, "tiled: (rows_per_thread, vec, tall) has a gamma_beta_tiled_kernel instance (16 scalar rows "
                      "only in <= 512-thread blocks; vectorised: 1 or 2 rows, tall ones also 4 or 8, in <= 512 threads)");
  check_smem_fits(c, column_smem_bytes(s), c.plan.one_launch ? kRowKernelStaticSmem : 0,
                  "tiled: column shared memory (2 * 4 * block_x * block_y * vec) fits the opt-in maximum",
                  "tiled: column shared memory fits one SM");
}

void check_one_launch(Context& c) {
  const ColumnShape& s = c.plan.columns;
  const RowShape& r = c.plan.row;
  Checker& ck = c.ck;
  // dispatch.cu runs dx_and_tiled_kernel for any unfused plan with one_launch: its dX blocks write dx
  // (dx_cached_rows stores through p.dx, null when dx is not requested); its strips are checked as
  // the tiled ones below (check_tiled).
  ck.expect(c.plan.mask.dx, "one_launch only with dX (dx_and_tiled_kernel's dX blocks write dx)");
  ck.expect(r.vec == c.kvec && (s.vec == 1 || s.tall_strips()) && r.stages == 0 && r.split <= 1,
            "one_launch: 16-byte dX rows, scalar or tall strips, unstaged, unsplit (launch_dx_and_tiled throws otherwise)");
  ck.expect(s.tall_strips() ? s.rows_per_thread == 1 || s.rows_per_thread == 2 || s.rows_per_thread == 4 ||
                                  s.rows_per_thread == 8
                            : s.rows_per_thread == 1 || s.rows_per_thread == 4 || s.rows_per_thread == 8 ||
                                  s.rows_per_thread == 16,
            "one_launch: rows_per_thread has a dx_and_tiled_kernel instance");
  ck.expect(pow2(s.block_x), "one_launch: strip lanes are a power of two (dx_and_tiled_kernel shifts by log2)");
  ck.expect(std::int64_t(r.threads_per_row) * r.rows_per_block == std::int64_t(s.block_x) * s.block_y,
            "one_launch: the dX rows fill the tiled block exactly (rows_per_block * threads_per_row == block_x * block_y)");
  ck.expect(r.blocks + s.col_blocks <= kMaxGridBlocks, "one_launch: row.blocks + col_blocks <= kMaxGridBlocks");
  ck.expect(column_smem_bytes(s) + kRowKernelStaticSmem <= 48 * 1024,
            "one_launch: shared memory within the 48 KB a launch has without opting in (launch_dx_and_tiled asks none)");
  check_row_kernel(c, RowKernel::DxAndTiled);
  check_tiled(c);
}

void check_two_pass(Context& c) {
  const ColumnShape& s = c.plan.columns;
  Checker& ck = c.ck;
  ck.cover(std::string("two_pass") + (s.vec > 1 ? " vec" : ""));
  check_columns_common(c, "two_pass");
  ck.expect((s.vec == 1 && s.rows_per_thread == 4) || (s.vec == c.kvec && s.rows_per_thread == 2),
            "two_pass: (rows_per_thread, vec) has a two_pass_partials_kernel instance");
  ck.expect(!s.tall_strips(), "two_pass: no tall strips (its kernel sums thread rows without the tall strips' fold)");
  ck.expect(s.row_parts >= 1 && s.row_parts <= kMaxGridY, "two_pass: 1 <= row_parts <= 65535 (gridDim.y)");
  ck.expect(s.rows_per_part >= 1 && s.row_parts * s.rows_per_part >= c.p.rows,
            "two_pass: row parts cover M (row_parts * rows_per_part >= M)");
  // two_pass_partials_kernel writes [arrays][row_parts][N] floats; the reduce reads them back
  const __int128 needed = __int128(c.arrays) * s.row_parts * c.p.cols * 4;
  ck.expect(__int128(c.plan.workspace_bytes) >= needed, "two_pass: workspace >= arrays x row_parts x N floats");
  check_reduce(c, "two_pass");
  check_smem_fits(c, column_smem_bytes(s), 0, "two_pass: column shared memory fits the opt-in maximum",
                  "two_pass: column shared memory fits one SM");
}

void check_simple(Context& c) {
  const ColumnShape& s = c.plan.columns;
  c.ck.cover("simple");
  // gamma_beta_simple_kernel: one thread a column, 1-D grid of col_blocks x block_x
  c.ck.expect(s.block_x >= 1 && s.block_x <= 1024 && s.block_x <= c.d.max_threads_per_block, "simple: 1 <= block_x <= 1024");
  c.ck.expect(s.col_blocks >= 1 && s.col_blocks <= kMaxGridBlocks && s.col_blocks * s.block_x >= c.p.cols,
              "simple: col_blocks * block_x >= N, col_blocks in [1, kMaxGridBlocks]");
}

void check_fused(Context& c) {
  const Plan& plan = c.plan;
  const RowShape& r = plan.row;
  Checker& ck = c.ck;
  const bool gb = plan.mask.any_gamma_beta();
  const bool split = r.split > 1;
  const std::int64_t walkers = r.split >= 1 ? r.blocks / r.split : r.blocks;
  ck.cover(std::string("fused") + (split ? " split" : "") + (r.items > kMaxFusedItems ? " wide" : "") +
           (plan.deferred_sums ? " deferred" : "") + (plan.cluster_blocks > 0 ? " cluster-finish" : "") +
           (plan.single_launch ? " single-launch" : "") + (gb ? "" : " dx-only"));
  check_row_kernel(c, RowKernel::Fused);

  // Instances with deferred sums (launch_fused_backward): only staged split rows defer, and staged wide
  // rows must (their kWeightsInSmem walk is the deferred one).
  if (plan.deferred_sums) ck.expect(split && r.stages > 0, "deferred_sums only for staged split fused rows (launch_fused_backward)");
  if (split && r.stages > 0 && r.items > kMaxFusedItems)
    ck.expect(plan.deferred_sums, "staged wide fused rows defer their sums (launch_fused_backward has no other instance)");

  if (gb) {
    // Block partials are staged through the dynamic buffer: blockDim.x * VEC floats, and a Cluster
    // finish keeps `arrays` rows of N floats after them (fused_backward_kernel's epilogue).
    const std::int64_t staging = r.block_threads() * std::int64_t(r.vec) * 4 +
                                 (plan.cluster_blocks > 0 ? std::int64_t(c.arrays) * c.p.cols * 4 : 0);
    ck.expect(r.smem_bytes >= staging, "fused: smem holds the block partial staging (+ the cluster finish's partial rows)");
  }
  if (plan.cluster_blocks > 0) {
    // Cluster finish: the whole grid is one cluster (launch_fused_backward: cluster_blocks = blocks),
    // portable (no non-portable opt-in on this path), and reduce_over_cluster traps below sm_90.
    ck.cover("fused: cluster finish");
    ck.expect(!split && r.blocks == plan.cluster_blocks && plan.cluster_blocks <= kPortableClusterBlocks &&
                  plan.cluster_blocks <= c.d.max_cluster_blocks && c.d.max_cluster_blocks >= 2,
              "fused cluster finish: unsplit, grid == one portable cluster the device launches");
  } else if (gb) {
    if (plan.partial_rows == 0) {
      // Direct finish: each block writes its partial row straight to dgamma/dbeta: one walker only.
      ck.cover("fused: direct finish");
      ck.expect(walkers == 1, "fused direct finish (no partials) only with one row walker (else blocks overwrite dgamma)");
    } else {
      // partials [arrays][walkers][N], walkers <= partial_rows (cluster_grid only lowers them)
      ck.expect(plan.partial_rows >= walkers, "fused: partial_rows >= row walkers (row.blocks / split)");
      const __int128 needed = __int128(c.arrays) * plan.partial_rows * c.p.cols * 4;
      ck.expect(__int128(plan.workspace_bytes) >= needed, "fused: workspace >= arrays x partial_rows x N floats");
      if (plan.single_launch) {
        // GridSync: a cooperative launch (every block resident; no clusters: split kernels return
        // before the reduce and no second launch follows, so dgamma would never be written).
        ck.expect(!split, "fused single_launch only for unsplit rows (a split kernel skips the grid-sync reduce)");
        ck.expect(r.blocks <= std::int64_t(c.d.sm_count) * kFusedBlocksPerSm,
                  "fused single_launch: grid <= co-resident blocks (cooperative launch, kFusedBlocksPerSm an SM)");
        ck.expect(r.smem_bytes >= std::int64_t(kWarpSize) * (r.block_threads() / kWarpSize) * 4,
                  "fused single_launch: smem holds reduce_partials' 32 x (blockDim / 32) floats");
      } else {
        ck.cover("fused: second-launch reduce");
        check_reduce(c, "fused second launch");
      }
    }
  }
}

void check_backward(Context& c) {
  const Plan& plan = c.plan;
  if (c.p.rows == 0) return;  // cuda_backward memsets dweight / dbias and launches nothing
  // cuda_backward (dispatch.cu)
  if (plan.strategy == Strategy::Fused) {
    if (plan.mask.any_gamma_beta() || plan.row.split > 1) {
      check_fused(c);
    } else if (plan.mask.dx) {
      c.ck.cover("fused dx-only: backward_dx_kernel");
      check_row_kernel(c, RowKernel::Dx);  // launch_backward_dx with the fused row shape
    }
    return;
  }
  if (plan.one_launch) return check_one_launch(c);
  if (plan.mask.dx) check_row_kernel(c, RowKernel::Dx);
  if (!plan.mask.any_gamma_beta()) return;
  switch (plan.strategy) {
    case Strategy::Simple: check_simple(c); break;
    case Strategy::Tiled: check_tiled(c); break;
    case Strategy::TwoPass: check_two_pass(c); break;
    default: c.ck.fail("backward plan has a strategy cuda_backward cannot launch (internal error: unplanned strategy)");
  }
}

/// Everything a plan must satisfy for `p` on `device` when `requested` was asked for.
void check_plan(const Problem& p, const DeviceFacts& d, Strategy requested, const Plan& plan, Checker& ck) {
  const int elem = int(dtype_size(p.dtype));
  const bool rms = is_rms(p.op);
  const int arrays = (p.mask.dweight ? 1 : 0) + (p.mask.dbias && !rms ? 1 : 0);
  Context c{p, d, plan, ck, elem, 16 / elem, rms, arrays};

  if (is_backward(p.op)) {
    // cuda_backward switches on plan.strategy ("internal error: unplanned strategy" for Auto)
    ck.expect(plan.strategy != Strategy::Auto, "a backward plan's strategy is never Auto (cuda_backward switches on it)");
    // plan.h: a forced strategy is "honoured or throws normkit::Error -- never a silent substitute"
    if (requested != Strategy::Auto) ck.expect(plan.strategy == requested, "a forced backward strategy is honoured");
    // cuda_backward decides fused-vs-dX and gamma/beta-or-not by plan.mask while the kernels write
    // the problem's outputs: they must agree (else dgamma is never written, or dx is written through null)
    ck.expect(plan.mask.dx == p.mask.dx && plan.mask.dweight == p.mask.dweight && plan.mask.dbias == (p.mask.dbias && !rms),
              "plan.mask == the problem's outputs (RMSNorm: no dbias)");
  }
  // No 64-bit product went negative (M x N beyond 2^31 included).
  const RowShape& r = plan.row;
  const ColumnShape& s = plan.columns;
  ck.expect(r.blocks >= 0 && r.smem_bytes >= 0 && s.col_blocks >= 0 && s.row_parts >= 0 && s.rows_per_part >= 0 &&
                plan.partial_rows >= 0 && plan.partial_arrays >= 0 && r.slice_cols >= 0 && r.items >= 0,
            "no negative field (overflowed 64-bit products)");
  // Programmatic dependent launch (LaunchMode::programmatic, griddepcontrol: sm_90 on, common.cuh).
  if (plan.programmatic_launch) ck.expect(d.programmatic_launch, "programmatic_launch only on devices that have it");
  // Clusters exist from sm_90 on (ClusterSum / reduce_over_cluster trap below it).
  if (r.split > 1 || plan.cluster_blocks > 0) ck.expect(d.max_cluster_blocks >= 2, "clusters only on devices that have them");
  if (is_backward(p.op)) check_backward(c);
  else check_forward(c);
}

// ---------------------------------------------------------------------------------------------
// the problem generator
// ---------------------------------------------------------------------------------------------

class Generator {
 public:
  explicit Generator(std::uint64_t seed) : rng_(seed) {}

  double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
  bool coin(double p) { return uniform() < p; }
  template <typename T>
  T pick(const std::vector<T>& v) {
    return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng_)];
  }
  std::int64_t log_uniform(std::int64_t lo, std::int64_t hi) {
    const double x = std::exp(std::log(double(lo)) + uniform() * (std::log(double(hi) + 1) - std::log(double(lo))));
    return std::clamp<std::int64_t>(std::int64_t(x), lo, hi);
  }

  std::int64_t rows() {
    static const std::vector<std::int64_t> edges = {0, 1, 2, 3, 7, 8, 63, 64, 128, 129, 255, 256, 1023, 1024,
                                                    4095, 4096, 4097, 16384, 49152, 65535, 65536, (1 << 20) + 3,
                                                    kMaxGridBlocks - 1, kMaxGridBlocks, kMaxGridBlocks + 1,
                                                    (std::int64_t(1) << 31) + 7, std::int64_t(3) << 30};
    if (coin(0.3)) return pick(edges);
    return log_uniform(1, (std::int64_t(1) << 31) + (std::int64_t(1) << 30));
  }

  std::int64_t cols() {
    static const std::vector<std::int64_t> edges = {
        1,     2,      7,      8,      16,     31,     32,     33,     63,     64,     65,      255,       256,
        512,   768,    1000,   1024,   1025,   2048,   4095,   4096,   4097,   8192,   8200,    12288,     16384,
        16385, 32768,  32769,  45056,  57352,  65536,  65544,  98304,  131072, 131080, 196608,  262144,    262145,
        262152, 524288, 1 << 20, (1 << 24) + 8, std::int64_t(1) << 30};
    if (coin(0.3)) return pick(edges);
    std::int64_t n = log_uniform(1, (1 << 18) + (1 << 17));
    const double r = uniform();
    if (r < 0.35) return n;                 // any N: mostly not a whole number of 16-byte vectors
    if (r < 0.7) return (n + 7) / 8 * 8;    // whole 16-byte vectors of 16-bit elements
    return (n + 127) / 128 * 128;           // whole lines
  }

 private:
  std::mt19937_64 rng_;
};

/// One generated problem (before the backward's mask loop): shape, dtypes, alignment.
Problem generate(Generator& g, Op op) {
  Problem p;
  p.op = op;
  p.dtype = g.pick(std::vector<DType>{DType::F32, DType::F16, DType::BF16});
  const std::int64_t elem = std::int64_t(dtype_size(p.dtype));
  p.rows = g.rows();
  p.cols = g.cols();
  if (p.rows == 0 && g.coin(0.3)) p.cols = 0;  // N = 0 is valid only with M = 0 (validation)
  // keep x within 2^52 bytes (validation rejects M x stride x size overflowing int64; larger x is absurd)
  const std::int64_t max_bytes = std::int64_t(1) << 52;
  if (p.cols > 0 && p.rows > max_bytes / (p.cols * elem)) p.rows = std::max<std::int64_t>(1, max_bytes / (p.cols * elem));
  // weights (forward: weight or bias; backward: weight or dweight/dbias): T, or fp32 on 16-bit x
  const bool fp32_weights = elem == 2 && g.coin(0.4);
  p.weight_dtype = fp32_weights ? DType::F32 : p.dtype;
  // rows_vector_aligned as planner_problem computes it: 16-byte aligned pointers and strides, and N a
  // whole number of 16-byte vectors (rows_aligned, src/core/problem.cpp)
  p.rows_vector_aligned = (p.cols * elem) % 16 == 0 && g.coin(0.8);
  return p;
}

struct Stats {
  std::int64_t problems = 0, plans = 0, rejected = 0;
};

/// Plans `p` for every strategy on every device and checks each plan.
void plan_and_check(const Problem& p, const std::vector<NamedDevice>& devices, const PlannerTable& table,
                    const char* table_name, Checker& ck, Stats& stats) {
  static const Strategy kStrategies[] = {Strategy::Auto, Strategy::Simple, Strategy::Tiled, Strategy::TwoPass,
                                         Strategy::Fused};
  for (const NamedDevice& device : devices) {
    for (Strategy requested : kStrategies) {
      ck.set_case(&p, &device, requested, table_name, nullptr);
      std::string why;
      const bool supported = strategy_supported(p, requested, &why, table);
      try {
        const Plan plan = normkit::plan(p, device.facts, requested, table);
        ++stats.plans;
        ck.set_case(&p, &device, requested, table_name, &plan);
        ck.expect(supported, "plan() serves only strategies strategy_supported() accepts");
        if (!is_backward(p.op)) ck.expect(requested == Strategy::Auto, "forward ops reject a forced strategy");
        check_plan(p, device.facts, requested, plan, ck);
        ck.cover(std::string(is_backward(p.op) ? "backward " : "forward ") + "plans, requested " + strategy_name(requested));
      } catch (const Error& e) {
        ++stats.rejected;
        // Forced strategies may be rejected (forward: any; fused: rows its layouts cannot hold, or
        // clusters the device lacks); auto and the unfused strategies must always serve a valid problem.
        const bool may_reject = requested == Strategy::Fused || (!is_backward(p.op) && requested != Strategy::Auto);
        if (!may_reject) ck.fail("plan() throws for a strategy it must serve", e.what());
        else ck.cover(std::string("rejected: ") + (is_backward(p.op) ? "backward " : "forward ") + strategy_name(requested));
      } catch (const std::exception& e) {
        ck.fail("plan() throws something other than normkit::Error", e.what());
      }
    }
  }
}

/// Every backward output mask: LayerNorm all 8, RMSNorm the 4 without dbias (validation rejects it).
std::vector<Mask> masks_of(Op op) {
  std::vector<Mask> out;
  for (int bits = 0; bits < 8; ++bits) {
    const Mask m{(bits & 1) != 0, (bits & 2) != 0, (bits & 4) != 0};
    if (is_rms(op) && m.dbias) continue;
    out.push_back(m);
  }
  return out;
}

/// Runs `problems_per_op` generated problems of each op through every table, device and strategy.
void run_sweep(std::uint64_t seed, int problems_per_op, const std::vector<std::pair<const char*, PlannerTable>>& tables,
               Checker& ck, Stats& stats) {
  const std::vector<NamedDevice> devices = test_devices();
  for (Op op : {Op::LayerNormForward, Op::RmsNormForward, Op::LayerNormBackward, Op::RmsNormBackward}) {
    Generator g(seed + std::uint64_t(op) * 0x9e3779b97f4a7c15ULL);
    for (int i = 0; i < problems_per_op; ++i) {
      Problem base = generate(g, op);
      // whether the call has weights at all: without any, W is the activation dtype (planner_problem)
      const bool has_weight = g.coin(0.75);
      for (const auto& [table_name, table] : tables) {
        if (!is_backward(op)) {
          Problem p = base;
          p.mask = {};
          if (!has_weight) p.weight_dtype = p.dtype;
          ++stats.problems;
          plan_and_check(p, devices, table, table_name, ck, stats);
          continue;
        }
        for (const Mask& mask : masks_of(op)) {
          Problem p = base;
          p.mask = mask;
          if (!has_weight && !mask.dweight && !(mask.dbias && !is_rms(op))) p.weight_dtype = p.dtype;
          ++stats.problems;
          plan_and_check(p, devices, table, table_name, ck, stats);
        }
      }
    }
  }
}

void expect_covered(const Checker& ck, const std::vector<std::string>& kinds) {
  for (const std::string& k : kinds)
    EXPECT_GT(ck.covered(k), 0) << "the generator no longer reaches '" << k << "': widen it, or the invariants of that path go unchecked";
}

// ---------------------------------------------------------------------------------------------
// the tests
// ---------------------------------------------------------------------------------------------

// The built-in (H200) table, 8000 generated problems per op, every mask, strategy and device.
TEST(PlanInvariants, DefaultTableRandomProblems) {
  const auto start = std::chrono::steady_clock::now();
  Checker ck;
  Stats stats;
  run_sweep(20240611, 8000, {{"default", default_planner_table()}}, ck, stats);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[plan invariants] default table: %lld problems (with masks), %lld plans, %lld rejected, %lld checks, %.2f s\n",
              static_cast<long long>(stats.problems), static_cast<long long>(stats.plans),
              static_cast<long long>(stats.rejected), static_cast<long long>(ck.checks()), seconds);
  ck.print_coverage("default table");
  ck.report();
  // every launch path the invariants describe is reached (else they would pass vacuously)
  expect_covered(ck, {"forward: short rows", "forward: block rows", "forward: block rows packed",
                      "row kernel: rms_forward_packed_kernel", "row kernel: forward_split_kernel split staged",
                      "row kernel: forward_kernel staged", "row kernel: forward_kernel streamed scalar",
                      "row kernel: backward_dx_kernel split staged", "row kernel: backward_dx_kernel streamed scalar",
                      "fused split wide deferred", "fused single-launch", "fused: direct finish", "fused: second-launch reduce",
                      "forward split LayerNorm (Chan merge)", "fused dx-only: backward_dx_kernel",
                      "two_pass vec", "two_pass", "simple", "rejected: backward fused", "rejected: forward tiled"});
  bool one_launch = false, narrow = false;
  for (TileBand band : {TileBand::Tile8, TileBand::Tile64, TileBand::Tile128, TileBand::Tile256}) {
    one_launch = one_launch || ck.covered(std::string("tiled ") + band_name(band) + " one-launch") > 0;
    narrow = narrow || ck.covered(std::string("tiled ") + band_name(band) + " narrow") > 0;
  }
  EXPECT_TRUE(one_launch) << "no one-launch tiled plan generated";
  EXPECT_TRUE(narrow) << "no narrowed tiled strips generated";
}

// The H100 SXM's built-in table (2-item rows over clusters of 16, short rows fused later, RMSNorm's
// packed forward from 4 MiB, tall strips with dX from 9 strips, or 8 up to 1024 rows), on every device of the
// sweep like the H200's.
TEST(PlanInvariants, H100SxmTableRandomProblems) {
  Checker ck;
  Stats stats;
  run_sweep(20261206, 3000, {{"h100 sxm", builtin_planner_table(BuiltinTable::H100Sxm)}}, ck, stats);
  std::printf("[plan invariants] H100 SXM table: %lld problems (with masks), %lld plans, %lld rejected, %lld checks\n",
              static_cast<long long>(stats.problems), static_cast<long long>(stats.plans),
              static_cast<long long>(stats.rejected), static_cast<long long>(ck.checks()));
  ck.report();
  EXPECT_GT(ck.covered("row kernel: rms_forward_packed_kernel"), 0);
}

// Tables that load_planner_table accepts and that turn on the paths the built-in table leaves off or
// rare: the small-problem cluster finish (fused_cluster_max_elements, which `normkit-bench --tune`
// re-measures), every split layout (forward_split_wide_min_vectors: "a key for probes and for the
// tests"), deferred 2-item rows, the blocks a row needs, the deepest stages, and single launches on
// any grid.
TEST(PlanInvariants, TunedTablesRandomProblems) {
  PlannerTable cluster_finish;
  cluster_finish.fused_cluster_max_elements = 1 << 16;
  PlannerTable split_layouts;
  split_layouts.fused_split_most_clusters = 0;
  split_layouts.fused_deferred_min_split = 2;
  split_layouts.forward_split_wide_min_vectors = 1;
  split_layouts.forward_split_min_vectors = 4097;
  PlannerTable deep_stages;
  deep_stages.row_pipeline_stages = kMaxRowStages;
  deep_stages.row_stage_bytes_per_sm = 0;
  deep_stages.fused_single_launch_min_grid_percent = 0;
  // Row slices wanted beyond gridDim.y's 65535 (two_pass_target_blocks_per_sm has no cap of its own:
  // at 1000, M = 2^23 x N = 32 wanted 131072 slices and the launch failed)
  PlannerTable many_parts;
  many_parts.two_pass_target_blocks_per_sm = 1000;
  many_parts.two_pass_min_rows_per_part = 1;
  const auto start = std::chrono::steady_clock::now();
  Checker ck;
  Stats stats;
  run_sweep(777, 1000,
            {{"fused_cluster_max_elements=65536", cluster_finish},
             {"fused_split_most_clusters=0,fused_deferred_min_split=2,forward_split_wide_min_vectors=1,"
              "forward_split_min_vectors=4097",
              split_layouts},
             {"row_pipeline_stages=8,row_stage_bytes_per_sm=0,fused_single_launch_min_grid_percent=0", deep_stages},
             {"two_pass_target_blocks_per_sm=1000,two_pass_min_rows_per_part=1", many_parts}},
            ck, stats);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[plan invariants] tuned tables: %lld problems (with masks), %lld plans, %lld rejected, %lld checks, %.2f s\n",
              static_cast<long long>(stats.problems), static_cast<long long>(stats.plans),
              static_cast<long long>(stats.rejected), static_cast<long long>(ck.checks()), seconds);
  ck.print_coverage("tuned tables");
  ck.report();
  expect_covered(ck, {"fused: cluster finish", "fused split deferred", "two_pass"});
}

// Tables a user's `normkit-bench --tune` or a hand edit could produce: every key of the format, each
// set with some chance to a value around or far from its default (0, 1, halves, doubles, up to 2^31 - 1),
// written and read back through load_planner_table (a table it refuses is skipped: its check is what
// stands between such a file and the planner). Whatever thresholds a loaded table holds, every plan must
// still be one the kernels can launch, and auto and the unfused strategies must still serve every valid
// problem.
TEST(PlanInvariants, RandomLoadedTablesRandomProblems) {
  const std::string path = ::testing::TempDir() + "normkit_random_table.txt";
  std::mt19937_64 rng(4242);
  const auto uniform = [&] { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); };
  // the keys and defaults, from the table's own text format
  std::vector<std::pair<std::string, long long>> keys;
  {
    std::istringstream in(format_planner_table(default_planner_table()));
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const auto eq = line.find(" = ");
      keys.emplace_back(line.substr(0, eq), std::stoll(line.substr(eq + 3)));
    }
  }
  ASSERT_GT(keys.size(), 50u);
  const auto random_value = [&](long long d) -> long long {
    const double r = uniform();
    if (r < 0.15) return 0;
    if (r < 0.3) return 1;
    if (r < 0.45) return d / 2;
    if (r < 0.6) return d * 2 + 1;
    if (r < 0.7) return 0x7fffffffLL;
    if (r < 0.85) return 1LL << int(uniform() * 31);
    return d;
  };
  Checker ck;
  Stats stats;
  int loaded = 0, refused = 0;  // single key changes the loader took / refused
  const auto start = std::chrono::steady_clock::now();
  for (int table_index = 0; table_index < 60; ++table_index) {
    // key by key: a change the loader refuses is taken back (else nearly every table has one)
    std::vector<long long> values;
    for (const auto& key : keys) values.push_back(key.second);
    const auto text_of = [&] {
      std::string text;
      for (std::size_t k = 0; k < keys.size(); ++k) text += keys[k].first + " = " + std::to_string(values[k]) + "\n";
      return text;
    };
    PlannerTable table = default_planner_table();
    for (std::size_t k = 0; k < keys.size(); ++k) {
      if (uniform() >= 0.3) continue;
      const long long before = values[k];
      values[k] = random_value(before);
      { std::ofstream(path) << text_of(); }
      try {
        table = load_planner_table(path);
        ++loaded;
      } catch (const Error&) {
        ++refused;
        values[k] = before;
      }
    }
    const std::string text = text_of();
    { std::ofstream(path) << text; }
    table = load_planner_table(path);
    const std::string name = "random table " + std::to_string(table_index);
    run_sweep(1000 + std::uint64_t(table_index), 60, {{name.c_str(), table}}, ck, stats);
    if (ck.failed()) {  // the table that broke an invariant, for the reproducer
      ADD_FAILURE() << name << ":\n" << text;
      break;
    }
  }
  std::remove(path.c_str());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[plan invariants] random tables: %d changed keys loaded, %d refused; %lld plans, %lld rejected, %.2f s\n",
              loaded, refused, static_cast<long long>(stats.plans), static_cast<long long>(stats.rejected), seconds);
  ck.report();
  EXPECT_GE(loaded, 60 * 10) << "the tables should change many keys each";
}

}  // namespace
}  // namespace normkit
