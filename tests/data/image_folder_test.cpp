// combiner-data pack --from FOLDER: decoding, cropping and resizing one file (exact at its own
// size; surviving corrupted ones: a small fuzz over PNG and JPEG bytes), then whole folders:
// splits read back, skipped files, --strict, and nothing written when packing fails.
#include "data/image_folder.h"

#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "data/data_files.h"
#include "data/dataset.h"
#include "data/packed.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;
using combiner::testing::write_png;

// A w x h x c image whose pixel (x, y) is f(x, y) + 85 k (mod 256) in channel k: the channels
// differ, so a swap of R and B cannot pass unseen.
template <typename F>
std::vector<uint8_t> pixels(int w, int h, int c, F f) {
  std::vector<uint8_t> p(static_cast<size_t>(w * h * c));
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int k = 0; k < c; ++k)
        p[static_cast<size_t>((y * w + x) * c + k)] = static_cast<uint8_t>(f(x, y) + 85 * k);
  return p;
}

void write_jpg(const std::string& path, int w, int h, int c, const std::vector<uint8_t>& p) {
  ASSERT_TRUE(stbi_write_jpg(path.c_str(), w, h, c, p.data(), 95)) << path;
}

std::vector<uint8_t> decode_file(const std::string& path, const ImageShape& shape) {
  const auto bytes = read_bytes(path);
  return decode_image(bytes.data(), bytes.size(), shape, path);
}

// Each channel constant (200, 29, 114 in R, G, B): so at every size, in its own channel.
TEST(DecodeImage, ConstantImagesStayConstantAtAnySizeAndChannelCount) {
  TempDir dir;
  write_png(dir.file("a.png"), 7, 5, 3, pixels(7, 5, 3, [](int, int) { return 200; }));
  write_png(dir.file("g.png"), 7, 5, 1, pixels(7, 5, 1, [](int, int) { return 200; }));
  for (const ImageShape shape : {ImageShape{1, 1, 3},
                                 ImageShape{17, 23, 3},
                                 ImageShape{128, 128, 3},
                                 ImageShape{3, 2, 1},
                                 ImageShape{5, 7, 3}}) {
    const auto out = decode_file(dir.file(shape.channels == 3 ? "a.png" : "g.png"), shape);
    ASSERT_EQ(static_cast<int64_t>(out.size()), shape.length());
    for (size_t i = 0; i < out.size(); ++i)
      ASSERT_EQ(out[i], uint8_t(200 + 85 * (i % shape.channels)))
          << shape.height << "x" << shape.width << " at " << i;
  }
}

// At the file's own size nothing is filtered: RGB comes back byte for byte (channel order
// included), grey too, and grey asked for in 3 channels is each value three times.
TEST(DecodeImage, TheFilesOwnSizeComesBackExactly) {
  TempDir dir;
  // Not linear in x or y (a symmetric filter at scale 1 would keep a ramp as it is).
  const auto rgb = pixels(9, 6, 3, [](int x, int y) { return (x * x * 53 + y * y * 91) % 256; });
  const auto grey = pixels(9, 6, 1, [](int x, int y) { return (x * x * 29 + x * y * 67) % 256; });
  write_png(dir.file("rgb.png"), 9, 6, 3, rgb);
  write_png(dir.file("grey.png"), 9, 6, 1, grey);
  EXPECT_EQ(decode_file(dir.file("rgb.png"), {6, 9, 3}), rgb);
  EXPECT_EQ(decode_file(dir.file("grey.png"), {6, 9, 1}), grey);
  std::vector<uint8_t> repeated;
  for (uint8_t v : grey) repeated.insert(repeated.end(), {v, v, v});
  EXPECT_EQ(decode_file(dir.file("grey.png"), {6, 9, 3}), repeated);
  const auto bytes = read_bytes(dir.file("rgb.png"));
  const auto image = decode_image(bytes.data(), bytes.size(), {6, 9, 3}, "rgb.png", {});
  EXPECT_EQ(image.fit.resampling, Resampling::kCopied);
  EXPECT_EQ(decode_image(bytes.data(), bytes.size(), {3, 4, 3}, "rgb.png", {}).fit.resampling,
            Resampling::kShrunk);
}

