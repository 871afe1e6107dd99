// Inputs that made the dataset readers fail the fuzz targets' rule (fuzz/*_fuzz.cpp: refuse bad
// bytes only with std::runtime_error naming the file), kept so the bugs stay fixed. Every one
// is a header that claims more than the file holds: the readers used to allocate what the
// header said before checking it against the bytes present, so the error was std::bad_alloc or
// std::length_error (no file named) or, for sizes that fit in memory, gigabytes zero-filled.
#include <zlib.h>

#include <cstring>

#include "data/data_files.h"
#include "data/fashion_mnist.h"
#include "data/imagenet64.h"
#include "data/zip.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::put;
using combiner::testing::put_be32;
using Bytes = std::vector<uint8_t>;

TEST(ReaderFuzzRegression, IdxHeaderClaimingFourBillionImages) {
  Bytes idx;
  for (uint32_t v : {2051u, 0xFFFFFFFFu, 28u, 28u}) put_be32(idx, v);
  idx.resize(idx.size() + 784, 1);  // one image present
  expect_throw_with<std::runtime_error>(
      [&] { parse_idx_images(idx.data(), idx.size(), "huge.idx"); },
      {"huge.idx", "4294967295 images", "expected 3367254359280 bytes", "found 784"});
}

// A one-member zip: `claimed` uncompressed bytes (in both headers) for `data`, stored or
// deflated.
Bytes zip_with(const Bytes& data, bool deflated, uint64_t claimed, uint32_t crc) {
  Bytes stored = data;
  if (deflated) {
    uLongf size = compressBound(static_cast<uLong>(data.size())) + 16;
    Bytes out(size);
    z_stream z{};
    deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
    z.next_in = const_cast<uint8_t*>(data.data());
    z.avail_in = static_cast<uInt>(data.size());
    z.next_out = out.data();
    z.avail_out = static_cast<uInt>(out.size());
    deflate(&z, Z_FINISH);
    out.resize(z.total_out);
    deflateEnd(&z);
    stored = out;
  }
  const std::string name = "data.npy";
  Bytes z;
  const uint64_t method = deflated ? 8 : 0;
  put(z, 0x04034b50, 4), put(z, 20, 2), put(z, 0, 2), put(z, method, 2), put(z, 0, 4);
  put(z, crc, 4), put(z, stored.size(), 4), put(z, claimed, 4), put(z, name.size(), 2);
  put(z, 0, 2);
  z.insert(z.end(), name.begin(), name.end());
  z.insert(z.end(), stored.begin(), stored.end());
  const uint64_t cd = z.size();
  put(z, 0x02014b50, 4), put(z, 20, 2), put(z, 20, 2), put(z, 0, 2), put(z, method, 2);
  put(z, 0, 4), put(z, crc, 4), put(z, stored.size(), 4), put(z, claimed, 4);
  put(z, name.size(), 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 4);
  put(z, 0, 4);
  z.insert(z.end(), name.begin(), name.end());
  const uint64_t cd_size = z.size() - cd;
  put(z, 0x06054b50, 4), put(z, 0, 2), put(z, 0, 2), put(z, 1, 2), put(z, 1, 2);
  put(z, cd_size, 4), put(z, cd, 4), put(z, 0, 2);
  return z;
}

TEST(ReaderFuzzRegression, ZipMemberClaimingMoreThanDeflateCanHold) {
  const Bytes data(100, 'x');
  const auto crc = static_cast<uint32_t>(crc32(0, data.data(), 100));
  const Bytes archive = zip_with(data, true, 0xFFFFFFF0u, crc);
  expect_throw_with<std::runtime_error>(
      [&] { ZipArchive::in_memory(archive.data(), archive.size(), "claims.npz").read("data.npy"); },
      {"claims.npz", "data.npy", "4294967280 uncompressed bytes", "more than deflate"});
}

