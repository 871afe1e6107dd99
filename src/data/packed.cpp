// Packed files: the mapped reader with its (optionally background) payload check, and the atomic
// writer (the header codec is packed_header.cpp). Checksums are zlib's CRC-32, computed over
// ranges in parallel and combined with crc32_combine, so Python's zlib.crc32 over the payload
// gives the same value.
#include "data/packed.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "util/atomic_file.h"

namespace combiner::data {
namespace {

constexpr size_t kChunk = size_t{8} << 20;  // bytes per read while checksumming a file

uint32_t crc_update(uint32_t crc, const uint8_t* data, size_t size) {
  return static_cast<uint32_t>(crc32_z(crc, data, size));
}

// The CRC of [0, size) from the CRCs of `threads` contiguous ranges, each computed by range_crc.
template <typename RangeCrc>
uint32_t combined_crc(uint64_t size, int threads, const RangeCrc& range_crc) {
  threads = static_cast<int>(std::clamp<uint64_t>(size / kChunk, 1, std::max(threads, 1)));
  std::vector<uint64_t> begin(threads + 1);
  for (int t = 0; t <= threads; ++t) begin[t] = size * t / threads;
  std::vector<uint32_t> crcs(threads);
  std::vector<std::exception_ptr> errors(threads);
  auto run = [&](int t) {
    try {
      crcs[t] = range_crc(begin[t], begin[t + 1]);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(run, t);
  run(0);
  for (auto& w : workers) w.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  uint32_t crc = crcs[0];
  for (int t = 1; t < threads; ++t)
    crc = static_cast<uint32_t>(
        crc32_combine(crc, crcs[t], static_cast<z_off_t>(begin[t + 1] - begin[t])));
  return crc;
}

std::string errno_text(int error) {
  return std::strerror(error);
}

}  // namespace

namespace {
std::runtime_error checksum_mismatch(const std::string& name, uint32_t found, uint32_t expected) {
  char text[64];
  std::snprintf(text, sizeof(text), "%08x, the header says %08x", found, expected);
  return std::runtime_error(name + ": payload checksum mismatch (CRC-32 " + text +
                            "): the images are corrupt; pack the dataset again");
}
}  // namespace

PackedHeader check_packed_bytes(const uint8_t* data, size_t size, const std::string& name) {
  const PackedHeader header = parse_packed_header(data, size, size, name);
  const size_t at = header.header_bytes();
  const uint32_t crc = payload_crc(data + at, size - at, 1);
  if (crc != header.payload_crc) throw checksum_mismatch(name, crc, header.payload_crc);
  return header;
}

uint32_t payload_crc(const uint8_t* data, size_t size, int threads) {
  return combined_crc(size, threads, [&](uint64_t begin, uint64_t end) {
    return crc_update(0, data + begin, end - begin);
  });
}

// ---------------------------------------------------------------------------------------------
// PackedFile

struct PackedFile::Check {
  std::thread thread;
  std::atomic<bool> cancel{false};
  mutable std::mutex mutex;
  mutable std::condition_variable finished;
  bool done = false;
  std::string error;  // non-empty once the check has failed
};

PackedFile::PackedFile(std::string path, const uint8_t* base, size_t size, PackedHeader header)
    : path_(std::move(path)), base_(base), size_(size), header_(std::move(header)) {}

PackedFile::~PackedFile() {
  if (check_) {
    check_->cancel = true;
    if (check_->thread.joinable()) check_->thread.join();
  }
  ::munmap(const_cast<uint8_t*>(base_), size_);
}

PackedHeader read_packed_header(const std::string& path) {
  auto fail = [&](const std::string& why) {
    return std::runtime_error(path + ": cannot read: " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(errno_text(errno));
  struct stat info {};
  uint8_t head[kPackedHeaderBytesMax] = {};
  const bool regular = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  const ssize_t got = regular ? ::pread(fd, head, sizeof(head), 0) : 0;
  const int error = errno;
  ::close(fd);
  if (!regular) throw fail("not a regular file");
  if (got < 0) throw fail(errno_text(error));
  return parse_packed_header(
      head, static_cast<size_t>(got), static_cast<uint64_t>(info.st_size), path);
}

std::shared_ptr<PackedFile> PackedFile::open(const std::string& path,
                                             Verify verify,
                                             int64_t background_above) {
  auto fail = [&](const std::string& why) {
    return std::runtime_error(path + ": cannot read: " + why);
  };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw fail(errno_text(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    throw fail("not a regular file");
  }
  const auto file_size = static_cast<uint64_t>(info.st_size);
  uint8_t head[kPackedHeaderBytesMax] = {};
  const ssize_t got = ::pread(fd, head, sizeof(head), 0);
  if (got < 0) {
    const int error = errno;
    ::close(fd);
    throw fail(errno_text(error));
  }
  PackedHeader header;
  try {
    header = parse_packed_header(head, static_cast<size_t>(got), file_size, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  void* base = ::mmap(nullptr, file_size, PROT_READ, MAP_SHARED, fd, 0);
  const int map_error = errno;
  ::close(fd);  // the mapping keeps the file open
  if (base == MAP_FAILED) throw fail("mmap failed: " + errno_text(map_error));
  std::shared_ptr<PackedFile> file(
      new PackedFile(path, static_cast<const uint8_t*>(base), file_size, std::move(header)));

  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (verify == Verify::kNow || file->header_.payload_bytes() <= background_above) {
    file->verify(threads);
    return file;
  }
  file->check_ = std::make_unique<Check>();
  Check* check = file->check_.get();
  const PackedFile* self = file.get();
  check->thread = std::thread([check, self] {
    // Below the training threads: the check reads the whole file once, at its own pace.
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
    std::string error;
    try {
      self->verify(1);
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(check->mutex);
    check->done = true;
    check->error = check->cancel ? "" : error;
    check->finished.notify_all();
  });
  return file;
}

void PackedFile::verify(int threads) const {
  // pread, not the mapping: reading 16 GB through the mapping would count it all in this
  // process's resident set. The page cache keeps what it reads for the training to use.
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot read: " + errno_text(errno));
  const Check* check = check_.get();
  uint32_t crc = 0;
  try {
    crc = combined_crc(header_.payload_bytes(), threads, [&](uint64_t begin, uint64_t end) {
      std::vector<uint8_t> buffer(std::min<uint64_t>(kChunk, end - begin));
      uint32_t c = 0;
      for (uint64_t at = begin; at < end;) {
        if (check && check->cancel) throw std::runtime_error(path_ + ": check cancelled");
        const ssize_t got = ::pread(fd,
                                    buffer.data(),
                                    std::min<uint64_t>(kChunk, end - at),
                                    static_cast<off_t>(header_.header_bytes() + at));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
          throw std::runtime_error(path_ + ": cannot read: " +
                                   (got < 0 ? errno_text(errno) : "the file shrank while read"));
        c = crc_update(c, buffer.data(), static_cast<size_t>(got));
        at += static_cast<uint64_t>(got);
      }
      return c;
    });
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  if (crc != header_.payload_crc) throw checksum_mismatch(path_, crc, header_.payload_crc);
}

void PackedFile::check_integrity(bool wait) const {
  if (!check_) return;
  std::unique_lock<std::mutex> lock(check_->mutex);
  if (wait) check_->finished.wait(lock, [&] { return check_->done; });
  if (!check_->error.empty()) throw std::runtime_error(check_->error);
}

ImageSet PackedFile::image_set() const {
  ImageSet set;
  set.shape = header_.shape;
  set.count = header_.count;
  set.bits = header_.bits;
  set.storage = shared_from_this();
  return set;
}

// ---------------------------------------------------------------------------------------------
// PackedWriter

namespace {
PackedHeader writer_header(std::string dataset, ImageShape shape, int64_t count, int64_t bits) {
  PackedHeader header;
  header.dataset = std::move(dataset);
  header.shape = shape;
  header.count = count;
  header.bits = bits;
  return header;
}
}  // namespace

PackedWriter::PackedWriter(
    std::string path, std::string dataset, ImageShape shape, int64_t count, int64_t bits)
    : PackedWriter(std::move(path), writer_header(std::move(dataset), shape, count, bits)) {}

PackedWriter::PackedWriter(std::string path, PackedHeader header)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), header_(std::move(header)) {
  header_.payload_crc = 0;
  header_.version = 0;
  if (header_.bits < 1 || header_.bits > 8)
    throw std::invalid_argument("packed file: " + std::to_string(header_.bits) +
                                " bits per subpixel");
  // Refuses a bad name before a file is made; zeros hold the header's place until complete().
  const std::vector<uint8_t> placeholder(encode_packed_header(header_).size(), 0);
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create '" + tmp_ + "': " + errno_text(errno));
  write_all(placeholder.data(), placeholder.size());
}

PackedWriter::~PackedWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!renamed_) ::unlink(tmp_.c_str());
}

void PackedWriter::fail(const std::string& why) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  renamed_ = true;  // nothing left to remove
  throw std::runtime_error("cannot write '" + path_ + "': " + why +
                           " (the temporary file was removed; '" + path_ + "' was not touched)");
}

void PackedWriter::write_all(const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd_, data, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(errno_text(errno));
    data += n;
    size -= static_cast<size_t>(n);
  }
}

void PackedWriter::write(const uint8_t* images, int64_t n) {
  if (completed_ || fd_ < 0) throw std::logic_error("PackedWriter::write after complete");
  if (n < 0 || written_ + n > header_.count)
    fail("more images than the " + std::to_string(header_.count) + " announced");
  const size_t bytes = static_cast<size_t>(n * header_.shape.length());
  header_.payload_crc = crc_update(header_.payload_crc, images, bytes);
  write_all(images, bytes);
  written_ += n;
}

void PackedWriter::complete() {
  if (written_ != header_.count)
    fail("only " + std::to_string(written_) + " of " + std::to_string(header_.count) +
         " images were written");
  const auto header = encode_packed_header(header_);
  if (::pwrite(fd_, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()))
    fail(errno_text(errno));
  if (::fsync(fd_) != 0) fail("fsync failed: " + errno_text(errno));
  if (::close(fd_) != 0) {
    fd_ = -1;
    fail("close failed: " + errno_text(errno));
  }
  fd_ = -1;
  completed_ = true;
}

void PackedWriter::complete_short() {
  if (written_ == 0) fail("no image was written");
  header_.count = written_;
  complete();
}

void PackedWriter::set_folder_record(const FolderRecord& record) {
  if (!header_.folder)
    throw std::logic_error("PackedWriter::set_folder_record: '" + path_ +
                           "' was made without a folder record");
  header_.folder = record;
}

void PackedWriter::rename_into_place() {
  if (!completed_) throw std::logic_error("PackedWriter::rename_into_place before complete");
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail("cannot rename '" + tmp_ + "' to it: " + errno_text(errno));
  renamed_ = true;
  util::sync_parent_directory(path_);
}

}  // namespace combiner::data
