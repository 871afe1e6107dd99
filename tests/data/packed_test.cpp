// Packed dataset files: the header round trip, the CRC against zlib's published check value,
// the mapped reader, each refusal (truncated, wrong magic, unknown version, corrupt header,
// size disagreeing with the header, payload checksum), the background check, and the writer's
// atomicity (a short count or a full disk leaves the old file untouched); version 2's folder
// record (written, read back, its payload found after it, its own refusals) beside version 1.
#include "data/packed.h"

#include <filesystem>

#include "child_process.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

namespace fs = std::filesystem;
using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;
using Bytes = std::vector<uint8_t>;

Bytes images(int64_t count, int64_t L, int seed) {
  Bytes b(static_cast<size_t>(count * L));
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 31 + seed * 7) % 251);
  return b;
}

// A fashion_mnist packed file of `count` images written by PackedWriter; returns the payload.
Bytes write_fashion(const std::string& path, int64_t count, int seed = 1) {
  const Bytes payload = images(count, 784, seed);
  PackedWriter writer(path, "fashion_mnist", {28, 28, 1}, count);
  writer.write(payload.data(), count);
  writer.complete();
  writer.rename_into_place();
  return payload;
}

TEST(Packed, CrcIsZlibsCrc32OnAnyNumberOfThreads) {
  const std::string check = "123456789";  // the CRC-32 check value of the standard
  EXPECT_EQ(payload_crc(reinterpret_cast<const uint8_t*>(check.data()), check.size(), 1),
            0xCBF43926u);
  const Bytes big = images(40 << 20, 1, 3);  // 40 MiB: five 8 MiB ranges' worth
  const uint32_t one = payload_crc(big.data(), big.size(), 1);
  EXPECT_EQ(payload_crc(big.data(), big.size(), 2), one);
  EXPECT_EQ(payload_crc(big.data(), big.size(), 3), one);
}

TEST(Packed, WritesAndMapsImagesWithTheirHeader) {
  TempDir dir;
  const std::string path = dir.file("train.pack");
  const Bytes payload = write_fashion(path, 5);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(fs::file_size(path), kPackedHeaderBytes + 5 * 784);

  const auto file = PackedFile::open(path, PackedFile::Verify::kNow);
  EXPECT_EQ(file->header().dataset, "fashion_mnist");
  EXPECT_EQ(file->header().shape, (ImageShape{28, 28, 1}));
  EXPECT_EQ(file->header().count, 5);
  EXPECT_EQ(file->header().payload_crc, payload_crc(payload.data(), payload.size(), 1));
  const ImageSet set = file->image_set();
  EXPECT_TRUE(set.pixels.empty());
  ASSERT_EQ(set.count, 5);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), set.data()));
  EXPECT_EQ(set.image(3)[10], payload[3 * 784 + 10]);
  EXPECT_NO_THROW(set.check_integrity(true));

  const Bytes bytes = read_bytes(path);
  EXPECT_EQ(check_packed_bytes(bytes.data(), bytes.size(), "mem").count, 5);
}

TEST(Packed, TheSetOutlivesTheFileObject) {
  TempDir dir;
  const Bytes payload = write_fashion(dir.file("a.pack"), 2);
  ImageSet set = PackedFile::open(dir.file("a.pack"), PackedFile::Verify::kNow)->image_set();
  EXPECT_EQ(set.image(1)[783], payload[2 * 784 - 1]);  // the mapping is still there
}

