// Packed files' header codec: the 64 bytes every version starts with, version 2's folder record
// after them, and the checks a header must pass before anything trusts its sizes.
#include "data/packed.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <utility>

#include "data/dataset.h"

namespace combiner::data {
namespace {

constexpr char kMagic[8] = {'C', 'M', 'B', 'P', 'A', 'C', 'K', '\n'};
constexpr size_t kNameBytes = 16;

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

uint32_t header_crc(const uint8_t* data, size_t size) {
  return static_cast<uint32_t>(crc32_z(0, data, size));
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
  if (get_u32(data + 124) != header_crc(data, 124))
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
  put_u32(&bytes[60], header_crc(bytes.data(), 60));
  if (const auto& r = header.folder) {
    put_u32(&bytes[64], static_cast<uint32_t>(r->filters.shrink));
    put_u32(&bytes[68], static_cast<uint32_t>(r->filters.enlarge));
    put_u64(&bytes[72], static_cast<uint64_t>(r->copied));
    put_u64(&bytes[80], static_cast<uint64_t>(r->shrunk));
    put_u64(&bytes[88], static_cast<uint64_t>(r->enlarged));
    put_u64(&bytes[96], static_cast<uint64_t>(r->cropped));
    put_u64(&bytes[104], static_cast<uint64_t>(r->skipped));
    put_u32(&bytes[124], header_crc(bytes.data(), 124));
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
  if (get_u32(data + 60) != header_crc(data, 60))
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

}  // namespace combiner::data
