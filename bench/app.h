// normkit-bench's shared pieces: the run-wide context, the records and reports every mode writes, and the
// LLM shapes (the llm suite's, and the tuner's step 2). The modes: main.cpp (suites, sweep, the CLI) and
// tune.cpp (--tune).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "backend.h"
#include "harness.h"
#include "normkit/normkit.h"
#include "report.h"

namespace nkbench {

using normkit::DType;
using normkit::Strategy;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Run-wide context
struct Context {
  Backend* backend = nullptr;
  std::string why_cpu;  // non-empty on the CPU path
  double copy_bw = 0;   // bytes/s, read + write
  std::size_t copy_bytes = 0;
  std::string commit, date;
  TimingParams params;
  std::vector<TimingMode> modes;
  RotationPolicy rotation;
  std::optional<DType> wdtype;  // weight dtype override (default: the activation dtype)
  double tie = 0.05;
  std::int64_t cpu_max_elements = 1 << 22;
  int errors = 0;  // measurements that failed for a reason other than an unsupported strategy

  bool cpu() const { return backend->device() == normkit::Device::Cpu; }
  DType weight_dtype(DType dtype) const { return wdtype ? *wdtype : dtype; }
};

struct Outputs {
  std::string json, csv, md;
};

std::string modes_name(const std::vector<TimingMode>& modes);
// Which planner table a run's plans come from on a device is normkit::planner_table_source: "built-in
// (H200)", "built-in (H100 SXM)" or the file NORMKIT_PLANNER_TABLE names. Results measured under another
// table are not the built-in planner's, and their reports must say so.
/// The loaded table's values that differ from the device's built-in ones ("key = value, ..."; empty for none).
std::string planner_table_changes(const normkit::DeviceFacts& device);
/// The two for a report line: "built-in (GPU)", or "FILE (key = value, ...)".
std::string planner_table_note(const normkit::DeviceFacts& device);
/// The JSON's meta record of a run (`what`: the mode).
Record meta_record(const Context& ctx, const std::string& what);
/// The markdown report's heading and method lines.
std::string header_lines(const Context& ctx, const std::string& title, TimingMode mode);
/// µs (NaN when the measurement did not succeed).
double us(const Timing& t);
/// A table cell: the time, "n/a" (unsupported) or "error".
std::string cell(const Timing& t);
/// One measurement as a JSON / CSV record, with its byte floor.
Record timing_record(const Context& ctx, const std::string& suite, const std::string& name, const Setup& s, OpKind op,
                     Strategy strategy, TimingMode mode, const Timing& t);
/// Counts and prints a measurement that failed for a reason other than an unsupported strategy.
void note_failure(Context& ctx, const std::string& what, const Timing& t);
/// `weight` overrides the weight dtype (a suite case's own; else --wdtype or the activation dtype).
std::unique_ptr<Setup> make_setup(Context& ctx, bool rms, std::int64_t m, std::int64_t n, DType dtype, std::string* why,
                                  std::optional<DType> weight = std::nullopt);
/// Whether the CPU path skips an M x N shape (--cpu-max-elements); `why` says so.
bool cpu_too_big(const Context& ctx, std::int64_t m, std::int64_t n, std::string* why);
void write_outputs(const Outputs& out, const Record& meta, const std::vector<Record>& records,
                   const std::vector<std::pair<std::string, std::vector<Record>>>& tables, const std::string& md);
std::vector<Record> table_records(const Table& t);

struct ShapeCase {
  std::string name;
  std::int64_t rows, cols;
  /// fp32 weights on 16-bit rows (torch.autocast's case: bf16 activations, the module's fp32 weights); the
  /// case is left out for fp32 rows (the plain case already) and where --wdtype sets the weights for all.
  std::optional<DType> weight = std::nullopt;
};

/// The llm suite's shapes.
const std::vector<ShapeCase>& llm_shapes();

/// --tune FILE (tune.cpp): re-measures the planner's crossovers on this GPU and writes a PlannerTable.
int run_tune(Context& ctx, const Outputs& out, const std::string& path, DType dtype,
             const std::vector<std::int64_t>& tune_n, double max_cell_bytes);

}  // namespace nkbench