// Each damaged file is refused, by name, with what is wrong.
TEST(Packed, RefusesDamagedFilesByName) {
  TempDir dir;
  const std::string good = dir.file("good.pack");
  write_fashion(good, 3);
  const Bytes bytes = read_bytes(good);
  auto refused = [&](const std::string& name, Bytes damaged, std::vector<std::string> needles) {
    const std::string path = dir.file(name);
    write_bytes(path, damaged);
    needles.push_back(path);
    expect_throw_with<std::runtime_error>([&] { PackedFile::open(path, PackedFile::Verify::kNow); },
                                          needles);
  };
  refused("short.pack", Bytes(bytes.begin(), bytes.begin() + 40), {"40 bytes", "64-byte header"});
  refused("empty.pack", {}, {"0 bytes"});
  Bytes magic = bytes;
  magic[0] = 'X';
  refused("magic.pack", magic, {"not a packed dataset file"});
  // A newer version: the header's own CRC is recomputed so only the version is wrong.
  PackedHeader newer;
  newer.dataset = "fashion_mnist";
  newer.shape = {28, 28, 1};
  newer.count = 3;
  newer.version = 3;
  const auto head = encode_packed_header(newer);
  Bytes version = bytes;
  std::copy(head.begin(), head.end(), version.begin());
  refused("version.pack", version, {"version 3", "reads versions 1 to 2"});
  Bytes header = bytes;
  header[50] ^= 1;  // the count, without fixing the header's CRC
  refused("header.pack", header, {"header checksum mismatch"});
  Bytes truncated(bytes.begin(), bytes.end() - 1);
  refused("truncated.pack", truncated, {"3 images", "2351 bytes after its header"});
  Bytes appended = bytes;
  appended.push_back(0);
  refused("appended.pack", appended, {"3 images", "2353 bytes"});
  Bytes payload = bytes;
  payload[kPackedHeaderBytes + 1000] ^= 0x40;
  refused("payload.pack", payload, {"payload checksum mismatch"});
  EXPECT_THROW(check_packed_bytes(payload.data(), payload.size(), "x"), std::runtime_error);
  expect_throw_with<std::runtime_error>(
      [&] { PackedFile::open(dir.file("missing.pack"), PackedFile::Verify::kNow); },
      {"missing.pack", "No such file"});
}

TEST(Packed, RefusesAHeaderWhoseShapeIsNotTheDatasets) {
  PackedHeader header;
  header.dataset = "cifar10";
  header.shape = {28, 28, 1};
  header.count = 1;
  const auto head = encode_packed_header(header);
  Bytes file(head.begin(), head.end());
  file.resize(file.size() + 784);
  expect_throw_with<std::runtime_error>(
      [&] { parse_packed_header(file.data(), file.size(), file.size(), "odd.pack"); },
      {"odd.pack", "cifar10 images of 28x28x1", "expected 32x32x3"});
  header.dataset = "svhn";
  const auto unknown = encode_packed_header(header);
  expect_throw_with<std::runtime_error>(
      [&] { parse_packed_header(unknown.data(), unknown.size(), file.size(), "svhn.pack"); },
      {"svhn.pack", "unknown dataset 'svhn'"});
}

TEST(Packed, BackgroundCheckReportsACorruptPayloadLater) {
  TempDir dir;
  const std::string path = dir.file("bad.pack");
  write_fashion(path, 4);
  Bytes bytes = read_bytes(path);
  bytes[kPackedHeaderBytes + 7] ^= 1;
  write_bytes(path, bytes);
  // Opening does not wait for the payload: the images are there at once.
  const auto file = PackedFile::open(path, PackedFile::Verify::kBackground, /*above=*/0);
  EXPECT_EQ(file->image_set().image(0)[7], bytes[kPackedHeaderBytes + 7]);
  expect_throw_with<std::runtime_error>([&] { file->check_integrity(true); },
                                        {path, "payload checksum mismatch"});
  EXPECT_THROW(file->check_integrity(false), std::runtime_error);  // and stays failed

  write_fashion(path, 4);
  const auto good = PackedFile::open(path, PackedFile::Verify::kBackground, 0);
  EXPECT_NO_THROW(good->check_integrity(true));
}

