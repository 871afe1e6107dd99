// A small zip reader, enough for NumPy .npz archives: the central directory (with zip64
// records and extras), stored and deflate members (zlib raw inflate), CRC-32 checked.
// Encrypted, multi-disk and other compression methods are refused with the path named.
// An archive is read from a file (streamed, never held whole) or from bytes in memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace combiner::data {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 stored, 8 deflate
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;  // uncompressed
  uint64_t local_offset = 0;
};

class ZipSource;  // zip.cpp: a file or a span of memory

// One archive with its central directory read. Every error is a std::runtime_error starting
// "zip '<name>': " and saying what is wrong, never a crash or an allocation the file cannot back.
class ZipArchive {
 public:
  static ZipArchive open(const std::string& path);
  // data must outlive the archive; name is used in messages only.
  static ZipArchive in_memory(const uint8_t* data, size_t size, const std::string& name);

  const std::string& name() const { return name_; }
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // The entry called member, or std::runtime_error listing the members there are.
  const ZipEntry& entry(const std::string& member) const;
  // The uncompressed bytes of member, or only its first limit bytes (the CRC is checked only
  // when the whole member is read).
  std::vector<uint8_t> read(const std::string& member,
                            uint64_t limit = std::numeric_limits<uint64_t>::max()) const;

 private:
  ZipArchive(std::shared_ptr<ZipSource> source, std::string name);
  // Offset of the member's data, after checking its header, bounds and sizes.
  uint64_t locate(const ZipEntry& entry) const;
  std::shared_ptr<ZipSource> source_;
  std::string name_;
  std::vector<ZipEntry> entries_;
};

// The archive's members from its central directory; std::runtime_error naming path if it is
// not a readable zip file.
std::vector<ZipEntry> list_zip(const std::string& path);

// ZipArchive::open(path).read(name, limit).
std::vector<uint8_t> read_zip_member(const std::string& path,
                                     const std::string& name,
                                     uint64_t limit = std::numeric_limits<uint64_t>::max());

}  // namespace combiner::data
