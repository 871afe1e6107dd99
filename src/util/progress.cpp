#include "util/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace combiner::util {

Progress::Progress(std::string what, std::string unit, int64_t total, double every_s)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      every_s_(every_s),
      terminal_(isatty(STDERR_FILENO) == 1),
      start_(Clock::now()),
      last_(start_) {}

std::string Progress::line(const std::string& what,
                           const std::string& unit,
                           int64_t done,
                           int64_t total,
                           double elapsed_s) {
  const double rate = double(done) / std::max(elapsed_s, 1e-9);
  std::string text = fmt::format("{}: {}/{} {} | {:.1f} {}/s", what, done, total, unit, rate, unit);
  if (done < total && done > 0) text += fmt::format(" | ETA {:.0f}s", double(total - done) / rate);
  if (done >= total) text += fmt::format(" | done in {:.1f}s", elapsed_s);
  return text;
}

void Progress::update(int64_t done) {
  if (finished_) return;
  const auto now = Clock::now();
  const bool end = done >= total_;
  if (!end && std::chrono::duration<double>(now - last_).count() < every_s_) return;
  last_ = now;
  finished_ = end;
  const auto text =
      line(what_, unit_, done, total_, std::chrono::duration<double>(now - start_).count());
  if (terminal_) {  // one line, rewritten: carriage return, the text, erase to the line's end
    std::fprintf(stderr, "\r%s\x1b[K%s", text.c_str(), end ? "\n" : "");
    std::fflush(stderr);
  } else {
    spdlog::info("{}", text);
  }
}

}  // namespace combiner::util