TEST(DecodeImage, CropsTheCentreToTheTargetAspect) {
  TempDir dir;
  // 40 x 20: white in the middle 20 columns, black in the 10 on each side. A square crop keeps
  // the white middle only; a 20 x 40 target (wider than tall) keeps it all.
  const auto p = pixels(40, 20, 1, [](int x, int) { return x >= 10 && x < 30 ? 255 : 0; });
  write_png(dir.file("bar.png"), 40, 20, 1, p);
  for (uint8_t v : decode_file(dir.file("bar.png"), {8, 8, 1})) ASSERT_EQ(v, 255);
  const auto wide = decode_file(dir.file("bar.png"), {10, 20, 1});
  EXPECT_EQ(wide[0], 0);            // the left border is kept
  EXPECT_EQ(wide[10], 255);         // and the middle
  EXPECT_EQ(wide[5 * 20 + 19], 0);  // and the right border
}

TEST(DecodeImage, RefusesNonImagesAndHugeSourcesWithTheFileName) {
  const std::string text = "not an image";
  expect_throw_with<std::runtime_error>(
      [&] {
        decode_image(
            reinterpret_cast<const uint8_t*>(text.data()), text.size(), {4, 4, 3}, "t.png");
      },
      {"t.png", "not a PNG or JPEG"});
  // A PNG header claiming 20000 x 20000 pixels: refused before any allocation.
  TempDir dir;
  write_png(dir.file("s.png"), 1, 1, 1, {7});
  auto bytes = read_bytes(dir.file("s.png"));
  for (int i : {16, 20}) {  // IHDR width and height, big-endian
    bytes[i] = 0, bytes[i + 1] = 0, bytes[i + 2] = 0x4e, bytes[i + 3] = 0x20;
  }
  expect_throw_with<std::runtime_error>(
      [&] {
        decode_image(bytes.data(), bytes.size(), {4, 4, 1}, "huge.png");
      },
      {"huge.png", "20000 x 20000", "more than 16384 a side"});
}

