// Running one of the built binaries from a test: its exit status and everything it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace combiner::testing {

struct BinaryRun {
  int status = -1;     // exit code; -1 if the process did not exit normally
  std::string output;  // stdout and stderr together
  std::string last_line() const {
    const auto end = output.find_last_not_of('\n');
    const auto start = output.rfind('\n', end);
    return output.substr(start == std::string::npos ? 0 : start + 1, end - start);
  }
};

// Runs `command` through the shell; stdout and stderr together.
inline BinaryRun run_shell(const std::string& command) {
  BinaryRun r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) r.output += buffer.data();
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs COMBINER_BINARY_DIR/<binary> <args>.
inline BinaryRun run_binary(const std::string& binary, const std::string& args) {
  return run_shell(std::string(COMBINER_BINARY_DIR) + "/" + binary + " " + args);
}

}  // namespace combiner::testing
