// metrics.jsonl: one JSON object per line, appended, for programs rather than people.
#pragma once

#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace combiner::train {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);
  void write(const std::vector<std::pair<std::string, double>>& fields);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace combiner::train
