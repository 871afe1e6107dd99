// Test helpers shared by the util and data suites: whole-file byte I/O, and running a short
// script with the system Python (which has numpy) in a TempDir (test_utils.h).
#pragma once

#include "test_utils.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace combiner::testing {

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("test: cannot write " + path);
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs code with /usr/bin/python3 (the interpreter with numpy) in dir; returns the exit code.
inline int run_python(const TempDir& dir, const std::string& code) {
  const std::string script = dir.file("script.py");
  std::ofstream(script) << "import numpy as np\nimport os\nos.chdir(r'''" << dir.path()
                        << "''')\n"
                        << code << "\n";
  return std::system(("/usr/bin/python3 " + script).c_str());
}

// Expects statement to throw Exception with every one of the needles in its message.
template <typename Exception, typename F>
void expect_throw_with(F&& statement, const std::vector<std::string>& needles) {
  try {
    statement();
    ADD_FAILURE() << "expected an exception mentioning " << ::testing::PrintToString(needles);
  } catch (const Exception& e) {
    const std::string message = e.what();
    for (const auto& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos)
          << "message '" << message << "' lacks '" << needle << "'";
  }
}

}  // namespace combiner::testing
