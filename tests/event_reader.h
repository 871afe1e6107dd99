// Reading TensorBoard event files in the tests the way an outside reader does: Python's protobuf
// over the project's .proto (tests/python/read_events.py, run by /usr/bin/python3), every record's
// CRCs checked. The decoded events come back as plain structs for assertions.
#pragma once

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/run_binary.h"

namespace combiner::testing {

struct DecodedEvent {
  int64_t step = 0;
  std::string kind;  // version, start, scalar, image, text
  std::string tag;
  std::string rest;  // the line after the tag: a scalar's value, an image's sizes, ...
  double value() const { return std::stod(rest); }
};

struct DecodedFile {
  std::string path;
  int64_t records = 0;
  int64_t truncated_tail = 0;
  std::vector<DecodedEvent> events;
  // The events of one tag.
  std::vector<DecodedEvent> of(const std::string& tag) const {
    std::vector<DecodedEvent> out;
    for (const auto& e : events)
      if (e.tag == tag) out.push_back(e);
    return out;
  }
};

// The event files of a folder, in name order (the order TensorBoard reads them in).
inline std::vector<std::string> event_files(const std::string& folder) {
  std::vector<std::string> out;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(folder, ec), end; !ec && it != end; ++it)
    if (it->path().filename().string().rfind("events.out.tfevents.", 0) == 0)
      out.push_back(it->path().string());
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    return std::filesystem::path(a).filename() < std::filesystem::path(b).filename();
  });
  return out;
}

// Decodes files with read_events.py; pb_dir receives the protoc-generated Python module.
// std::runtime_error with the reader's output if it fails (a CRC mismatch, a bad Event).
inline std::vector<DecodedFile> decode_event_files(const std::vector<std::string>& files,
                                                   const std::string& pb_dir) {
  const auto protoc = run_shell(std::string(COMBINER_PROTOC) + " --python_out=" + pb_dir + " -I " +
                                COMBINER_SOURCE_DIR + "/src/tfevent " + COMBINER_SOURCE_DIR +
                                "/src/tfevent/tensorboard_event.proto");
  if (protoc.status != 0) throw std::runtime_error("protoc failed: " + protoc.output);
  std::string command = std::string("/usr/bin/python3 ") + COMBINER_SOURCE_DIR +
                        "/tests/python/read_events.py " + pb_dir;
  for (const auto& f : files) command += " '" + f + "'";
  const auto run = run_shell(command);
  if (run.status != 0) throw std::runtime_error("read_events.py failed: " + run.output);
  std::vector<DecodedFile> out;
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "file") {
      DecodedFile f;
      std::string label;
      words >> f.path >> label >> f.records >> label >> f.truncated_tail;
      out.push_back(f);
      continue;
    }
    if (out.empty()) throw std::runtime_error("read_events.py: unexpected output: " + run.output);
    DecodedEvent e;
    e.step = std::stoll(first);
    words >> e.kind;
    if (e.kind == "scalar" || e.kind == "image" || e.kind == "text") words >> e.tag;
    std::getline(words >> std::ws, e.rest);
    out.back().events.push_back(e);
  }
  return out;
}

}  // namespace combiner::testing
