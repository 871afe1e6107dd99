// The lock file is opened without truncation and written only once the lock is ours, so a
// trainer that is refused changes nothing in the folder. O_CLOEXEC keeps the descriptor (and with
// it the lock) out of any program the trainer starts.
#include "train/run_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <thread>
#include <utility>

namespace combiner::train {

namespace run_lock_detail {

// The holder's record; it writes it just after taking the lock, so an empty file is retried
// for a moment.
std::string holder_of(int fd) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    char text[256];
    const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
    if (n > 0) {
      std::string holder(text, static_cast<size_t>(n));
      return holder.substr(0, holder.find('\n'));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "which has not recorded its pid and host yet";
}

}  // namespace run_lock_detail

std::string lock_holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  return "pid " + std::to_string(::getpid()) + " on host " + host;
}

RunFolderLock::RunFolderLock(const std::string& dir)
    : path_((std::filesystem::path(dir) / "train.lock").string()) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0)
    throw std::runtime_error(path_ + ": cannot create the run folder's lock file: " +
                             std::strerror(errno) + " (is the run folder writable?)");
  int status = 0;
  do status = ::flock(fd_, LOCK_EX | LOCK_NB);
  while (status != 0 && errno == EINTR);
  if (status != 0) {
    const int error = errno;
    const std::string holder =
        error == EWOULDBLOCK ? run_lock_detail::holder_of(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      throw std::runtime_error("train.out_dir: " + dir + " is in use by another combiner-train (" +
                               holder + ", holding " + path_ +
                               "); wait for it to end, or choose another train.out_dir");
    spdlog::warn("{}: cannot lock ({}): nothing stops a second trainer writing into this folder",
                 path_,
                 std::strerror(error));
    return;
  }
  const std::string text = lock_holder_text() + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    spdlog::warn("{}: cannot record this trainer's pid ({}); the folder is locked all the same",
                 path_,
                 std::strerror(errno));
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

RunFolderLock::RunFolderLock(RunFolderLock&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)) {}

RunFolderLock& RunFolderLock::operator=(RunFolderLock&& other) noexcept {
  std::swap(path_, other.path_);
  std::swap(fd_, other.fd_);
  return *this;
}

}  // namespace combiner::train
