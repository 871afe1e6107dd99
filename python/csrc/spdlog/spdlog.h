// Stands in for spdlog in the Python package's build (python/CMakeLists.txt), so that it needs
// neither spdlog nor fmt: the attention library only logs one-line facts. Warnings and errors
// become torch warnings (Python's UserWarning); info, debug and trace lines, such as which path a
// variant runs, are dropped (combiner_attention.path() answers that question instead).
// Each {...} in the format takes the next argument through operator<<, its spec ignored.
#pragma once

#include <c10/util/Exception.h>

#include <sstream>
#include <string>
#include <string_view>

namespace spdlog {
namespace detail {

inline void format_into(std::ostringstream& out, std::string_view format) {
  out << format;
}

template <typename First, typename... Rest>
void format_into(std::ostringstream& out,
                 std::string_view format,
                 const First& first,
                 const Rest&... rest) {
  const auto open = format.find('{');
  const auto close = open == std::string_view::npos ? open : format.find('}', open);
  if (close == std::string_view::npos) {
    out << format;
    return;
  }
  out << format.substr(0, open) << first;
  format_into(out, format.substr(close + 1), rest...);
}

template <typename... Args>
std::string format(std::string_view format, const Args&... args) {
  std::ostringstream out;
  format_into(out, format, args...);
  return out.str();
}

}  // namespace detail

template <typename... Args>
void trace(std::string_view, const Args&...) {}
template <typename... Args>
void debug(std::string_view, const Args&...) {}
template <typename... Args>
void info(std::string_view, const Args&...) {}

template <typename... Args>
void warn(std::string_view format, const Args&... args) {
  TORCH_WARN(detail::format(format, args...));
}
template <typename... Args>
void error(std::string_view format, const Args&... args) {
  TORCH_WARN(detail::format(format, args...));
}

}  // namespace spdlog
