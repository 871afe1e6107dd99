// A strict JSON reader (RFC 8259) for the small documents the project reads, such as the header
// of a safetensors file, and the quoting its writers need. Numbers are kept as their text, so
// 64-bit offsets are read exactly; duplicate object keys and nesting deeper than 64 are refused.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace combiner::util {

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  std::string text;                                        // a string's value, a number's text
  std::vector<JsonValue> items;                            // array elements
  std::vector<std::pair<std::string, JsonValue>> members;  // object members, in file order

  // The member called key of an object, or nullptr.
  const JsonValue* find(const std::string& key) const;
  // A number that is a non-negative integer below 2^63, or nullopt.
  std::optional<uint64_t> as_index() const;
};

// "a string", "an array", ...: for messages.
const char* json_kind_name(JsonValue::Kind kind);

// Parses a whole document (surrounding whitespace allowed). std::runtime_error
// "JSON byte <n>: <what>" on anything else.
JsonValue parse_json(std::string_view text);

// text as a JSON string literal, quotes included (control characters escaped as \uXXXX).
std::string json_quote(std::string_view text);

}  // namespace combiner::util
