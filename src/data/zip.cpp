// Zip reading from the central directory: sizes and offsets come from there (with zip64
// extras when a field is 0xFFFFFFFF), never from local headers, which streaming writers may
// leave zero. Every offset and size is checked against the archive's length before anything is
// allocated or read, so a corrupt or hostile directory costs an error, not memory. Deflate
// members are inflated in 4 MiB input chunks straight into the result.
#include "data/zip.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace combiner::data {

// Random access to the archive's bytes. read() returns false unless all n bytes were read.
class ZipSource {
 public:
  virtual ~ZipSource() = default;
  virtual uint64_t size() const = 0;
  virtual bool read(uint64_t offset, uint64_t n, uint8_t* out) = 0;
};

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kMax32 = 0xFFFFFFFF;
// Deflate expands at most 1032:1 (RFC 1951's longest match per shortest code); a member that
// claims more than this from its compressed size is corrupt.
constexpr uint64_t kMaxDeflateRatio = 1032;

class FileSource : public ZipSource {
 public:
  FileSource(const std::string& path, uint64_t size) : in_(path, std::ios::binary), size_(size) {}
  bool is_open() const { return static_cast<bool>(in_); }
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, uint64_t n, uint8_t* out) override {
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(offset));
    in_.read(reinterpret_cast<char*>(out), static_cast<std::streamsize>(n));
    return static_cast<uint64_t>(in_.gcount()) == n;
  }

 private:
  std::ifstream in_;
  uint64_t size_;
};

class MemorySource : public ZipSource {
 public:
  MemorySource(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, uint64_t n, uint8_t* out) override {
    if (offset > size_ || n > size_ - offset) return false;
    if (n > 0) std::memcpy(out, data_ + offset, n);
    return true;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
};

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw std::runtime_error("zip '" + name + "': " + what);
}

// True if [offset, offset + n) lies inside an archive of `size` bytes (no overflow).
bool inside(uint64_t offset, uint64_t n, uint64_t size) {
  return offset <= size && n <= size - offset;
}

std::vector<uint8_t> read_at(
    ZipSource& source, uint64_t offset, uint64_t n, const std::string& name, const char* what) {
  if (!inside(offset, n, source.size()))
    fail(name,
         std::string("truncated or corrupt file: the ") + what + " at offset " +
             std::to_string(offset) + " (" + std::to_string(n) +
             " bytes) lies past the end of the " + std::to_string(source.size()) + "-byte file");
  std::vector<uint8_t> bytes(n);
  if (!source.read(offset, n, bytes.data()))
    fail(name, std::string("read error in the ") + what + " at offset " + std::to_string(offset));
  return bytes;
}

// Applies a zip64 extended-information extra field to the fields that overflowed 32 bits.
void apply_zip64_extra(const uint8_t* extra, size_t len, ZipEntry& e, const std::string& name) {
  size_t pos = 0;
  while (pos + 4 <= len) {
    const uint64_t id = le(extra + pos, 2);
    const uint64_t size = le(extra + pos + 2, 2);
    if (pos + 4 + size > len) break;
    if (id == 0x0001) {
      const uint8_t* p = extra + pos + 4;
      const uint8_t* end = p + size;
      for (uint64_t* field : {&e.size, &e.compressed_size, &e.local_offset}) {
        if (*field != kMax32) continue;
        if (p + 8 > end) fail(name, "zip64 extra field of '" + e.name + "' is too short");
        *field = le(p, 8);
        p += 8;
      }
      return;
    }
    pos += 4 + size;
  }
}

