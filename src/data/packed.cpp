// Packed files: the header codec, the mapped reader with its (optionally background) payload
// check, and the atomic writer. Checksums are zlib's CRC-32, computed over ranges in parallel
// and combined with crc32_combine, so Python's zlib.crc32 over the payload gives the same value.
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
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "util/atomic_file.h"

namespace combiner::data {
namespace {

constexpr char kMagic[8] = {'C', 'M', 'B', 'P', 'A', 'C', 'K', '\n'};
constexpr size_t kNameBytes = 16;
constexpr size_t kChunk = size_t{8} << 20;  // bytes per read while checksumming a file

uint32_t get_u32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
uint64_t get_u64(const uint8_t* p) {
  return uint64_t(get_u32(p)) | uint64_t(get_u32(p + 4)) << 32;
}
void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  put_u32(p, static_cast<uint32_t>(v));
  put_u32(p + 4, static_cast<uint32_t>(v >> 32));
}

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

// Bytes 64..127 of a version-2 header; fail(why) makes the exception naming the file.
template <typename Fail>
FolderRecord parse_folder_record(const uint8_t* data,
                                 size_t size,
                                 uint64_t file_size,
                                 const Fail& fail) {
  if (file_size < kPackedHeaderBytesMax || size < kPackedHeaderBytesMax)
    throw fail("is " + std::to_string(file_size) + " bytes, shorter than the " +
               std::to_string(kPackedHeaderBytesMax) + "-byte header of version 2 (truncated?)");
  if (get_u32(data + 124) != crc_update(0, data, 124))
    throw fail("folder record checksum mismatch: the header is corrupt");
  FolderRecord r;
  const std::pair<int, ResizeFilter*> filters[] = {{64, &r.filters.shrink},
                                                   {68, &r.filters.enlarge}};
  for (const auto& [at, filter] : filters) {
    const uint32_t code = get_u32(data + at);
    if (!is_resize_filter(code))
      throw fail("folder record names resize filter " + std::to_string(code) +
                 ", expected 1 to 4 (box, triangle, mitchell, catmull-rom)");
    *filter = static_cast<ResizeFilter>(code);
  }
  const std::pair<int, int64_t*> counts[] = {
      {72, &r.copied}, {80, &r.shrunk}, {88, &r.enlarged}, {96, &r.cropped}, {104, &r.skipped}};
  for (const auto& [at, count] : counts) {
    const uint64_t value = get_u64(data + at);
    if (value > (uint64_t{1} << 48))
      throw fail("folder record count " + std::to_string(value) + " at byte " + std::to_string(at) +
                 " is not a count of images");
    *count = static_cast<int64_t>(value);
  }
  return r;
}

}  // namespace

std::string packed_file_name(OfficialSplit split) {
  return split == OfficialSplit::kTrain ? "train.pack" : "test.pack";
}

bool holds_packed_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  return fs::exists(fs::path(dir) / packed_file_name(OfficialSplit::kTrain), ec) ||
         fs::exists(fs::path(dir) / packed_file_name(OfficialSplit::kTest), ec);
}

bool FolderRecord::operator==(const FolderRecord& o) const {
  return filters.shrink == o.filters.shrink && filters.enlarge == o.filters.enlarge &&
         copied == o.copied && shrunk == o.shrunk && enlarged == o.enlarged &&
         cropped == o.cropped && skipped == o.skipped;
}

std::string describe(const FolderRecord& r) {
  return std::to_string(r.copied) + " copied unfiltered, " + std::to_string(r.shrunk) +
         " shrunk (" + resize_filter_name(r.filters.shrink) + "), " + std::to_string(r.enlarged) +
         " enlarged (" + resize_filter_name(r.filters.enlarge) + "), " + std::to_string(r.cropped) +
         " cropped";
}

std::vector<uint8_t> encode_packed_header(const PackedHeader& header) {
  if (header.dataset.empty() || header.dataset.size() >= kNameBytes)
    throw std::invalid_argument("packed header: dataset name '" + header.dataset +
                                "' must have 1 to 15 characters");
  if (header.folder && header.dataset != "images")
    throw std::invalid_argument("packed header: a folder record in a " + header.dataset +
                                " pack (only images packs have one)");
  std::vector<uint8_t> bytes(header.header_bytes(), 0);
  std::memcpy(bytes.data(), kMagic, sizeof(kMagic));
  put_u32(&bytes[8], header.version != 0 ? header.version : header.folder ? 2 : 1);
  put_u32(&bytes[12], static_cast<uint32_t>(header.header_bytes()));
  std::memcpy(&bytes[16], header.dataset.data(), header.dataset.size());
  put_u32(&bytes[32], static_cast<uint32_t>(header.shape.height));
  put_u32(&bytes[36], static_cast<uint32_t>(header.shape.width));
  put_u32(&bytes[40], static_cast<uint32_t>(header.shape.channels));
  put_u32(&bytes[44], static_cast<uint32_t>(header.bits));
  put_u64(&bytes[48], static_cast<uint64_t>(header.count));
  put_u32(&bytes[56], header.payload_crc);
  put_u32(&bytes[60], crc_update(0, bytes.data(), 60));
  if (const auto& r = header.folder) {
    put_u32(&bytes[64], static_cast<uint32_t>(r->filters.shrink));
    put_u32(&bytes[68], static_cast<uint32_t>(r->filters.enlarge));
    put_u64(&bytes[72], static_cast<uint64_t>(r->copied));
    put_u64(&bytes[80], static_cast<uint64_t>(r->shrunk));
    put_u64(&bytes[88], static_cast<uint64_t>(r->enlarged));
    put_u64(&bytes[96], static_cast<uint64_t>(r->cropped));
    put_u64(&bytes[104], static_cast<uint64_t>(r->skipped));
    put_u32(&bytes[124], crc_update(0, bytes.data(), 124));
  }
  return bytes;
}

