// to_yaml(), to_documented_yaml() and key_paths(): all walk the field table in order. The YAML
// writers open and close nested maps as the key prefix changes, double-quote every string (so
// "null" or "123" stay strings) and write each key's meaning as a trailing comment; the
// documented form adds its range and its default there.
#include <yaml-cpp/yaml.h>

#include <string>
#include <vector>

#include "config/config.h"
#include "config/fields.h"
#include "config/scalar.h"

namespace combiner::config {
namespace {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(path.substr(start, dot - start));
  parts.push_back(path.substr(start));
  return parts;
}

void emit_value(YAML::Emitter& out, const Field& field, const Value& value) {
  const auto* text = std::get_if<std::string>(&value);
  if (field.bool_spellings && text != nullptr && (*text == "true" || *text == "false")) {
    out << *text;  // a bool, as the key was before it took strings
    return;
  }
  if (auto v = std::get_if<int64_t>(&value)) {
    out << std::to_string(*v);
  } else if (auto v = std::get_if<double>(&value)) {
    out << format_double(*v);
  } else if (auto v = std::get_if<bool>(&value)) {
    out << (*v ? "true" : "false");
  } else {
    out << YAML::DoubleQuoted << std::get<std::string>(value);
  }
}

// What follows a key's value: its meaning and choices, and when documented its range and default.
std::string comment_of(const Field& field, bool documented) {
  std::string comment = field.meaning;
  if (field.choices) {
    comment += "; one of:";
    for (const auto& name : field.choices()) comment += " " + name;
  }
  if (!documented) return comment;
  const std::string range = range_description(field);
  if (!range.empty()) comment += "; " + range;
  return comment + "; default " + format_value(field.get(Config{}));
}

std::string emit_yaml(const Config& config, bool documented) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::vector<std::string> open;  // sections currently open, outermost first
  for (const Field& field : fields()) {
    std::vector<std::string> parts = split_path(field.path);
    const std::string leaf = parts.back();
    parts.pop_back();
    size_t common = 0;
    while (common < open.size() && common < parts.size() && open[common] == parts[common]) ++common;
    for (; open.size() > common; open.pop_back()) out << YAML::EndMap;
    for (; open.size() < parts.size(); open.push_back(parts[open.size()]))
      out << YAML::Key << parts[open.size()] << YAML::Value << YAML::BeginMap;
    out << YAML::Key << leaf << YAML::Value;
    emit_value(out, field, field.get(config));
    out << YAML::Comment(comment_of(field, documented));
  }
  for (; !open.empty(); open.pop_back()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace

std::string to_yaml(const Config& config) {
  return emit_yaml(config, false);
}

std::string to_documented_yaml(const Config& config) {
  return emit_yaml(config, true);
}

std::vector<std::string> key_paths() {
  std::vector<std::string> paths;
  for (const Field& field : fields()) paths.push_back(field.path);
  return paths;
}

}  // namespace combiner::config
