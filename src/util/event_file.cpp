// EventFile: Event protos serialised by src/tfevent, framed by util/tfrecord.h, appended with
// write(2) on an O_APPEND descriptor. Built without protobuf (COMBINER_WITH_TENSORBOARD undefined)
// the constructor refuses with a message saying how to get TensorBoard support.
#include "util/event_file.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "util/tfrecord.h"

#ifdef COMBINER_WITH_TENSORBOARD
#include "tfevent/event_proto.h"
#endif

namespace combiner::util {
namespace {

namespace fs = std::filesystem;
constexpr char kEventPrefix[] = "events.out.tfevents.";

double seconds_now() {
  timeval now{};
  ::gettimeofday(&now, nullptr);
  return static_cast<double>(now.tv_sec) + 1e-6 * static_cast<double>(now.tv_usec);
}

// The seconds field of the newest event file in folder, or 0.
int64_t newest_event_seconds(const fs::path& folder) {
  int64_t newest = 0;
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(kEventPrefix, 0) != 0) continue;
    const std::string rest = name.substr(sizeof(kEventPrefix) - 1);
    const size_t digits = rest.find_first_not_of("0123456789");
    if (digits == 0 || digits > 18) continue;
    newest = std::max<int64_t>(newest, std::stoll(rest.substr(0, digits)));
  }
  return newest;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

bool tensorboard_available() {
#ifdef COMBINER_WITH_TENSORBOARD
  return true;
#else
  return false;
#endif
}

EventFile::EventFile(const std::string& folder, int64_t first_step, bool restart) {
  if (!tensorboard_available())
    throw std::runtime_error(folder +
                             ": this build writes no TensorBoard events (configured without "
                             "protobuf: install libprotobuf-dev and protobuf-compiler, rebuild)");
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw std::runtime_error(folder + ": cannot create the folder: " + ec.message());
  // Names sort by their seconds field first: one past the newest file's keeps a resumed run's
  // file after the one it continues, even within the same second or with a smaller pid.
  static std::atomic<int> files_opened{0};
  const int64_t seconds =
      std::max(static_cast<int64_t>(seconds_now()), newest_event_seconds(folder) + 1);
  path_ = (fs::path(folder) / (kEventPrefix + std::to_string(seconds) + "." + host_name() + "." +
                               std::to_string(::getpid()) + "." + std::to_string(files_opened++)))
              .string();
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(path_ + ": cannot create: " + std::strerror(errno));
#ifdef COMBINER_WITH_TENSORBOARD
  append(tfevent::version_event(seconds_now(), first_step));
  if (restart) append(tfevent::restart_event(seconds_now(), first_step));
#endif
}

EventFile::~EventFile() {
  if (fd_ >= 0) ::close(fd_);
}

void EventFile::append(const std::string& serialized_event) {
  const std::string record = frame_record(serialized_event);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw std::runtime_error(
          path_ + ": cannot write an event record: " + std::strerror(n < 0 ? errno : EIO));
    done += static_cast<size_t>(n);
  }
}

#ifdef COMBINER_WITH_TENSORBOARD

void EventFile::add_scalar(const std::string& tag, int64_t step, double value) {
  append(tfevent::scalar_event(seconds_now(), step, tag, static_cast<float>(value)));
}

void EventFile::add_image(const std::string& tag, int64_t step, const EncodedPng& png) {
  append(tfevent::image_event(seconds_now(),
                              step,
                              tag,
                              static_cast<int32_t>(png.height),
                              static_cast<int32_t>(png.width),
                              static_cast<int32_t>(png.channels),  // 1 grey, 3 RGB
                              std::string(png.bytes.begin(), png.bytes.end())));
}

void EventFile::add_text(const std::string& tag, int64_t step, const std::string& text) {
  append(tfevent::text_event(seconds_now(), step, tag, text));
}

#else

void EventFile::add_scalar(const std::string&, int64_t, double) {}
void EventFile::add_image(const std::string&, int64_t, const EncodedPng&) {}
void EventFile::add_text(const std::string&, int64_t, const std::string&) {}

#endif

}  // namespace combiner::util
