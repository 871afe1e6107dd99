// Helpers shared by the test binaries: fresh temporary folders, files read back, CSV rows, and
// what a call throws. A test binary's files build in unity batches (several files to one
// translation unit), so a helper that more than one file needs lives here or in its folder's
// header, and a file's own helpers take names no other file of its folder uses.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace combiner::testing {

// A new empty folder under the system temp dir, removed when the object goes away.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "combiner-test-XXXXXX").string();
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// A file's whole content ("" if it cannot be read).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file's lines, without their newlines (none if it cannot be read).
inline std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// What `f` throws, or "" when it returns.
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Fails the test for each of `needles` that `message` lacks.
inline void expect_contains(const std::string& message, const std::vector<std::string>& needles) {
  for (const auto& needle : needles)
    EXPECT_NE(message.find(needle), std::string::npos)
        << "'" << message << "' lacks '" << needle << "'";
}

// The cells of one CSV row (no quoting; a trailing comma gives an empty last cell).
inline std::vector<std::string> csv_cells(const std::string& row) {
  std::vector<std::string> cells;
  std::stringstream in(row);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  if (!row.empty() && row.back() == ',') cells.emplace_back();
  return cells;
}

// Every row of a CSV file, as cells (none if it cannot be read).
inline std::vector<std::vector<std::string>> csv_rows(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(csv_cells(line));
  return rows;
}

}  // namespace combiner::testing
