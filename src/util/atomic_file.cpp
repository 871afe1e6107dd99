// write_file_atomic: tmp file + rename (rename is atomic within one file system on POSIX).
#include "util/atomic_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace combiner::util {

void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write) {
  const std::string tmp = path + ".tmp";
  std::error_code ignored;
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot create '" + tmp + "': " + std::strerror(errno));
    write(out);
    out.close();
    if (!out) throw std::runtime_error("writing '" + tmp + "' failed (disk full?)");
    std::error_code error;
    std::filesystem::rename(tmp, path, error);
    if (error)
      throw std::runtime_error("cannot rename '" + tmp + "' to '" + path + "': " + error.message());
  } catch (const std::exception& e) {
    std::filesystem::remove(tmp, ignored);
    throw std::runtime_error("writing '" + path + "' failed: " + e.what());
  }
}

}  // namespace combiner::util
