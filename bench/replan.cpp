// normkit-replan: what the current planner would pick on a measured sweep.
//
//   normkit-replan SWEEP.csv [--table FILE] [--top K]
//
// A sweep (normkit-bench --sweep --csv) times every forced strategy and auto at each (op, M, N,
// dtype). auto runs exactly the plan of the strategy it picks (plan() resolves Auto first and then
// builds the same plan as when that strategy is forced), so the time of a planner change on a cell
// is the measured forced time of its new choice -- as long as the plan of that strategy (its launch
// shape) is the one the sweep timed: the last column shows this planner's full plan, so a cell whose
// shape changed (e.g. scalar instead of vectorised column strips) can be told apart. This tool re-plans every cell with the planner
// built into it (or a --table), and reports auto / best forced over the sweep from those forced
// times: a way to evaluate planner rules against measurements without a GPU. It is a derivation
// from the sweep, not a measurement of auto, and says so in its output; the sweep's own auto column
// is shown next to it.
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "harness.h"
#include "normkit/plan.h"

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string field;
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) { out.push_back(field); field.clear(); }
    else field += c;
  }
  out.push_back(field);
  return out;
}

/// The backward problem of a sweep op on the bench's buffers: contiguous rows from aligned
/// allocations, so vectorised exactly when N * size is. Forward ops: false (nothing to re-plan).
bool problem_of(const std::string& op, std::int64_t m, std::int64_t n, const std::string& dtype,
                const std::string& wdtype, normkit::Problem& p) {
  const nkbench::OpKind kind = nkbench::parse_op_kind(op);
  if (nkbench::op_is_forward(kind)) return false;
  p.op = nkbench::planner_op(kind);
  p.mask = nkbench::op_mask(kind);
  p.rows = m;
  p.cols = n;
  p.dtype = nkbench::parse_dtype(dtype);
  p.weight_dtype = nkbench::parse_dtype(wdtype);
  p.rows_vector_aligned = (n * std::int64_t(normkit::dtype_size(p.dtype))) % 16 == 0;
  return true;
}

struct Cell {
  std::map<std::string, double> forced;  // strategy -> us
  double recorded_auto = 0;
  std::string recorded_plan;
};

}  // namespace

int main(int argc, char** argv) {
  std::string csv, table_path;
  int top = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--table" && i + 1 < argc) table_path = argv[++i];
    else if (a == "--top" && i + 1 < argc) top = std::max(1, std::atoi(argv[++i]));
    else if (a == "-h" || a == "--help") {
      std::cout << "usage: normkit-replan SWEEP.csv [--table FILE] [--top K]\n";
      return 0;
    } else if (csv.empty()) csv = a;
    else { std::cerr << "normkit-replan: unexpected argument '" << a << "'\n"; return 2; }
  }
  if (csv.empty()) { std::cerr << "usage: normkit-replan SWEEP.csv [--table FILE] [--top K]\n"; return 2; }
  std::ifstream in(csv);
  if (!in) { std::cerr << "normkit-replan: cannot open '" << csv << "'\n"; return 2; }
  normkit::PlannerTable table;
  try {
    table = table_path.empty() ? normkit::PlannerTable{} : normkit::load_planner_table(table_path);
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }

  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv_line(line);
  std::map<std::string, std::size_t> col;
  for (std::size_t i = 0; i < header.size(); ++i) col[header[i]] = i;
  for (const char* need : {"op", "M", "N", "dtype", "wdtype", "strategy", "mode", "ok", "time_us", "plan"})
    if (!col.count(need)) { std::cerr << "normkit-replan: '" << csv << "' has no column '" << need << "'\n"; return 2; }

  using Key = std::tuple<std::string, std::string, std::string, std::string, std::int64_t, std::int64_t>;
  std::map<Key, Cell> cells;
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() < header.size()) { std::cerr << "normkit-replan: line " << line_no << " is short\n"; return 2; }
    if (f[col["ok"]] != "true") continue;
    const Key key{f[col["op"]], f[col["dtype"]], f[col["wdtype"]], f[col["mode"]], std::stoll(f[col["M"]]),
                  std::stoll(f[col["N"]])};
    const double us = std::stod(f[col["time_us"]]);
    Cell& c = cells[key];
    if (f[col["strategy"]] == "auto") {
      c.recorded_auto = us;
      c.recorded_plan = f[col["plan"]];
    } else {
      c.forced[f[col["strategy"]]] = us;
    }
  }

  struct Row {
    double ratio, recorded_ratio;
    std::string cell, choice, plan, best, recorded_plan;
    double us, best_us;
  };
  std::vector<Row> rows;
  const normkit::DeviceFacts device = normkit::DeviceFacts::h200();
  for (const auto& [key, c] : cells) {
    const auto& [op, dtype, wdtype, mode, m, n] = key;
    normkit::Problem p;
    try {
      if (c.forced.empty() || !problem_of(op, m, n, dtype, wdtype, p)) continue;
    } catch (const std::invalid_argument& e) {
      std::cerr << "normkit-replan: " << csv << ": " << e.what() << "\n";
      return 2;
    }
    const normkit::Plan planned = normkit::plan(p, device, normkit::Strategy::Auto, table);
    const std::string choice = normkit::strategy_name(planned.strategy);
    const auto chosen = c.forced.find(choice);
    if (chosen == c.forced.end()) {
      std::cerr << "normkit-replan: " << op << " " << m << "x" << n << ": the planner picks " << choice
                << ", which the sweep did not time\n";
      return 1;
    }
    const auto best = std::min_element(c.forced.begin(), c.forced.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
    std::ostringstream name;
    name << op << " " << dtype << " " << mode << " M=" << m << " N=" << n;
    rows.push_back({chosen->second / best->second, c.recorded_auto > 0 ? c.recorded_auto / best->second : 0,
                    name.str(), choice, planned.describe(), best->first, c.recorded_plan, chosen->second, best->second});
  }
  if (rows.empty()) { std::cerr << "normkit-replan: no backward cells with forced strategies in '" << csv << "'\n"; return 1; }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ratio > b.ratio; });
  const auto within = std::count_if(rows.begin(), rows.end(), [](const Row& r) { return r.ratio <= 1.03; });
  const auto changed = std::count_if(rows.begin(), rows.end(), [](const Row& r) {
    return r.recorded_plan.rfind(r.choice, 0) != 0;  // plan text starts with the strategy name
  });
  std::cout << "# normkit-replan: " << csv << (table_path.empty() ? "" : " with table " + table_path) << "\n\n"
            << "Derived, not measured: each cell's auto time is the sweep's forced time of the strategy this "
               "planner picks (auto runs that same plan). The sweep's own auto column is shown beside it.\n\n"
            << "- cells: " << rows.size() << " | auto within 3% of the best forced: " << within
            << " | planner choice differs from the sweep's auto: " << changed << "\n\n"
            << "| rank | cell | replanned auto / best | planner choice | µs | best forced | best µs | sweep's auto / best | sweep's auto plan | this planner's plan |\n"
            << "|---|---|---|---|---|---|---|---|---|---|\n"
            << std::fixed;
  for (int i = 0; i < top && i < int(rows.size()); ++i) {
    const Row& r = rows[i];
    std::cout << "| " << i + 1 << " | " << r.cell << " | " << std::setprecision(3) << r.ratio << " | " << r.choice
              << " | " << std::setprecision(2) << r.us << " | " << r.best << " | " << r.best_us << " | "
              << std::setprecision(3) << r.recorded_ratio << " | " << r.recorded_plan << " | " << r.plan << " |\n";
  }
  return 0;
}
