#include "report.h"

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace nkbench {

std::string json_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += char(c);
        }
    }
  }
  return out;
}

std::string json_value(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Null: return "null";
    case Value::Kind::Str: return "\"" + json_escape(v.s) + "\"";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Bool: return v.b ? "true" : "false";
    case Value::Kind::Num: {
      if (!std::isfinite(v.d)) return "null";
      std::ostringstream os;
      os << std::setprecision(9) << v.d;
      return os.str();
    }
  }
  return "null";
}

std::string json_object(const Record& r, int indent) {
  const std::string pad(std::size_t(indent), ' ');
  std::string out = "{";
  bool first = true;
  for (const auto& kv : r) {
    out += first ? "" : ", ";
    first = false;
    out += "\"" + json_escape(kv.first) + "\": " + json_value(kv.second);
  }
  return pad + out + "}";
}

std::string json_document(const Record& meta, const std::vector<std::pair<std::string, std::vector<Record>>>& arrays) {
  std::string out = "{\n  \"meta\": " + json_object(meta);
  for (const auto& arr : arrays) {
    out += ",\n  \"" + json_escape(arr.first) + "\": [";
    for (std::size_t i = 0; i < arr.second.size(); ++i) {
      out += (i ? ",\n" : "\n") + json_object(arr.second[i], 4);
    }
    out += arr.second.empty() ? "]" : "\n  ]";
  }
  return out + "\n}\n";
}

namespace {
std::string csv_field(const Value& v) {
  if (v.kind == Value::Kind::Null) return "";
  if (v.kind != Value::Kind::Str) return json_value(v) == "null" ? "" : json_value(v);
  if (v.s.find_first_of(",\"\n") == std::string::npos) return v.s;
  std::string q = "\"";
  for (char c : v.s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}
}  // namespace

std::string csv_document(const std::vector<Record>& records) {
  std::vector<std::string> keys;
  std::map<std::string, std::size_t> index;
  for (const auto& r : records)
    for (const auto& kv : r)
      if (index.emplace(kv.first, keys.size()).second) keys.push_back(kv.first);
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) out += (i ? "," : "") + keys[i];
  out += "\n";
  for (const auto& r : records) {
    std::vector<std::string> cells(keys.size());
    for (const auto& kv : r) cells[index[kv.first]] = csv_field(kv.second);
    for (std::size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + cells[i];
    out += "\n";
  }
  return out;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open '" + path + "' for writing");
  f << text;
  if (!f) throw std::runtime_error("cannot write '" + path + "'");
}

std::string Table::markdown() const {
  std::string out = "|";
  for (const auto& h : header) out += " " + h + " |";
  out += "\n|";
  for (std::size_t i = 0; i < header.size(); ++i) out += "---|";
  out += "\n";
  for (const auto& r : rows) {
    out += "|";
    for (const auto& c : r) out += " " + c + " |";
    out += "\n";
  }
  return out;
}

std::string fmt(double v, int decimals) {
  if (!std::isfinite(v)) return "n/a";
  std::ostringstream os;
  os << std::fixed << std::setprecision(decimals) << v;
  return os.str();
}

std::string fmt_bytes(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000.0 && u < 4) {
    bytes /= 1000.0;
    ++u;
  }
  return fmt(bytes, u == 0 ? 0 : 2) + " " + units[u];
}

std::string shell_output(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return "";
  std::string out;
  char buf[256];
  while (std::fgets(buf, sizeof buf, pipe.get())) out += buf;
  const int status = pclose(pipe.release());
  if (status != 0) return "";
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace nkbench