TEST(ReaderFuzzRegression, StoredZipMemberPastTheEndOfTheFile) {
  const Bytes data(100, 'x');
  Bytes archive = zip_with(data, false, 100, static_cast<uint32_t>(crc32(0, data.data(), 100)));
  // Local-header offset of the member pointed past the end of the archive.
  const size_t cd = archive.size() - 22 - 46 - 8;
  archive[cd + 42] = 0xF0, archive[cd + 43] = 0xFF, archive[cd + 44] = 0xFF,
               archive[cd + 45] = 0x7F;
  expect_throw_with<std::runtime_error>(
      [&] { ZipArchive::in_memory(archive.data(), archive.size(), "offset.npz").read("data.npy"); },
      {"offset.npz", "local header", "past the end"});
}

TEST(ReaderFuzzRegression, Zip64DirectoryWhoseOffsetPlusSizeOverflows) {
  // A zip64 end record whose central-directory offset + size wraps around 2^64.
  Bytes z;
  const uint64_t end64 = z.size();
  put(z, 0x06064b50, 4), put(z, 44, 8), put(z, 45, 2), put(z, 45, 2), put(z, 0, 4), put(z, 0, 4);
  put(z, 1, 8), put(z, 1, 8), put(z, uint64_t{1} << 63, 8), put(z, (uint64_t{1} << 63) + 8, 8);
  put(z, 0x07064b50, 4), put(z, 0, 4), put(z, end64, 8), put(z, 1, 4);
  put(z, 0x06054b50, 4), put(z, 0, 2), put(z, 0, 2), put(z, 0xFFFF, 2), put(z, 0xFFFF, 2);
  put(z, 0xFFFFFFFF, 4), put(z, 0xFFFFFFFF, 4), put(z, 0, 2);
  expect_throw_with<std::runtime_error>(
      [&] { ZipArchive::in_memory(z.data(), z.size(), "wrap.npz"); },
      {"wrap.npz", "central directory", "past the end"});
}

// An .npy header (version 1) for uint8 data of the given shape text, then `data_bytes` bytes.
Bytes npy(const std::string& shape, size_t data_bytes) {
  std::string dict = "{'descr': '|u1', 'fortran_order': False, 'shape': " + shape + ", }";
  dict.append(64 - (10 + dict.size() + 1) % 64, ' ');
  dict += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  put(out, dict.size(), 2);
  out.insert(out.end(), dict.begin(), dict.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

TEST(ReaderFuzzRegression, NpzHeaderClaimingATrillionImages) {
  const Bytes member = npy("(1099511627776, 12288)", 12288);
  const Bytes archive =
      zip_with(member,
               false,
               member.size(),
               static_cast<uint32_t>(crc32(0, member.data(), static_cast<uInt>(member.size()))));
  expect_throw_with<std::runtime_error>(
      [&] { parse_imagenet64_npz(archive.data(), archive.size(), "trillion.npz"); },
      {"trillion.npz", "1099511627776 images", "found 12288"});
}

// A PNG signature and IHDR chunk (CRC not needed: util::read_image_header reads the IHDR alone;
// libpng checks the CRC only when decoding).
Bytes png_header(uint32_t width, uint32_t height, uint8_t colour_type) {
  Bytes out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_be32(out, 13);
  for (char c : std::string("IHDR")) out.push_back(static_cast<uint8_t>(c));
  put_be32(out, width);
  put_be32(out, height);
  out.insert(out.end(), {8, colour_type, 0, 0, 0});
  put_be32(out, 0);
  return out;
}

TEST(ReaderFuzzRegression, PngClaimingAHugeImageIsRefusedBeforeDecoding) {
  // 16384 x 16384 RGBA would be a 1 GiB decode buffer; the header alone must settle it.
  const Bytes png = png_header(16384, 16384, 6);
  Bytes out(12288);
  expect_throw_with<std::runtime_error>(
      [&] { decode_imagenet64_png(png.data(), png.size(), "huge.png", out.data()); },
      {"huge.png", "16384x16384 with 4 channels", "expected 64x64 with 3"});
}

}  // namespace
}  // namespace combiner::data
