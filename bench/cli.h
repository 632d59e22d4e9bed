// normkit-bench: a small command-line parser (CLI11 is not available on the build or GPU machines).
// Options are declared with a help line; "--name value", "--name=value" and flags are accepted;
// an unknown option or a missing value is an error that prints the usage.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace nkbench {

class Cli {
 public:
  explicit Cli(std::string program) : program_(std::move(program)) {}

  void flag(const std::string& name, const std::string& help) { add(name, "", help, false); }
  void option(const std::string& name, const std::string& meta, const std::string& help) { add(name, meta, help, true); }

  /// Throws std::invalid_argument with a message naming the offending argument.
  void parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument '" + arg + "'");
      std::string name = arg.substr(2), value;
      bool has_value = false;
      const auto eq = name.find('=');
      if (eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      const auto it = specs_.find(name);
      if (it == specs_.end()) throw std::invalid_argument("unknown option '--" + name + "'");
      if (it->second.takes_value) {
        if (!has_value) {
          if (i + 1 >= argc) throw std::invalid_argument("option '--" + name + "' needs a value");
          value = argv[++i];
        }
        values_[name] = value;
      } else {
        if (has_value) throw std::invalid_argument("option '--" + name + "' takes no value");
        values_[name] = "1";
      }
    }
  }

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::string str(const std::string& name, const std::string& fallback = "") const {
    const auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }
  std::int64_t integer(const std::string& name, std::int64_t fallback) const {
    return has(name) ? parse_int(str(name), name) : fallback;
  }
  double number(const std::string& name, double fallback) const {
    if (!has(name)) return fallback;
    try {
      std::size_t used = 0;
      const double v = std::stod(str(name), &used);
      if (used != str(name).size()) throw std::invalid_argument("");
      return v;
    } catch (const std::exception&) {
      throw std::invalid_argument("option '--" + name + "': '" + str(name) + "' is not a number");
    }
  }
  /// Comma-separated list ("a,b,c"); empty when absent.
  std::vector<std::string> list(const std::string& name) const {
    std::vector<std::string> out;
    if (!has(name)) return out;
    std::string cur;
    for (char c : str(name) + ",") {
      if (c == ',') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else if (c != ' ') {
        cur += c;
      }
    }
    return out;
  }
  std::vector<std::int64_t> int_list(const std::string& name) const {
    std::vector<std::int64_t> out;
    for (const auto& s : list(name)) out.push_back(parse_int(s, name));
    return out;
  }

  /// Integers: decimal, "2^k", or with a K/M/G suffix (powers of 1024).
  static std::int64_t parse_int(const std::string& s, const std::string& name) {
    try {
      const auto caret = s.find('^');
      if (caret != std::string::npos) {
        const std::int64_t base = std::stoll(s.substr(0, caret));
        const std::int64_t exp = std::stoll(s.substr(caret + 1));
        std::int64_t v = 1;
        for (std::int64_t k = 0; k < exp; ++k) v *= base;
        return v;
      }
      std::size_t used = 0;
      std::int64_t v = std::stoll(s, &used);
      const std::string rest = s.substr(used);
      if (rest == "K" || rest == "k") v <<= 10;
      else if (rest == "M" || rest == "m") v <<= 20;
      else if (rest == "G" || rest == "g") v <<= 30;
      else if (!rest.empty()) throw std::invalid_argument("");
      return v;
    } catch (const std::exception&) {
      throw std::invalid_argument("option '--" + name + "': '" + s + "' is not an integer");
    }
  }

  std::string usage() const {
    std::string out = "usage: " + program_ + " [options]\n";
    for (const auto& name : order_) {
      const Spec& s = specs_.at(name);
      std::string left = "  --" + name + (s.takes_value ? " " + s.meta : "");
      if (left.size() < 30) left += std::string(30 - left.size(), ' ');
      else left += "\n" + std::string(30, ' ');
      out += left + s.help + "\n";
    }
    return out;
  }

 private:
  struct Spec {
    std::string meta, help;
    bool takes_value = false;
  };
  void add(const std::string& name, const std::string& meta, const std::string& help, bool takes_value) {
    specs_[name] = Spec{meta, help, takes_value};
    order_.push_back(name);
  }
  std::string program_;
  std::map<std::string, Spec> specs_;
  std::vector<std::string> order_;
  std::map<std::string, std::string> values_;
};

}  // namespace nkbench
