// normkit-bench's shared pieces (app.h).
#include "app.h"

#include <exception>
#include <iostream>
#include <set>
#include <sstream>

namespace nkbench {

std::string modes_name(const std::vector<TimingMode>& modes) {
  std::string s;
  for (auto m : modes) s += std::string(s.empty() ? "" : "+") + (m == TimingMode::Events ? "events" : "graph");
  return s;
}

std::string planner_table_changes(const normkit::DeviceFacts& device) {
  // The key = value lines of the table in use (in the table's order) that the device's built-in table lacks.
  const auto lines = [](const normkit::PlannerTable& t) {
    std::vector<std::string> out;
    std::istringstream in(normkit::format_planner_table(t));
    for (std::string line; std::getline(in, line);)
      if (!line.empty() && line[0] != '#') out.push_back(line);
    return out;
  };
  const std::vector<std::string> built_in_lines = lines(normkit::builtin_planner_table(device.builtin_table));
  const std::set<std::string> built_in(built_in_lines.begin(), built_in_lines.end());
  std::string changes;
  for (const std::string& line : lines(normkit::default_planner_table(device)))
    if (built_in.count(line) == 0) changes += (changes.empty() ? "" : ", ") + line;
  return changes;
}

std::string planner_table_note(const normkit::DeviceFacts& device) {
  const std::string source = normkit::planner_table_source(device);
  // a built-in table is the device's own: its name says everything (no file was loaded)
  if (&normkit::default_planner_table(device) == &normkit::builtin_planner_table(device.builtin_table)) return source;
  const std::string changes = planner_table_changes(device);
  return source + " (" + (changes.empty() ? "the built-in values" : changes) + ")";
}

Record meta_record(const Context& ctx, const std::string& what) {
  Record m = {{"tool", "normkit-bench"},
              {"what", what},
              {"commit", ctx.commit},
              {"date", ctx.date},
              {"device", ctx.backend->device_name()},
              {"device_description", ctx.backend->description()},
              {"backend", ctx.cpu() ? "cpu" : "cuda"},
              {"normkit_built_with_cuda", normkit::built_with_cuda()},
              {"copy_bandwidth_GBps", ctx.copy_bw / 1e9},
              {"copy_bytes", ctx.copy_bytes},
              {"l2_bytes", ctx.backend->l2_bytes()},
              {"modes", modes_name(ctx.modes)},
              {"warmup", ctx.params.warmup},
              {"iters", ctx.params.iters},
              {"runs", ctx.params.runs},
              {"budget_s_per_measurement", ctx.params.budget_s},
              {"strategies_interleaved", ctx.params.interleave},
              {"rotation_l2_factor", ctx.rotation.l2_factor},
              {"rotation_max_sets", ctx.rotation.max_sets},
              {"planner_table", normkit::planner_table_source(ctx.backend->planner_facts())},
              {"planner_table_changes", planner_table_changes(ctx.backend->planner_facts())}};
  if (!ctx.why_cpu.empty()) m.push_back({"note", ctx.why_cpu});
  return m;
}

std::string header_lines(const Context& ctx, const std::string& title, TimingMode mode) {
  std::ostringstream os;
  os << "## " << title << "\n\n";
  os << "- commit: " << ctx.commit << "\n";
  os << "- date: " << ctx.date << "\n";
  os << "- GPU: " << ctx.backend->description() << "\n";
  os << "- planner table: " << planner_table_note(ctx.backend->planner_facts()) << "\n";
  if (!ctx.why_cpu.empty()) {
    os << "- note: " << ctx.why_cpu << "\n";
    os << "- note: normkit's CPU path is its float64 reference: a forced strategy is validated but computes the "
          "same thing, so strategy columns differ only by noise; the planner columns show what the H200 defaults "
          "would choose\n";
  }
  os << "- mode: " << (ctx.cpu() ? "host clock around back-to-back calls (CPU reference path)" : timing_mode_name(mode))
     << "\n";
  os << "- copy bandwidth: " << fmt(ctx.copy_bw / 1e12, 3) << " TB/s (" << (ctx.cpu() ? "memcpy" : "cudaMemcpyAsync D2D")
     << " of " << fmt_bytes(double(ctx.copy_bytes)) << ", bytes read + written, best of several)\n";
  os << "- warm-up " << ctx.params.warmup << " | iters " << ctx.params.iters << " | runs averaged " << ctx.params.runs;
  if (mode == TimingMode::Graph) os << " | graph: the iters calls (rounded up to whole rotations) captured once, one untimed replay, each run = one timed replay";
  os << " | inputs rotate over buffer sets until > " << fmt(ctx.rotation.l2_factor, 0) << "x L2\n";
  os << "- strategies of a case: "
     << (ctx.params.interleave ? "measured side by side (each made ready, then one run of each in turn, run by run)"
                               : "measured one after another (--sequential)")
     << "\n\n";
  return os.str();
}

double us(const Timing& t) { return t.ok ? t.mean_us : kNaN; }
std::string cell(const Timing& t) {
  if (t.ok) return fmt(t.mean_us);
  return t.unsupported ? "n/a" : "error";
}

Record timing_record(const Context& ctx, const std::string& suite, const std::string& name, const Setup& s, OpKind op,
                     Strategy strategy, TimingMode mode, const Timing& t) {
  const double bytes = floor_bytes(op, s.rows(), s.cols(), s.dtype(), s.wdtype());
  const double floor_us = bytes / ctx.copy_bw * 1e6;
  Record r = {{"suite", suite},
              {"case", name},
              {"op", op_kind_name(op)},
              {"M", s.rows()},
              {"N", s.cols()},
              {"dtype", short_dtype_name(s.dtype())},
              {"wdtype", short_dtype_name(s.wdtype())},
              {"strategy", normkit::strategy_name(strategy)},
              {"mode", mode == TimingMode::Events ? (ctx.cpu() ? "host" : "events") : "graph"},
              {"ok", t.ok},
              {"unsupported", t.unsupported},
              {"time_us", t.ok ? Value(t.mean_us) : Value::null()},
              {"median_us", t.ok ? Value(t.median_us) : Value::null()},
              {"min_us", t.ok ? Value(t.min_us) : Value::null()},
              {"warmup", t.warmup},
              {"iters", t.iters},
              {"runs", t.runs},
              {"calls_per_graph", t.calls_per_graph},
              {"sets", s.sets()},
              {"plan", t.plan},
              {"wall_start_ms", t.ok ? Value(t.wall_start_ms) : Value::null()},
              {"wall_end_ms", t.ok ? Value(t.wall_end_ms) : Value::null()},
              {"floor_bytes", bytes},
              {"floor_us", floor_us},
              {"GBps", t.ok ? Value(bytes / (t.mean_us * 1e-6) / 1e9) : Value::null()},
              {"pct_floor", t.ok ? Value(100.0 * floor_us / t.mean_us) : Value::null()}};
  if (!t.ok) r.push_back({"error", t.error});
  return r;
}

void note_failure(Context& ctx, const std::string& what, const Timing& t) {
  if (t.ok || t.unsupported) return;
  ++ctx.errors;
  std::cerr << "normkit-bench: " << what << ": " << t.error << "\n";
}

std::unique_ptr<Setup> make_setup(Context& ctx, bool rms, std::int64_t m, std::int64_t n, DType dtype, std::string* why,
                                  std::optional<DType> weight) {
  try {
    return Setup::create(*ctx.backend, rms, m, n, dtype, weight ? *weight : ctx.weight_dtype(dtype), ctx.rotation, why);
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
}

bool cpu_too_big(const Context& ctx, std::int64_t m, std::int64_t n, std::string* why) {
  if (!ctx.cpu() || m * n <= ctx.cpu_max_elements) return false;
  *why = "skipped on the CPU path: M*N = " + std::to_string(m * n) + " > --cpu-max-elements " +
         std::to_string(ctx.cpu_max_elements);
  return true;
}


void write_outputs(const Outputs& out, const Record& meta, const std::vector<Record>& records,
                   const std::vector<std::pair<std::string, std::vector<Record>>>& tables, const std::string& md) {
  if (!out.json.empty()) {
    std::vector<std::pair<std::string, std::vector<Record>>> arrays = {{"records", records}};
    for (const auto& t : tables) arrays.push_back(t);
    write_file(out.json, json_document(meta, arrays));
    std::cerr << "normkit-bench: wrote " << out.json << "\n";
  }
  if (!out.csv.empty()) {
    write_file(out.csv, csv_document(records));
    std::cerr << "normkit-bench: wrote " << out.csv << "\n";
  }
  if (!out.md.empty()) {
    write_file(out.md, md);
    std::cerr << "normkit-bench: wrote " << out.md << "\n";
  }
}

std::vector<Record> table_records(const Table& t) {
  std::vector<Record> out;
  for (const auto& row : t.rows) {
    Record r;
    for (std::size_t i = 0; i < row.size() && i < t.header.size(); ++i) r.push_back({t.header[i], row[i]});
    out.push_back(r);
  }
  return out;
}

const std::vector<ShapeCase>& llm_shapes() {
  static const std::vector<ShapeCase> shapes = {
      {"llm_131072x4096", 131072, 4096}, {"llama_16384x8192", 16384, 8192}, {"wide_2048x65536", 2048, 65536},
      {"gpt2_8192x768", 8192, 768},      {"odd_8192x1000", 8192, 1000},     {"huge_m_131072x64", 131072, 64},
      {"wide_4096x262144", 4096, 262144},
      // autocast: fp32 weights on the 16-bit rows (docs/NOTES.md entry 84: the wide rows' 32-byte weight
      // slots at 54-58 % of the floor)
      {"autocast_131072x4096_w32", 131072, 4096, DType::F32},
      {"autocast_16384x8192_w32", 16384, 8192, DType::F32},
      {"autocast_wide_4096x262144_w32", 4096, 262144, DType::F32},
  };
  return shapes;
}

}  // namespace nkbench