std::vector<ZipEntry> read_directory(ZipSource& source, const std::string& name) {
  const uint64_t file_size = source.size();
  if (file_size < 22)
    fail(name, "too short to be a zip file (" + std::to_string(file_size) + " bytes)");

  // The end record sits in the last 22 + 65535 (longest comment) bytes.
  const uint64_t tail_size = std::min<uint64_t>(file_size, 22 + 65535);
  const std::vector<uint8_t> tail = read_at(source, file_size - tail_size, tail_size, name, "end");
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail_size) - 22; i >= 0; --i)
    if (le(tail.data() + i, 4) == kEndSig) {
      end = i;
      break;
    }
  if (end < 0) fail(name, "no end-of-central-directory record (not a zip/npz file, or truncated)");
  const uint8_t* e = tail.data() + end;
  uint64_t entries = le(e + 10, 2);
  uint64_t cd_size = le(e + 12, 4);
  uint64_t cd_offset = le(e + 16, 4);
  if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0) fail(name, "multi-disk archives are not supported");

  const uint64_t end_offset = file_size - tail_size + end;
  if ((entries == 0xFFFF || cd_size == kMax32 || cd_offset == kMax32) && end_offset >= 20) {
    const auto locator = read_at(source, end_offset - 20, 20, name, "zip64 locator");
    if (le(locator.data(), 4) == kEnd64LocatorSig) {
      const auto end64 = read_at(source, le(locator.data() + 8, 8), 56, name, "zip64 end record");
      if (le(end64.data(), 4) != kEnd64Sig) fail(name, "bad zip64 end-of-central-directory record");
      entries = le(end64.data() + 32, 8);
      cd_size = le(end64.data() + 40, 8);
      cd_offset = le(end64.data() + 48, 8);
    }
  }
  if (!inside(cd_offset, cd_size, file_size))
    fail(name,
         "central directory at " + std::to_string(cd_offset) + " + " + std::to_string(cd_size) +
             " bytes lies past the end of the " + std::to_string(file_size) +
             "-byte file (truncated?)");

  const std::vector<uint8_t> cd = read_at(source, cd_offset, cd_size, name, "central directory");
  std::vector<ZipEntry> result;
  size_t pos = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    if (pos + 46 > cd.size() || le(cd.data() + pos, 4) != kCentralSig)
      fail(name, "corrupt central directory at entry " + std::to_string(i));
    const uint8_t* h = cd.data() + pos;
    ZipEntry entry;
    entry.flags = static_cast<uint16_t>(le(h + 8, 2));
    entry.method = static_cast<uint16_t>(le(h + 10, 2));
    entry.crc32 = static_cast<uint32_t>(le(h + 16, 4));
    entry.compressed_size = le(h + 20, 4);
    entry.size = le(h + 24, 4);
    const size_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
    entry.local_offset = le(h + 42, 4);
    if (pos + 46 + name_len + extra_len + comment_len > cd.size())
      fail(name, "corrupt central directory at entry " + std::to_string(i));
    entry.name.assign(reinterpret_cast<const char*>(h + 46), name_len);
    apply_zip64_extra(h + 46 + name_len, extra_len, entry, name);
    result.push_back(std::move(entry));
    pos += 46 + name_len + extra_len + comment_len;
  }
  return result;
}

// Inflates the raw deflate stream of `compressed` bytes at `offset` into `wanted` bytes.
std::vector<uint8_t> inflate_member(ZipSource& source,
                                    uint64_t offset,
                                    uint64_t compressed,
                                    uint64_t wanted,
                                    const std::string& name,
                                    const std::string& where) {
  std::vector<uint8_t> out(wanted);
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail(name, where + "inflateInit2 failed");
  std::vector<uint8_t> chunk(std::min<uint64_t>(compressed, 4 << 20));
  uint64_t read = 0;
  uint64_t done = 0;
  int status = Z_OK;
  while (done < wanted && status != Z_STREAM_END) {
    if (z.avail_in == 0) {
      if (read == compressed) break;
      const uint64_t n = std::min<uint64_t>(compressed - read, chunk.size());
      if (!source.read(offset + read, n, chunk.data())) {
        inflateEnd(&z);
        fail(name, where + "truncated file: compressed data ends early");
      }
      read += n;
      z.next_in = chunk.data();
      z.avail_in = static_cast<uInt>(n);
    }
    const uint64_t room = std::min<uint64_t>(wanted - done, 1u << 30);
    z.next_out = out.data() + done;
    z.avail_out = static_cast<uInt>(room);
    status = inflate(&z, Z_NO_FLUSH);
    done += room - z.avail_out;
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) {
      const std::string message = z.msg ? z.msg : "error " + std::to_string(status);
      inflateEnd(&z);
      fail(name, where + "corrupt deflate data: " + message);
    }
  }
  inflateEnd(&z);
  if (done != wanted)
    fail(name,
         where + "expected " + std::to_string(wanted) + " uncompressed bytes, found " +
             std::to_string(done));
  return out;
}

}  // namespace