// Corrupted PNG and JPEG bytes: each either decodes to the asked size or throws runtime_error.
TEST(DecodeImage, FuzzedBytesDecodeOrThrowNeverCrash) {
  TempDir dir;
  const auto p = pixels(13, 9, 3, [](int x, int y) { return (x * 37 + y * 11) % 256; });
  write_png(dir.file("f.png"), 13, 9, 3, p);
  write_jpg(dir.file("f.jpg"), 13, 9, 3, p);
  std::mt19937 rng(1);
  int decoded = 0, refused = 0;
  for (const char* name : {"f.png", "f.jpg"}) {
    const auto clean = read_bytes(dir.file(name));
    for (int trial = 0; trial < 1500; ++trial) {
      auto bytes = clean;
      const int edits = 1 + static_cast<int>(rng() % 8);
      for (int e = 0; e < edits; ++e) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
      if (trial % 3 == 0) bytes.resize(rng() % bytes.size());  // truncated too
      try {
        const auto out = decode_image(bytes.data(), bytes.size(), {6, 5, 3}, name);
        ASSERT_EQ(out.size(), 90u);
        ++decoded;
      } catch (const std::runtime_error& e) {
        ASSERT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
        ++refused;
      }
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(decoded, 0);
}

// A folder of 9 images of mixed sizes and formats, one of them in a subfolder, and one file
// named .png that is not an image.
void write_mixed_folder(const std::string& dir) {
  std::filesystem::create_directories(dir + "/more");
  for (int i = 0; i < 8; ++i) {
    const int w = 5 + 3 * i, h = 4 + 2 * (i % 3);
    const auto p = pixels(w, h, 3, [i](int x, int y) { return (i * 30 + x + y) % 256; });
    const std::string name = dir + (i == 7 ? "/more/" : "/") + "img" + std::to_string(i);
    if (i % 2)
      write_png(name + ".png", w, h, 3, p);
    else
      write_jpg(name + ".JPG", w, h, 3, p);
  }
  write_png(dir + "/gray.png", 6, 6, 1, pixels(6, 6, 1, [](int x, int) { return x * 40; }));
  write_bytes(dir + "/broken.png", {0x89, 'P', 'N', 'G', 1, 2, 3});
  write_bytes(dir + "/notes.txt", {'h', 'i'});
}

TEST(PackImageFolder, MixedFilesBecomeAnImagesPackAndABrokenOneIsSkipped) {
  TempDir in, out;
  write_mixed_folder(in.path());
  ImageFolderOptions o;
  o.from = in.path();
  o.out = out.path();
  o.height = 17;
  o.width = 23;
  o.test_fraction = 0.2;
  const auto report = pack_image_folder(o);
  EXPECT_EQ(report.train + report.test, 9);  // 10 files named as images, one broken
  EXPECT_EQ(report.test, 2);
  ASSERT_EQ(report.skipped.size(), 1u);
  EXPECT_NE(report.skipped[0].first.find("broken.png"), std::string::npos);
  const auto header = read_packed_header(out.file("train.pack"));
  EXPECT_EQ(header.dataset, "images");
  EXPECT_EQ(header.shape, (ImageShape{17, 23, 3}));
  // None has the packed size: all resized, the wider ones cropped; the broken one counted.
  const FolderRecord train = *header.folder,
                     test = *read_packed_header(out.file("test.pack")).folder;
  EXPECT_EQ(train, report.train_record);
  EXPECT_EQ(train.copied + test.copied, 0);
  EXPECT_EQ(train.shrunk + train.enlarged + test.shrunk + test.enlarged, 9);
  EXPECT_GT(train.cropped + test.cropped, 0);
  EXPECT_EQ(train.skipped + test.skipped, 1);
  DataOptions data;
  data.dataset = "images";
  data.dir = out.path();
  EXPECT_EQ(load_split(data, Split::kTrain).count + load_split(data, Split::kTest).count, 9);

  // The same seed packs the same bytes; packing again needs --force.
  TempDir again;
  o.out = again.path();
  pack_image_folder(o);
  EXPECT_EQ(read_bytes(out.file("train.pack")), read_bytes(again.file("train.pack")));
  expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); }, {"--force"});
}

TEST(PackImageFolder, StrictRefusesABrokenFileAndWritesNothing) {
  TempDir in, out;
  write_mixed_folder(in.path());
  ImageFolderOptions o;
  o.from = in.path();
  o.out = out.path();
  o.height = o.width = 8;
  o.strict = true;
  expect_throw_with<std::runtime_error>([&] { pack_image_folder(o); }, {"broken.png", "--strict"});
  EXPECT_TRUE(std::filesystem::is_empty(out.path()));
}

