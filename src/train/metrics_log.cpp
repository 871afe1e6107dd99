#include "train/metrics_log.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace combiner::train {

MetricsLog::MetricsLog(const std::string& path) : path_(path), out_(path, std::ios::app) {
  if (!out_) throw std::runtime_error(path + ": cannot open metrics log for appending");
}

void MetricsLog::write(const std::vector<std::pair<std::string, double>>& fields) {
  std::string line = "{";
  char number[64];
  for (size_t i = 0; i < fields.size(); ++i) {
    const double v = fields[i].second;
    if (std::isfinite(v))
      std::snprintf(number, sizeof(number), "%.10g", v);
    else
      std::snprintf(number, sizeof(number), "null");  // JSON has no NaN or infinity
    line += (i ? ", \"" : "\"") + fields[i].first + "\": " + number;
  }
  out_ << line << "}\n";
  out_.flush();
  if (!out_) throw std::runtime_error(path_ + ": writing metrics failed (disk full?)");
}

}  // namespace combiner::train
