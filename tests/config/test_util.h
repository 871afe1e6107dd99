// Helpers shared by the config tests: run a call that must throw std::invalid_argument and check
// that its message names what it should, and a fresh temporary folder per test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <system_error>

namespace combiner::config::testing {

// Runs `call`; fails the test unless it throws std::invalid_argument whose message contains every
// fragment. Returns the message so a test can check more.
template <class Call>
std::string expect_invalid(Call&& call, std::initializer_list<std::string> fragments) {
  std::string message;
  EXPECT_THROW(
      {
        try {
          call();
        } catch (const std::invalid_argument& e) {
          message = e.what();
          throw;
        }
      },
      std::invalid_argument);
  for (const auto& fragment : fragments)
    EXPECT_NE(message.find(fragment), std::string::npos)
        << "message lacks '" << fragment << "': " << message;
  return message;
}

// A fresh folder under the system temp directory, removed with everything in it at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "combiner_config_XXXXXX");
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Writes `text` to `name` inside the folder and returns the file's path.
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace combiner::config::testing
