// write_file_atomic: tmp file + fsync + rename + folder fsync (rename is atomic within one file
// system on POSIX; the two fsyncs make the new content, then the new name, durable in order).
// Output goes through a small streambuf over the descriptor so a failed write keeps its errno
// (EFBIG, ENOSPC, EIO) for the message instead of an ofstream's bare failbit.
#include "util/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <streambuf>

namespace combiner::util {
namespace {

// Write-only streambuf over a file descriptor; remembers the first error.
class FdBuffer : public std::streambuf {
 public:
  explicit FdBuffer(int fd) : fd_(fd) { setp(buffer_, buffer_ + sizeof(buffer_)); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* data, std::streamsize n) override {
    if (n < static_cast<std::streamsize>(sizeof(buffer_))) return std::streambuf::xsputn(data, n);
    // Large blocks (tensor data, checkpoint payloads) go straight to the file.
    if (!flush_buffer() || !write_all(data, static_cast<size_t>(n))) return 0;
    return n;
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  bool write_all(const char* data, size_t n) {
    while (n > 0) {
      const ssize_t written = ::write(fd_, data, std::min<size_t>(n, size_t{1} << 30));
      if (written < 0) {
        if (errno == EINTR) continue;
        error_ = errno;
        return false;
      }
      data += written;
      n -= static_cast<size_t>(written);
    }
    return true;
  }
  bool flush_buffer() {
    if (error_ != 0) return false;
    const bool ok = write_all(pbase(), static_cast<size_t>(pptr() - pbase()));
    setp(buffer_, buffer_ + sizeof(buffer_));
    return ok;
  }

  int fd_;
  int error_ = 0;
  char buffer_[1 << 16];
};

std::string error_text(int error) {
  return std::strerror(error);
}

}  // namespace

void sync_parent_directory(const std::string& path) {
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("cannot open folder '" + folder.string() +
                             "' to sync it: " + error_text(errno));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // EINVAL: a file system that cannot sync folders (the rename is as durable as it gets there).
  if (result != 0 && error != EINVAL)
    throw std::runtime_error("fsync of folder '" + folder.string() +
                             "' failed: " + error_text(error));
}

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot write '" + path + "': cannot create '" + tmp +
                             "': " + error_text(errno));
  std::string problem;
  try {
    FdBuffer buffer(fd);
    std::ostream out(&buffer);
    write(out);
    out.flush();
    if (buffer.error() != 0)
      problem = error_text(buffer.error());
    else if (!out)
      problem = "the stream to '" + tmp + "' failed";
  } catch (const std::exception& e) {
    problem = e.what();
  }
  if (problem.empty() && ::fsync(fd) != 0)
    problem = "fsync of '" + tmp + "' failed: " + error_text(errno);
  if (::close(fd) != 0 && problem.empty())
    problem = "closing '" + tmp + "' failed: " + error_text(errno);
  if (problem.empty() && std::rename(tmp.c_str(), path.c_str()) != 0)
    problem = "cannot rename '" + tmp + "' to it: " + error_text(errno);
  if (!problem.empty()) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write '" + path + "': " + problem +
                             " (the temporary file was removed; '" + path + "' was not touched)");
  }
  try {
    sync_parent_directory(path);
  } catch (const std::exception& e) {
    throw std::runtime_error("wrote '" + path + "' but " + e.what());
  }
}

}  // namespace combiner::util
