// YAML scalar <-> typed value conversion. std::from_chars/to_chars keep number parsing and
// printing independent of the C locale; booleans follow yaml-cpp (true/false, yes/no, on/off).
#include "config/scalar.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <system_error>

namespace combiner::config {
namespace {

// Quoted scalars and explicit !!str tags are strings, never numbers or booleans.
bool is_string_scalar(const YAML::Node& node) {
  return node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str";
}

std::optional<int64_t> to_int(const std::string& text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (begin != end && *begin == '+') ++begin;
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (begin == end || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

bool float_chars_only(const std::string& text) {
  for (char c : text)
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return false;
  return !text.empty();
}

std::optional<double> to_float(const std::string& text) {
  if (!float_chars_only(text)) return std::nullopt;
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (*begin == '+') ++begin;
  double value = 0;
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (begin == end || ec != std::errc() || ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

std::string describe_node(const YAML::Node& node) {
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a sequence";
  if (!node.IsDefined() || node.IsNull()) return "null (no value)";
  return "'" + node.Scalar() + "'";
}

Value parse_scalar(const YAML::Node& node, const Field& field) {
  const std::string expected = type_description(field.type);
  auto fail = [&](const std::string& extra) {
    return std::invalid_argument(field.path + ": expected " + expected + ", got " +
                                 describe_node(node) + extra);
  };
  if (!node.IsScalar()) throw fail("");
  const std::string& text = node.Scalar();
  if (field.type == FieldType::kString) {
    bool v = false;
    if (field.bool_spellings && !is_string_scalar(node) && YAML::convert<bool>::decode(node, v))
      return std::string(v ? "true" : "false");
    return text;
  }
  if (is_string_scalar(node)) throw fail(" (a quoted string)");
  switch (field.type) {
    case FieldType::kInt:
      if (auto v = to_int(text)) return *v;
      throw fail("");
    case FieldType::kFloat:
      if (auto v = to_float(text)) return *v;
      throw fail("");
    case FieldType::kBool: {
      bool v = false;
      if (YAML::convert<bool>::decode(node, v)) return v;
      throw fail("");
    }
    case FieldType::kString:
      break;
  }
  throw fail("");
}

std::string format_double(double value) {
  char buffer[64];
  auto [ptr, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, ec == std::errc() ? ptr : buffer);
  if (std::isfinite(value) && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string format_value(const Value& value) {
  if (auto v = std::get_if<int64_t>(&value)) return std::to_string(*v);
  if (auto v = std::get_if<double>(&value)) return format_double(*v);
  if (auto v = std::get_if<bool>(&value)) return *v ? "true" : "false";
  return "'" + std::get<std::string>(value) + "'";
}

}  // namespace combiner::config