PackedHeader parse_packed_header(const uint8_t* data,
                                 size_t size,
                                 uint64_t file_size,
                                 const std::string& name) {
  auto fail = [&](const std::string& why) { return std::runtime_error(name + ": " + why); };
  if (file_size < kPackedHeaderBytes || size < kPackedHeaderBytes)
    throw fail("is " + std::to_string(file_size) +
               " bytes, shorter than the 64-byte header of a packed dataset file (truncated?)");
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    throw fail(
        "not a packed dataset file (it does not start with the magic 'CMBPACK'); "
        "make one with combiner-data pack");
  PackedHeader header;
  header.version = get_u32(data + 8);
  if (header.version < 1 || header.version > kPackedVersion)
    throw fail("packed format version " + std::to_string(header.version) +
               ", this build reads versions 1 to " + std::to_string(kPackedVersion) +
               "; pack the dataset again with this build's combiner-data");
  const size_t header_bytes = header.version == 1 ? kPackedHeaderBytes : kPackedHeaderBytesMax;
  if (get_u32(data + 12) != header_bytes)
    throw fail("header size " + std::to_string(get_u32(data + 12)) + ", expected " +
               std::to_string(header_bytes) + " for version " + std::to_string(header.version));
  if (get_u32(data + 60) != crc_update(0, data, 60))
    throw fail("header checksum mismatch: the header is corrupt");
  if (header.version >= 2) header.folder = parse_folder_record(data, size, file_size, fail);
  const char* text = reinterpret_cast<const char*>(data + 16);
  header.dataset.assign(text, strnlen(text, kNameBytes));
  const auto& names = dataset_names();
  if (std::find(names.begin(), names.end(), header.dataset) == names.end())
    throw fail("unknown dataset '" + header.dataset + "' in the header");
  header.shape = {get_u32(data + 32), get_u32(data + 36), get_u32(data + 40)};
  auto shape_text = [](const ImageShape& x) {
    return std::to_string(x.height) + "x" + std::to_string(x.width) + "x" +
           std::to_string(x.channels);
  };
  if (header.dataset == "images") {
    const auto& x = header.shape;
    if (x.height < 1 || x.height > kMaxImageSide || x.width < 1 || x.width > kMaxImageSide ||
        x.channels < 1 || x.channels > 4)
      throw fail("header says images of " + shape_text(x) + ", expected height and width 1 to " +
                 std::to_string(kMaxImageSide) + " and 1 to 4 channels");
  } else if (!(header.shape == dataset_shape(header.dataset))) {
    throw fail("header says " + header.dataset + " images of " + shape_text(header.shape) +
               ", expected " + shape_text(dataset_shape(header.dataset)));
  }
  const ImageShape expected = header.shape;
  const uint32_t bits = get_u32(data + 44);
  header.bits = bits == 0 ? 8 : bits;
  if (header.bits > 8 || (header.bits != 8 && header.dataset != "images"))
    throw fail("header says " + std::to_string(bits) + " bits per subpixel, expected " +
               (header.dataset == "images" ? "1 to 8" : "8 for " + header.dataset));
  if (header.folder && header.dataset != "images")
    throw fail("a " + header.dataset + " pack with a folder record (version 2 is for images)");
  const uint64_t count = get_u64(data + 48);
  const uint64_t payload = file_size - header.header_bytes();
  if (count == 0 || count > payload / static_cast<uint64_t>(expected.length()) ||
      count * static_cast<uint64_t>(expected.length()) != payload)
    throw fail("header says " + std::to_string(count) + " images (" +
               std::to_string(count * static_cast<uint64_t>(expected.length())) +
               " bytes), the file holds " + std::to_string(payload) +
               " bytes after its header (truncated, or not written by combiner-data pack)");
  header.count = static_cast<int64_t>(count);
  header.payload_crc = get_u32(data + 56);
  if (const auto& r = header.folder)
    if (r->copied + r->shrunk + r->enlarged != header.count || r->cropped > header.count)
      throw fail("folder record counts " + std::to_string(r->copied) + " copied, " +
                 std::to_string(r->shrunk) + " shrunk, " + std::to_string(r->enlarged) +
                 " enlarged, " + std::to_string(r->cropped) + " cropped, for " +
                 std::to_string(header.count) + " images (they must add up to the count)");
  return header;
}

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