ZipArchive::ZipArchive(std::shared_ptr<ZipSource> source, std::string name)
    : source_(std::move(source)), name_(std::move(name)) {
  entries_ = read_directory(*source_, name_);
}

ZipArchive ZipArchive::open(const std::string& path) {
  std::error_code error;
  const uint64_t size = std::filesystem::file_size(path, error);
  if (error) fail(path, "cannot read file: " + error.message());
  auto source = std::make_shared<FileSource>(path, size);
  if (!source->is_open()) fail(path, std::string("cannot open file: ") + std::strerror(errno));
  return ZipArchive(std::move(source), path);
}

ZipArchive ZipArchive::in_memory(const uint8_t* data, size_t size, const std::string& name) {
  return ZipArchive(std::make_shared<MemorySource>(data, size), name);
}

const ZipEntry& ZipArchive::entry(const std::string& member) const {
  const auto it = std::find_if(
      entries_.begin(), entries_.end(), [&](const ZipEntry& e) { return e.name == member; });
  if (it == entries_.end()) {
    std::string names;
    for (const auto& e : entries_) names += (names.empty() ? "" : ", ") + e.name;
    fail(name_, "no member '" + member + "' (found: " + names + ")");
  }
  return *it;
}

uint64_t ZipArchive::locate(const ZipEntry& e) const {
  const std::string where = "member '" + e.name + "': ";
  if (e.flags & 1) fail(name_, where + "encrypted members are not supported");
  if (e.method != 0 && e.method != 8)
    fail(name_,
         where + "compression method " + std::to_string(e.method) +
             " is not supported (expected 0 stored or 8 deflate)");
  const auto local = read_at(*source_, e.local_offset, 30, name_, "local header");
  if (le(local.data(), 4) != kLocalSig) fail(name_, where + "bad local header signature");
  // local_offset + 30 fits the archive, so this cannot overflow.
  const uint64_t data_offset =
      e.local_offset + 30 + le(local.data() + 26, 2) + le(local.data() + 28, 2);
  if (!inside(data_offset, e.compressed_size, source_->size()))
    fail(name_,
         where + "truncated file: " + std::to_string(e.compressed_size) +
             " bytes of data at offset " + std::to_string(data_offset) +
             " lie past the end of the " + std::to_string(source_->size()) + "-byte file");
  if (e.method == 0 && e.compressed_size != e.size)
    fail(name_, where + "stored member with two sizes");
  if (e.method == 8 && e.size / kMaxDeflateRatio > e.compressed_size)
    fail(name_,
         where + "claims " + std::to_string(e.size) + " uncompressed bytes from " +
             std::to_string(e.compressed_size) +
             " deflated bytes, more than deflate can expand to");
  return data_offset;
}

std::vector<uint8_t> ZipArchive::read(const std::string& member, uint64_t limit) const {
  const ZipEntry& e = entry(member);
  const uint64_t data_offset = locate(e);
  const uint64_t wanted = std::min(limit, e.size);
  const std::string where = "member '" + member + "': ";
  std::vector<uint8_t> out =
      e.method == 0
          ? read_at(*source_, data_offset, wanted, name_, "member data")
          : inflate_member(*source_, data_offset, e.compressed_size, wanted, name_, where);
  if (wanted == e.size) {
    const uint32_t crc = static_cast<uint32_t>(
        crc32_z(crc32(0L, Z_NULL, 0), out.data(), static_cast<z_size_t>(out.size())));
    if (crc != e.crc32) fail(name_, where + "CRC-32 mismatch (corrupt file)");
  }
  return out;
}

std::vector<ZipEntry> list_zip(const std::string& path) {
  return ZipArchive::open(path).entries();
}

std::vector<uint8_t> read_zip_member(const std::string& path,
                                     const std::string& name,
                                     uint64_t limit) {
  return ZipArchive::open(path).read(name, limit);
}

}  // namespace combiner::data
