// normkit-bench: output. Records (ordered key -> value) feed JSON and CSV; Table renders markdown.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace nkbench {

/// A JSON/CSV value: string, number, integer, boolean or null.
struct Value {
  enum class Kind { Null, Str, Num, Int, Bool } kind = Kind::Null;
  std::string s;
  double d = 0;
  std::int64_t i = 0;
  bool b = false;
  Value() = default;
  Value(const char* v) : kind(Kind::Str), s(v) {}
  Value(std::string v) : kind(Kind::Str), s(std::move(v)) {}
  Value(double v) : kind(Kind::Num), d(v) {}
  Value(int v) : kind(Kind::Int), i(v) {}
  Value(std::int64_t v) : kind(Kind::Int), i(v) {}
  Value(std::size_t v) : kind(Kind::Int), i(std::int64_t(v)) {}
  Value(bool v) : kind(Kind::Bool), b(v) {}
  static Value null() { return {}; }
};

using Record = std::vector<std::pair<std::string, Value>>;

std::string json_escape(const std::string& s);
std::string json_value(const Value& v);
std::string json_object(const Record& r, int indent = 0);
/// {"meta": {...}, "<key>": [records...]} (extra named arrays allowed).
std::string json_document(const Record& meta, const std::vector<std::pair<std::string, std::vector<Record>>>& arrays);
/// Header = union of keys in first-seen order.
std::string csv_document(const std::vector<Record>& records);

void write_file(const std::string& path, const std::string& text);  // throws std::runtime_error

/// A markdown table.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::string markdown() const;
};

/// Number formatting helpers ("n/a" for NaN).
std::string fmt(double v, int decimals = 2);
std::string fmt_bytes(double bytes);  // "4.19 MB"
std::string shell_output(const std::string& command);  // trimmed stdout, "" on failure
std::string utc_now();  // "2026-12-01 12:34:56 UTC"

}  // namespace nkbench