TEST(Packed, WriterLeavesTheOldFileWhenItFails) {
  TempDir dir;
  const std::string path = dir.file("train.pack");
  const Bytes before = (write_fashion(path, 2), read_bytes(path));
  {
    PackedWriter writer(path, "fashion_mnist", {28, 28, 1}, 3);
    const Bytes two = images(2, 784, 9);
    writer.write(two.data(), 2);
    expect_throw_with<std::runtime_error>([&] { writer.complete(); },
                                          {path, "only 2 of 3 images", "not touched"});
  }
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // A disk that fills up: writes past 100 kB fail with EFBIG in the child.
  const std::string message =
      combiner::testing::message_in_child(combiner::testing::file_size_limit(100000), [&] {
        const Bytes many = images(200, 784, 4);
        PackedWriter writer(path, "fashion_mnist", {28, 28, 1}, 200);
        writer.write(many.data(), 200);
        writer.complete();
        writer.rename_into_place();
      });
  EXPECT_NE(message.find("cannot write '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("not touched"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), before);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

// An images pack of 3 images of 4 x 5 x 3 with a folder record; returns the payload.
Bytes write_images_v2(const std::string& path, const FolderRecord& record) {
  const Bytes payload = images(3, 60, 5);
  PackedHeader header;
  header.dataset = "images";
  header.shape = {4, 5, 3};
  header.count = 3;
  header.folder = FolderRecord{};  // reserves the record's place; its counts come at the end
  PackedWriter writer(path, header);
  writer.write(payload.data(), 3);
  writer.set_folder_record(record);
  writer.complete();
  writer.rename_into_place();
  return payload;
}

FolderRecord sample_record() {
  FolderRecord r;
  r.filters = {ResizeFilter::kBox, ResizeFilter::kTriangle};
  r.copied = 1;
  r.shrunk = 2;
  r.cropped = 1;
  r.skipped = 4;
  return r;
}

// The record is read back as written, the payload starts after it (byte 128, where a reader of
// version 1's 64-byte header would find the record instead), and version 1 stays readable.
TEST(Packed, FolderRecordRoundTripsAndVersionOneStaysReadable) {
  TempDir dir;
  const std::string path = dir.file("train.pack");
  const Bytes payload = write_images_v2(path, sample_record());
  EXPECT_EQ(fs::file_size(path), kPackedHeaderBytesMax + payload.size());
  const auto file = PackedFile::open(path, PackedFile::Verify::kNow);
  EXPECT_EQ(file->header().version, 2u);
  ASSERT_TRUE(file->header().folder);
  EXPECT_EQ(*file->header().folder, sample_record());
  EXPECT_EQ(describe(*file->header().folder),
            "1 copied unfiltered, 2 shrunk (box), 0 enlarged (triangle), 1 cropped");
  const ImageSet set = file->image_set();
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), set.data()));
  const Bytes bytes = read_bytes(path);
  EXPECT_EQ(check_packed_bytes(bytes.data(), bytes.size(), "mem").folder, sample_record());
  EXPECT_EQ(read_packed_header(path).folder, sample_record());

  PackedWriter old(dir.file("old.pack"), "images", {4, 5, 3}, 3);  // no record: version 1
  old.write(payload.data(), 3);
  old.complete();
  old.rename_into_place();
  EXPECT_THROW(old.set_folder_record(sample_record()), std::logic_error);
  EXPECT_EQ(fs::file_size(dir.file("old.pack")), kPackedHeaderBytes + payload.size());
  const auto v1 = PackedFile::open(dir.file("old.pack"), PackedFile::Verify::kNow);
  EXPECT_EQ(v1->header().version, 1u);
  EXPECT_FALSE(v1->header().folder);
  EXPECT_TRUE(std::equal(payload.begin(), payload.end(), v1->image_set().data()));
}

TEST(Packed, RefusesADamagedOrInconsistentFolderRecord) {
  TempDir dir;
  write_images_v2(dir.file("good.pack"), sample_record());
  const Bytes good = read_bytes(dir.file("good.pack"));
  auto refused = [&](const Bytes& bytes, const std::vector<std::string>& needles) {
    expect_throw_with<std::runtime_error>(
        [&] { check_packed_bytes(bytes.data(), bytes.size(), "r.pack"); }, needles);
  };
  Bytes flipped = good;
  flipped[80] ^= 1;  // a count, without fixing the record's CRC
  refused(flipped, {"r.pack", "folder record checksum mismatch"});
  refused(Bytes(good.begin(), good.begin() + 100), {"r.pack", "100 bytes", "128-byte header"});
  // Well-formed records that do not describe the file: the CRCs are made to match.
  PackedHeader h = check_packed_bytes(good.data(), good.size(), "r.pack");
  auto with_header = [&](const PackedHeader& header) {
    Bytes b = good;
    const auto head = encode_packed_header(header);
    std::copy(head.begin(), head.end(), b.begin());
    return b;
  };
  h.folder->shrunk = 1;  // 1 + 1 + 0 images for a count of 3
  refused(with_header(h), {"r.pack", "1 copied, 1 shrunk, 0 enlarged", "for 3 images"});
  h.folder->shrunk = 2;
  h.folder->filters.enlarge = static_cast<ResizeFilter>(9);
  refused(with_header(h), {"r.pack", "resize filter 9", "expected 1 to 4"});
  h.folder->filters.enlarge = ResizeFilter::kMitchell;
  EXPECT_EQ(
      check_packed_bytes(with_header(h).data(), good.size(), "r.pack").folder->filters.enlarge,
      ResizeFilter::kMitchell);
  h.dataset = "fashion_mnist";  // only images packs have a record
  expect_throw_with<std::invalid_argument>([&] { encode_packed_header(h); },
                                           {"folder record", "fashion_mnist"});
}

}  // namespace
}  // namespace combiner::data
