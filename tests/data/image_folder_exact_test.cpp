// combiner-data pack --from FOLDER read back pixel by pixel: Fashion-MNIST's own test images
// written as PNG files (grey, RGB, RGBA, palette) and packed at their own size give exactly the
// bytes the fashion_mnist reader gives, in any order, across the packer's 256-file chunks; the
// same images enlarged 2 x 2 and packed with --filter box come back exactly; a shuffled split
// puts every file in exactly one of train and test; each header records how it was made.
#include <gtest/gtest.h>
#include <stb/stb_image_write.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>

#include "data/data_files.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/image_folder.h"
#include "data/packed.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::TempDir;
using combiner::testing::write_png;
using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

// The first n images of the installed Fashion-MNIST test set, 784 bytes each.
std::vector<Bytes> fashion(int64_t n) {
  const ImageSet set = load_fashion_mnist(default_dir("fashion_mnist"), OfficialSplit::kTest);
  std::vector<Bytes> out;
  for (int64_t i = 0; i < n; ++i) out.emplace_back(set.image(i), set.image(i) + 784);
  return out;
}

// Every image of a packed file, in its order.
std::vector<Bytes> packed_images(const std::string& path) {
  const ImageSet set = PackedFile::open(path, PackedFile::Verify::kNow)->image_set();
  std::vector<Bytes> out;
  for (int64_t i = 0; i < set.count; ++i)
    out.emplace_back(set.image(i), set.image(i) + set.shape.length());
  return out;
}

std::vector<Bytes> sorted(std::vector<Bytes> images) {
  std::sort(images.begin(), images.end());
  return images;
}

// A palette PNG (colour type 3) written here: stb_image_write does not write palettes.
void write_palette_png(
    const std::string& path, int w, int h, const Bytes& index, const Bytes& rgb) {
  auto chunk = [](Bytes& out, const char* kind, const Bytes& data) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(data.size() >> s));
    Bytes body(kind, kind + 4);
    body.insert(body.end(), data.begin(), data.end());
    out.insert(out.end(), body.begin(), body.end());
    const auto crc = crc32(0, body.data(), static_cast<uInt>(body.size()));
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(crc >> s));
  };
  Bytes raw;  // each row: filter type 0, then its indices
  for (int y = 0; y < h; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), index.begin() + y * w, index.begin() + (y + 1) * w);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  Bytes idat(size);
  ASSERT_EQ(compress(idat.data(), &size, raw.data(), static_cast<uLong>(raw.size())), Z_OK);
  idat.resize(size);
  Bytes png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  chunk(png, "IHDR", {0, 0, 0, uint8_t(w), 0, 0, 0, uint8_t(h), 8, 3, 0, 0, 0});
  chunk(png, "PLTE", rgb);
  chunk(png, "IDAT", idat);
  chunk(png, "IEND", {});
  combiner::testing::write_bytes(path, png);
}

// Grey v as three distinct channels, so a swapped channel order cannot pass.
uint8_t red(uint8_t v) {
  return v;
}
uint8_t green(uint8_t v) {
  return static_cast<uint8_t>(255 - v);
}
uint8_t blue(uint8_t v) {
  return static_cast<uint8_t>(v / 2);
}
Bytes coloured(const Bytes& grey, int channels) {  // 3: RGB, 4: RGBA with alpha 7
  Bytes out;
  for (uint8_t v : grey) {
    out.insert(out.end(), {red(v), green(v), blue(v)});
    if (channels == 4) out.push_back(7);
  }
  return out;
}

// Packs in/ (train/ and test/ subfolders) into a fresh folder; returns the report.
ImageFolderReport pack(const TempDir& in,
                       const std::string& out,
                       int64_t size,
                       int64_t channels,
                       ResizeFilter shrink = ResizeFilter::kMitchell) {
  ImageFolderOptions o;
  o.from = in.path();
  o.out = out;
  o.height = o.width = size;
  o.channels = channels;
  o.filters.shrink = shrink;
  return pack_image_folder(o);
}

// 270 train images (past the first chunk of 256) and 30 test images, as grey PNG files; packed
// at 28 x 28 in 1 channel and in 3 (each value repeated), every split holds exactly its sources.
TEST(PackImageFolderExact, FashionMnistPngsPackToTheReadersBytes) {
  const auto images = fashion(300);
  TempDir in, grey, rgb;
  for (const char* split : {"train", "test"}) fs::create_directories(in.file(split));
  for (size_t i = 0; i < images.size(); ++i)
    write_png(
        in.file((i < 270 ? "train/" : "test/") + std::to_string(i) + ".png"), 28, 28, 1, images[i]);
  const std::vector<Bytes> train(images.begin(), images.begin() + 270),
      test(images.begin() + 270, images.end());

  const auto report = pack(in, grey.path(), 28, 1);
  EXPECT_EQ(sorted(packed_images(grey.file("train.pack"))), sorted(train));
  EXPECT_EQ(sorted(packed_images(grey.file("test.pack"))), sorted(test));
  FolderRecord expected;  // the default filters, every image copied
  expected.copied = 270;
  EXPECT_EQ(report.train_record, expected);
  EXPECT_EQ(read_packed_header(grey.file("train.pack")).folder, expected);
  expected.copied = 30;
  EXPECT_EQ(read_packed_header(grey.file("test.pack")).folder, expected);

  pack(in, rgb.path(), 28, 3);
  std::vector<Bytes> repeated;
  for (const auto& image : train) {
    repeated.emplace_back();
    for (uint8_t v : image) repeated.back().insert(repeated.back().end(), {v, v, v});
  }
  EXPECT_EQ(sorted(packed_images(rgb.file("train.pack"))), sorted(repeated));
}

