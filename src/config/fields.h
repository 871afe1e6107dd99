// The one table of config keys: each entry binds a key path ("model.attention.type") to its
// struct member, type, allowed range or choices and one-line meaning. Parsing, --set overrides,
// range checks, to_yaml() and key_paths() all walk this table, so a key is declared only here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "config/config.h"

namespace combiner::config {

enum class FieldType { kInt, kFloat, kBool, kString };
using Value = std::variant<int64_t, double, bool, std::string>;

// "an integer", "a float", "a bool", "a string": for "expected ..." messages.
const char* type_description(FieldType type);

struct Bound {
  double value = 0;
  bool inclusive = true;
};

struct Field {
  std::string path;  // dotted key path, e.g. "train.lr"
  FieldType type = FieldType::kInt;
  std::string meaning;  // one line, shown as a comment by to_yaml()
  std::optional<Bound> min;
  std::optional<Bound> max;
  const std::vector<std::string>& (*choices)() = nullptr;  // allowed strings; null = any
  bool non_empty = false;                                  // strings only
  // Strings only: a YAML bool (true/false, yes/no, on/off) is read as "true" or "false", and
  // those two are written back unquoted, so the key reads as the bool it extends.
  bool bool_spellings = false;
  std::function<Value(const Config&)> get;
  std::function<void(Config&, const Value&)> set;

  // Chained setters used to write the table.
  Field& at_least(double v) { return min = Bound{v, true}, *this; }
  Field& above(double v) { return min = Bound{v, false}, *this; }
  Field& at_most(double v) { return max = Bound{v, true}, *this; }
  Field& below(double v) { return max = Bound{v, false}, *this; }
  Field& one_of(const std::vector<std::string>& (*names)()) { return choices = names, *this; }
  Field& required() { return non_empty = true, *this; }
  Field& or_bool() { return bool_spellings = true, *this; }
};

// Every field, in file order; the fields of a section are contiguous.
const std::vector<Field>& fields();

// The field whose path is exactly `path`, or nullptr.
const Field* find_field(const std::string& path);

// True if `path` is "" (the root) or a section such as "model" or "model.attention".
bool is_section(const std::string& path);

// The direct children of a section, in file order: {"data", "model", "train"} for "".
std::vector<std::string> section_keys(const std::string& section);

// The field's range as its messages write it ("> 0", "in [0, 1)"), or "" when it has none.
std::string range_description(const Field& field);

// Throws std::invalid_argument "<path>: must be ..., got ..." if the value breaks the field's
// range, choices or non-empty rule.
void check_field(const Field& field, const Config& config);

}  // namespace combiner::config
