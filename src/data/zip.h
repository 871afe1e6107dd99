// A small zip reader, enough for NumPy .npz archives: the central directory (with zip64
// records and extras), stored and deflate members (zlib raw inflate), CRC-32 checked.
// Encrypted, multi-disk and other compression methods are refused with the path named.
#pragma once

#include <cstdint>
#include <limits>
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

// The archive's members from its central directory; std::runtime_error naming path if it is
// not a readable zip file.
std::vector<ZipEntry> list_zip(const std::string& path);

// The uncompressed bytes of member name, or only its first limit bytes (the CRC is checked only
// when the whole member is read). std::runtime_error naming path and member if it is missing
// or corrupt.
std::vector<uint8_t> read_zip_member(const std::string& path,
                                     const std::string& name,
                                     uint64_t limit = std::numeric_limits<uint64_t>::max());

}  // namespace combiner::data