// The same images as RGB, RGBA (alpha dropped) and palette PNG files give their colours exactly.
TEST(PackImageFolderExact, RgbRgbaAndPalettePngsPackExactly) {
  const auto images = fashion(30);
  Bytes palette;
  for (int v = 0; v < 256; ++v) palette.insert(palette.end(), {red(v), green(v), blue(v)});
  std::vector<Bytes> expected;
  for (const auto& image : images) expected.push_back(coloured(image, 3));
  for (const std::string kind : {"rgb", "rgba", "palette"}) {
    TempDir in, out;
    for (const char* split : {"train", "test"}) fs::create_directories(in.file(split));
    for (size_t i = 0; i < images.size(); ++i) {
      const std::string path = in.file((i < 25 ? "train/" : "test/") + std::to_string(i) + ".png");
      if (kind == "palette")
        write_palette_png(path, 28, 28, images[i], palette);
      else
        write_png(path, 28, 28, kind == "rgb" ? 3 : 4, coloured(images[i], kind == "rgb" ? 3 : 4));
    }
    const auto report = pack(in, out.path(), 28, 3);
    auto packed = packed_images(out.file("train.pack"));
    const auto test = packed_images(out.file("test.pack"));
    packed.insert(packed.end(), test.begin(), test.end());
    EXPECT_EQ(sorted(packed), sorted(expected)) << kind;
    EXPECT_EQ(report.train_record.copied + report.test_record.copied, 30) << kind;
  }
}

// Each Fashion-MNIST pixel drawn as a 2 x 2 block of a 56 x 56 PNG: --filter box averages each
// block back to the pixel exactly; Mitchell (the default) reaches into neighbouring blocks.
TEST(PackImageFolderExact, BoxShrinkingTwoByTwoBlocksGivesTheOriginals) {
  const auto images = fashion(40);
  TempDir in, box, mitchell;
  for (const char* split : {"train", "test"}) fs::create_directories(in.file(split));
  for (size_t i = 0; i < images.size(); ++i) {
    Bytes big(56 * 56);
    for (int y = 0; y < 56; ++y)
      for (int x = 0; x < 56; ++x) big[y * 56 + x] = images[i][(y / 2) * 28 + x / 2];
    write_png(in.file((i < 32 ? "train/" : "test/") + std::to_string(i) + ".png"), 56, 56, 1, big);
  }
  const auto report = pack(in, box.path(), 28, 1, ResizeFilter::kBox);
  EXPECT_EQ(sorted(packed_images(box.file("train.pack"))),
            sorted(std::vector<Bytes>(images.begin(), images.begin() + 32)));
  EXPECT_EQ(report.train_record.shrunk, 32);
  EXPECT_EQ(report.train_record.copied, 0);
  const auto header = read_packed_header(box.file("train.pack"));
  ASSERT_TRUE(header.folder);
  EXPECT_EQ(header.folder->filters.shrink, ResizeFilter::kBox);
  EXPECT_EQ(header.folder->shrunk, 32);

  pack(in, mitchell.path(), 28, 1);
  EXPECT_NE(sorted(packed_images(mitchell.file("train.pack"))),
            sorted(packed_images(box.file("train.pack"))));
  EXPECT_EQ(read_packed_header(mitchell.file("train.pack")).folder->filters.shrink,
            ResizeFilter::kMitchell);
}

// 300 distinct images (the index in the first two bytes) without train/ and test/: the shuffled
// split puts each in exactly one file, none twice, none lost, across the 256-file chunks.
TEST(PackImageFolderExact, AShuffledSplitKeepsEveryImageOnceInOneFile) {
  TempDir in, out;
  std::vector<Bytes> images;
  for (int i = 0; i < 300; ++i) {
    Bytes p(4 * 3 * 3);
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<uint8_t>((i * 7 + k * 13) % 256);
    p[0] = static_cast<uint8_t>(i % 256);
    p[1] = static_cast<uint8_t>(i / 256);
    images.push_back(p);
    write_png(in.file(std::to_string(i) + ".png"), 3, 4, 3, p);
  }
  ImageFolderOptions o;
  o.from = in.path();
  o.out = out.path();
  o.height = 4;
  o.width = 3;
  o.test_fraction = 0.1;
  const auto report = pack_image_folder(o);
  EXPECT_EQ(report.train, 270);
  EXPECT_EQ(report.test, 30);
  const auto train = sorted(packed_images(out.file("train.pack")));
  const auto test = sorted(packed_images(out.file("test.pack")));
  std::vector<Bytes> both;
  std::set_intersection(
      train.begin(), train.end(), test.begin(), test.end(), std::back_inserter(both));
  EXPECT_TRUE(both.empty()) << both.size() << " images in both splits";
  std::merge(train.begin(), train.end(), test.begin(), test.end(), std::back_inserter(both));
  EXPECT_EQ(both, sorted(images));
}

}  // namespace
}  // namespace combiner::data