// Each file its own constant (10 + 20 i): train.pack holds the three train files' values and
// test.pack the test file's, read back from the packed pixels.
TEST(PackImageFolder, TrainAndTestSubfoldersAreTheSplits) {
  TempDir in, out;
  int i = 0;
  for (const char* split : {"train", "test"}) {
    std::filesystem::create_directories(in.file(split));
    for (int n = 0; n < (split[1] == 'r' ? 3 : 1); ++n, ++i)
      write_png(in.file(std::string(split) + "/" + std::to_string(n) + ".png"),
                4,
                4,
                1,
                pixels(4, 4, 1, [i](int, int) { return 10 + 20 * i; }));
  }
  ImageFolderOptions o;
  o.from = in.path();
  o.out = out.path();
  o.height = o.width = 2;
  o.channels = 1;
  const auto report = pack_image_folder(o);
  EXPECT_EQ(report.train, 3);
  EXPECT_EQ(report.test, 1);
  auto firsts = [](const std::string& path) {  // each image's first value, sorted
    const ImageSet set = PackedFile::open(path, PackedFile::Verify::kNow)->image_set();
    std::vector<int> v;
    for (int64_t n = 0; n < set.count; ++n) {
      for (int k = 0; k < 4; ++k) EXPECT_EQ(set.image(n)[k], set.image(n)[0]) << path;
      v.push_back(set.image(n)[0]);
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_EQ(firsts(out.file("train.pack")), (std::vector<int>{10, 30, 50}));
  EXPECT_EQ(firsts(out.file("test.pack")), (std::vector<int>{70}));
}

TEST(PackImageFolder, RefusesBadSizesChannelsFractionsAndEmptyFolders) {
  TempDir in, out;
  ImageFolderOptions o;
  o.from = in.path();
  o.out = out.path();
  o.height = o.width = 8;
  expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); },
                                           {"no train images", in.path()});
  for (int64_t side : {0, 1025}) {
    o.height = side;
    expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); },
                                             {"--size", "1 to 1024"});
  }
  o.height = 8;
  o.channels = 2;
  expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); }, {"--channels 2"});
  o.channels = 3;
  o.test_fraction = 1;
  expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); }, {"--test-fraction"});
  o.test_fraction = 0.1;
  o.from = in.file("missing");
  expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); }, {"is not a folder"});
}

// --bits 5: every subpixel is the 8-bit pack's value >> 3, and the header says 5 bits; a header
// of another dataset claiming fewer than 8 bits, or one written before the field (0), reads as
// refused and as 8.
TEST(PackImageFolder, BitsStoreTheTopBitsAndTheHeaderSaysSo) {
  TempDir in, eight, five;
  write_mixed_folder(in.path());
  ImageFolderOptions o;
  o.from = in.path();
  o.height = o.width = 9;
  o.out = eight.path();
  pack_image_folder(o);
  o.out = five.path();
  o.bits = 5;
  pack_image_folder(o);
  const auto a = read_bytes(eight.file("train.pack")), b = read_bytes(five.file("train.pack"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = kPackedHeaderBytesMax; i < a.size(); ++i) ASSERT_EQ(b[i], a[i] >> 3) << i;
  EXPECT_EQ(read_packed_header(five.file("train.pack")).bits, 5);
  EXPECT_EQ(read_packed_header(eight.file("train.pack")).bits, 8);
  DataOptions data;
  data.dataset = "images";
  data.dir = five.path();
  EXPECT_EQ(dataset_bits(data), 5);
  EXPECT_EQ(load_split(data, Split::kTrain).bits, 5);
  data.bits = 8;
  expect_throw_with<std::runtime_error>([&] { load_split(data, Split::kTrain); },
                                        {"5-bit subpixels", "data.bits is 8"});
  o.bits = 9;
  expect_throw_with<std::invalid_argument>([&] { pack_image_folder(o); }, {"--bits 9"});

  PackedHeader h;
  h.dataset = "cifar10";
  h.shape = {32, 32, 3};
  h.count = 1;
  h.bits = 5;
  std::vector<uint8_t> file(kPackedHeaderBytes + 3072, 0);
  h.payload_crc = payload_crc(file.data() + kPackedHeaderBytes, 3072, 1);
  auto header = encode_packed_header(h);
  std::copy(header.begin(), header.end(), file.begin());
  expect_throw_with<std::runtime_error>(
      [&] { check_packed_bytes(file.data(), file.size(), "c.pack"); },
      {"c.pack", "5 bits per subpixel", "8 for cifar10"});
  h.bits = 0;  // as files written before the field existed hold
  header = encode_packed_header(h);
  std::copy(header.begin(), header.end(), file.begin());
  EXPECT_EQ(check_packed_bytes(file.data(), file.size(), "c.pack").bits, 8);
}

}  // namespace
}  // namespace combiner::data
