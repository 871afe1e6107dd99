// Conversion between YAML scalars and typed config values, shared by the file parser and --set.
// Strict on purpose: "1.5" is not an integer, a quoted "100" is a string, and floats are printed
// in the shortest form that reads back to the same double.
#pragma once

#include <yaml-cpp/yaml.h>

#include <string>

#include "config/fields.h"

namespace combiner::config {

// Converts `node` to the field's type. Throws std::invalid_argument
// "<field.path>: expected <type>, got <what was there>".
Value parse_scalar(const YAML::Node& node, const Field& field);

// Shortest text that reads back to exactly `value`, with ".0" added to whole numbers.
std::string format_double(double value);

// A value as it appears in messages: strings in single quotes, floats via format_double.
std::string format_value(const Value& value);

// What a node holds, for messages: "a map", "a sequence", "null" or "'text'".
std::string describe_node(const YAML::Node& node);

}  // namespace combiner::config
