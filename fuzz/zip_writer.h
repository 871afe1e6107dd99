// A minimal zip writer for the fuzz targets and seeds: local headers, central directory and end
// record, members stored or deflated, as numpy.savez and torch.save write them.
#pragma once

#include <zlib.h>

#include <cstdint>
#include <string>
#include <vector>

namespace combiner::fuzz {

using Bytes = std::vector<uint8_t>;

struct ZipMember {
  std::string name;
  Bytes data;
  bool deflate = false;
};

inline void put_le(Bytes& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// zlib with a gzip (16 + MAX_WBITS) or raw (-MAX_WBITS) wrapper.
inline Bytes deflate_bytes(const uint8_t* data, size_t size, int window_bits) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY);
  Bytes out(deflateBound(&z, static_cast<uLong>(size)) + 32);
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

inline Bytes zip(const std::vector<ZipMember>& members) {
  Bytes z, cd;
  for (const auto& m : members) {
    const auto crc =
        static_cast<uint32_t>(crc32(0, m.data.data(), static_cast<uInt>(m.data.size())));
    const Bytes stored =
        m.deflate ? deflate_bytes(m.data.data(), m.data.size(), -MAX_WBITS) : m.data;
    const uint64_t offset = z.size();
    const uint64_t method = m.deflate ? 8 : 0;
    put_le(z, 0x04034b50, 4), put_le(z, 20, 2), put_le(z, 0, 2), put_le(z, method, 2);
    put_le(z, 0, 4), put_le(z, crc, 4), put_le(z, stored.size(), 4), put_le(z, m.data.size(), 4);
    put_le(z, m.name.size(), 2), put_le(z, 0, 2);
    z.insert(z.end(), m.name.begin(), m.name.end());
    z.insert(z.end(), stored.begin(), stored.end());
    put_le(cd, 0x02014b50, 4), put_le(cd, 20, 2), put_le(cd, 20, 2), put_le(cd, 0, 2);
    put_le(cd, method, 2), put_le(cd, 0, 4), put_le(cd, crc, 4), put_le(cd, stored.size(), 4);
    put_le(cd, m.data.size(), 4), put_le(cd, m.name.size(), 2), put_le(cd, 0, 2);
    put_le(cd, 0, 2), put_le(cd, 0, 2), put_le(cd, 0, 2), put_le(cd, 0, 4), put_le(cd, offset, 4);
    cd.insert(cd.end(), m.name.begin(), m.name.end());
  }
  const uint64_t cd_offset = z.size();
  z.insert(z.end(), cd.begin(), cd.end());
  put_le(z, 0x06054b50, 4), put_le(z, 0, 2), put_le(z, 0, 2), put_le(z, members.size(), 2);
  put_le(z, members.size(), 2), put_le(z, cd.size(), 4), put_le(z, cd_offset, 4);
  put_le(z, 0, 2);
  return z;
}

}  // namespace combiner::fuzz
