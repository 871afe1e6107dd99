#include "util/cli_main.h"

#include "util/runtime.h"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <exception>
#include <string>

namespace combiner::util {

namespace {
// LibTorch's own errors carry a C++ backtrace in what(); users need the first line only.
std::string first_line(const std::string& text) {
  return text.substr(0, text.find('\n'));
}
}  // namespace

int guarded_main(const char* program, const std::function<int()>& body) {
  spdlog::set_pattern("[%H:%M:%S] %v");
  try {
    tune_process();
    return body();
  } catch (const c10::Error& e) {
    std::fprintf(
        stderr, "%s: error: %s\n", program, first_line(e.what_without_backtrace()).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, first_line(e.what()).c_str());
  }
  return 1;
}

}  // namespace combiner::util
