// Recursive descent over the grammar of RFC 8259. Escapes, surrogate pairs and raw control
// characters are checked as JSON requires; other bytes of strings pass through as they are.
#include "util/json.h"

#include <stdexcept>

namespace combiner::util {
namespace {

constexpr int kMaxJsonDepth = 64;

class JsonParser {
 public:
  explicit JsonParser(std::string_view text) : s_(text) {}

  JsonValue document() {
    JsonValue v = value(0);
    skip_space();
    if (at_ < s_.size()) error("unexpected text after the document");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    throw std::runtime_error("JSON byte " + std::to_string(at_) + ": " + what);
  }
  void skip_space() {
    while (at_ < s_.size() &&
           (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r'))
      ++at_;
  }
  void expect(char c) {
    skip_space();
    if (at_ >= s_.size() || s_[at_] != c) error(std::string("expected '") + c + "'");
    ++at_;
  }
  bool literal(std::string_view word) {
    if (s_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  JsonValue value(int depth) {
    if (depth > kMaxJsonDepth) error("nested deeper than 64 levels");
    skip_space();
    if (at_ >= s_.size()) error("unexpected end of the document");
    JsonValue v;
    const char c = s_[at_];
    if (c == '{') {
      v.kind = JsonValue::Kind::kObject;
      ++at_;
      skip_space();
      if (at_ < s_.size() && s_[at_] == '}') return ++at_, v;
      for (;;) {
        skip_space();
        if (at_ >= s_.size() || s_[at_] != '"') error("expected a string key");
        std::string key = string();
        if (v.find(key)) error("duplicate key \"" + key + "\"");
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
        skip_space();
        if (at_ < s_.size() && s_[at_] == ',') {
          ++at_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = JsonValue::Kind::kArray;
      ++at_;
      skip_space();
      if (at_ < s_.size() && s_[at_] == ']') return ++at_, v;
      for (;;) {
        v.items.push_back(value(depth + 1));
        skip_space();
        if (at_ < s_.size() && s_[at_] == ',') {
          ++at_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = JsonValue::Kind::kString;
      v.text = string();
      return v;
    }
    const bool is_true = literal("true");
    if (is_true || literal("false")) {
      v.kind = JsonValue::Kind::kBool;
      v.boolean = is_true;
      return v;
    }
    if (literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind = JsonValue::Kind::kNumber;
      v.text = number();
      return v;
    }
    error(std::string("unexpected character '") + c + "'");
  }

  std::string number() {
    const size_t start = at_;
    auto digits = [&] {
      const size_t from = at_;
      while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
      if (at_ == from) error("malformed number");
    };
    if (s_[at_] == '-') ++at_;
    if (at_ < s_.size() && s_[at_] == '0')
      ++at_;  // no leading zeros
    else
      digits();
    if (at_ < s_.size() && s_[at_] == '.') ++at_, digits();
    if (at_ < s_.size() && (s_[at_] == 'e' || s_[at_] == 'E')) {
      ++at_;
      if (at_ < s_.size() && (s_[at_] == '+' || s_[at_] == '-')) ++at_;
      digits();
    }
    return std::string(s_.substr(start, at_ - start));
  }

  unsigned hex4() {
    if (s_.size() - at_ < 4) error("truncated \\u escape");
    unsigned code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[at_++];
      code <<= 4;
      if (h >= '0' && h <= '9')
        code |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        code |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        code |= static_cast<unsigned>(h - 'A' + 10);
      else
        error("bad hex digit in a \\u escape");
    }
    return code;
  }

  static void append_utf8(std::string& out, unsigned code) {
    if (code < 0x80) {
      out += static_cast<char>(code);
    } else if (code < 0x800) {
      out += static_cast<char>(0xc0 | (code >> 6));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else if (code < 0x10000) {
      out += static_cast<char>(0xe0 | (code >> 12));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (code >> 18));
      out += static_cast<char>(0x80 | ((code >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (code & 0x3f));
    }
  }

  std::string string() {
    ++at_;  // the opening quote
    std::string out;
    for (;;) {
      if (at_ >= s_.size()) error("unterminated string");
      const char c = s_[at_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) error("raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_ >= s_.size()) error("unterminated string");
      const char e = s_[at_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned code = hex4();
          if (code >= 0xd800 && code < 0xdc00) {  // a high surrogate: a low one must follow
            if (!literal("\\u")) error("unpaired surrogate in a \\u escape");
            const unsigned low = hex4();
            if (low < 0xdc00 || low >= 0xe000) error("unpaired surrogate in a \\u escape");
            code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
          } else if (code >= 0xdc00 && code < 0xe000) {
            error("unpaired surrogate in a \\u escape");
          }
          append_utf8(out, code);
          break;
        }
        default:
          error(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  std::string_view s_;
  size_t at_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [name, value] : members)
    if (name == key) return &value;
  return nullptr;
}

std::optional<uint64_t> JsonValue::as_index() const {
  if (kind != Kind::kNumber || text.empty() || text.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;  // a sign, fraction or exponent
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v >= (uint64_t{1} << 63)) return std::nullopt;
  return v;
}

const char* json_kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return "a boolean";
    case JsonValue::Kind::kNumber:
      return "a number";
    case JsonValue::Kind::kString:
      return "a string";
    case JsonValue::Kind::kArray:
      return "an array";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "?";
}

JsonValue parse_json(std::string_view text) {
  return JsonParser(text).document();
}

std::string json_quote(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (u < 0x20) {
      out += "\\u00";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace combiner::util
