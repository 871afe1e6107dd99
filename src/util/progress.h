// A progress line for long work that is not training (evaluation over a split, sampling):
// done / total, rate and ETA every few seconds and once at the end, as training's step lines
// do. Where stderr is a terminal the line is rewritten in place; elsewhere (a log file, CI) each
// report is a log line of its own.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace combiner::util {

class Progress {
 public:
  // `what`: the line's prefix ("eval test"); `unit`: what is counted ("images").
  Progress(std::string what, std::string unit, int64_t total, double every_s = 5.0);
  // Reports `done` if every_s has passed since the last report, or when done == total.
  void update(int64_t done);

  // "eval test: 1200/10000 images | 35.2 images/s | ETA 250s" (no ETA at the end).
  static std::string line(const std::string& what,
                          const std::string& unit,
                          int64_t done,
                          int64_t total,
                          double elapsed_s);

 private:
  using Clock = std::chrono::steady_clock;
  std::string what_, unit_;
  int64_t total_;
  double every_s_;
  bool terminal_;
  bool finished_ = false;
  Clock::time_point start_, last_;
};

}  // namespace combiner::util
