// read_file_bytes: open, fstat for the size, read until it is all there. POSIX calls rather
// than an ifstream so that the reason a file cannot be read reaches the message.
#include "data/file_bytes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace combiner::data {

std::vector<uint8_t> read_file_bytes(const std::string& path, const std::string& reader) {
  auto fail = [&](const std::string& why) {
    return std::runtime_error(reader + ": cannot read '" + path + "': " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    throw fail(std::strerror(error));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    throw fail("it is a folder, not a file");
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<off_t>(info.st_size, 0)));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got =
        ::read(fd, bytes.data() + done, std::min<size_t>(bytes.size() - done, 1 << 30));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int error = errno;
      ::close(fd);
      throw fail(got < 0 ? std::strerror(error)
                         : "the file ended after " + std::to_string(done) + " of " +
                               std::to_string(bytes.size()) + " bytes (changed while reading?)");
    }
    done += static_cast<size_t>(got);
  }
  ::close(fd);
  return bytes;
}

}  // namespace combiner::data
