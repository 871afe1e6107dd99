// Zip reading from the central directory: sizes and offsets come from there (with zip64
// extras when a field is 0xFFFFFFFF), never from local headers, which streaming writers may
// leave zero. Deflate members are inflated in 4 MiB input chunks straight into the result.
#include "data/zip.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace combiner::data {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kEnd64LocatorSig = 0x07064b50;
constexpr uint32_t kEnd64Sig = 0x06064b50;
constexpr uint32_t kMax32 = 0xFFFFFFFF;

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw std::runtime_error("zip '" + path + "': " + what);
}

std::vector<uint8_t> read_at(
    std::ifstream& in, uint64_t offset, uint64_t size, const std::string& path, const char* what) {
  std::vector<uint8_t> bytes(size);
  in.clear();
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size)
    fail(path,
         std::string("truncated file: cannot read the ") + what + " at offset " +
             std::to_string(offset));
  return bytes;
}

// Applies a zip64 extended-information extra field to the fields that overflowed 32 bits.
void apply_zip64_extra(const uint8_t* extra, size_t len, ZipEntry& e, const std::string& path) {
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
        if (p + 8 > end) fail(path, "zip64 extra field of '" + e.name + "' is too short");
        *field = le(p, 8);
        p += 8;
      }
      return;
    }
    pos += 4 + size;
  }
}

}  // namespace

std::vector<ZipEntry> list_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  std::error_code error;
  const uint64_t file_size = std::filesystem::file_size(path, error);
  if (error) fail(path, "cannot read file size: " + error.message());
  if (file_size < 22)
    fail(path, "too short to be a zip file (" + std::to_string(file_size) + " bytes)");

  // The end record sits in the last 22 + 65535 (longest comment) bytes.
  const uint64_t tail_size = std::min<uint64_t>(file_size, 22 + 65535);
  const std::vector<uint8_t> tail = read_at(in, file_size - tail_size, tail_size, path, "end");
  int64_t end = -1;
  for (int64_t i = static_cast<int64_t>(tail_size) - 22; i >= 0; --i)
    if (le(tail.data() + i, 4) == kEndSig) {
      end = i;
      break;
    }
  if (end < 0) fail(path, "no end-of-central-directory record (not a zip/npz file, or truncated)");
  const uint8_t* e = tail.data() + end;
  uint64_t entries = le(e + 10, 2);
  uint64_t cd_size = le(e + 12, 4);
  uint64_t cd_offset = le(e + 16, 4);
  if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0) fail(path, "multi-disk archives are not supported");

  const uint64_t end_offset = file_size - tail_size + end;
  if ((entries == 0xFFFF || cd_size == kMax32 || cd_offset == kMax32) && end_offset >= 20) {
    const auto locator = read_at(in, end_offset - 20, 20, path, "zip64 locator");
    if (le(locator.data(), 4) == kEnd64LocatorSig) {
      const auto end64 = read_at(in, le(locator.data() + 8, 8), 56, path, "zip64 end record");
      if (le(end64.data(), 4) != kEnd64Sig) fail(path, "bad zip64 end-of-central-directory record");
      entries = le(end64.data() + 32, 8);
      cd_size = le(end64.data() + 40, 8);
      cd_offset = le(end64.data() + 48, 8);
    }
  }
  if (cd_offset + cd_size > file_size)
    fail(path,
         "central directory at " + std::to_string(cd_offset) + " + " + std::to_string(cd_size) +
             " bytes lies past the end of the " + std::to_string(file_size) +
             "-byte file (truncated?)");

  const std::vector<uint8_t> cd = read_at(in, cd_offset, cd_size, path, "central directory");
  std::vector<ZipEntry> result;
  size_t pos = 0;
  for (uint64_t i = 0; i < entries; ++i) {
    if (pos + 46 > cd.size() || le(cd.data() + pos, 4) != kCentralSig)
      fail(path, "corrupt central directory at entry " + std::to_string(i));
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
      fail(path, "corrupt central directory at entry " + std::to_string(i));
    entry.name.assign(reinterpret_cast<const char*>(h + 46), name_len);
    apply_zip64_extra(h + 46 + name_len, extra_len, entry, path);
    result.push_back(std::move(entry));
    pos += 46 + name_len + extra_len + comment_len;
  }
  return result;
}

std::vector<uint8_t> read_zip_member(const std::string& path,
                                     const std::string& name,
                                     uint64_t limit) {
  const std::vector<ZipEntry> entries = list_zip(path);
  const auto it = std::find_if(
      entries.begin(), entries.end(), [&](const ZipEntry& e) { return e.name == name; });
  if (it == entries.end()) {
    std::string names;
    for (const auto& e : entries) names += (names.empty() ? "" : ", ") + e.name;
    fail(path, "no member '" + name + "' (found: " + names + ")");
  }
  const ZipEntry& entry = *it;
  const std::string where = "member '" + name + "': ";
  if (entry.flags & 1) fail(path, where + "encrypted members are not supported");
  if (entry.method != 0 && entry.method != 8)
    fail(path,
         where + "compression method " + std::to_string(entry.method) +
             " is not supported (expected 0 stored or 8 deflate)");

  std::ifstream in(path, std::ios::binary);
  const auto local = read_at(in, entry.local_offset, 30, path, "local header");
  if (le(local.data(), 4) != kLocalSig) fail(path, where + "bad local header signature");
  const uint64_t data_offset =
      entry.local_offset + 30 + le(local.data() + 26, 2) + le(local.data() + 28, 2);
  const uint64_t wanted = std::min(limit, entry.size);
  std::vector<uint8_t> out(wanted);

  if (entry.method == 0) {
    if (entry.compressed_size != entry.size) fail(path, where + "stored member with two sizes");
    out = read_at(in, data_offset, wanted, path, "member data");
  } else {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) fail(path, where + "inflateInit2 failed");
    std::vector<uint8_t> chunk(4 << 20);
    in.clear();
    in.seekg(static_cast<std::streamoff>(data_offset));
    uint64_t left = entry.compressed_size;
    uint64_t done = 0;
    int status = Z_OK;
    while (done < wanted && status != Z_STREAM_END) {
      if (z.avail_in == 0) {
        if (left == 0) break;
        const uint64_t n = std::min<uint64_t>(left, chunk.size());
        in.read(reinterpret_cast<char*>(chunk.data()), static_cast<std::streamsize>(n));
        if (static_cast<uint64_t>(in.gcount()) != n) {
          inflateEnd(&z);
          fail(path, where + "truncated file: compressed data ends early");
        }
        left -= n;
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
        fail(path, where + "corrupt deflate data: " + message);
      }
    }
    inflateEnd(&z);
    if (done != wanted)
      fail(path,
           where + "expected " + std::to_string(wanted) + " uncompressed bytes, found " +
               std::to_string(done));
  }
  if (wanted == entry.size) {
    const uint32_t crc = static_cast<uint32_t>(
        crc32_z(crc32(0L, Z_NULL, 0), out.data(), static_cast<z_size_t>(out.size())));
    if (crc != entry.crc32) fail(path, where + "CRC-32 mismatch (corrupt file)");
  }
  return out;
}

}  // namespace combiner::data
