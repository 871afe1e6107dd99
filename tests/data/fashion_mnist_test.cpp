// Fashion-MNIST: idx3 files written here (gzipped with zlib and plain) read back exactly;
// bad magic, dimensions, truncated, oversized and corrupt files refused; the installed
// dataset loads in full through load_split.
#include "data/fashion_mnist.h"

#include <zlib.h>

#include "data/data_files.h"
#include "data/dataset.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::put_be32;
using combiner::testing::read_bytes;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

// An idx3 file: header (magic, count, rows, cols) then pixels.
std::vector<uint8_t> idx3(uint32_t magic,
                          uint32_t count,
                          uint32_t rows,
                          uint32_t cols,
                          const std::vector<uint8_t>& pixels) {
  std::vector<uint8_t> out;
  put_be32(out, magic);
  put_be32(out, count);
  put_be32(out, rows);
  put_be32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<uint8_t> pattern(int64_t images) {
  std::vector<uint8_t> pixels(images * 784);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>((i * 37 + 11) % 256);
  return pixels;
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
            static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(file), Z_OK);
}

TEST(FashionMnist, ReadsGzippedAndPlainIdx) {
  TempDir dir;
  const auto pixels = pattern(3);
  write_gz(dir.file("a.gz"), idx3(2051, 3, 28, 28, pixels));
  write_bytes(dir.file("b"), idx3(2051, 3, 28, 28, pixels));
  for (const char* name : {"a.gz", "b"}) {
    const ImageSet set = read_idx_images(dir.file(name));
    EXPECT_EQ(set.count, 3) << name;
    EXPECT_EQ(set.shape, (ImageShape{28, 28, 1})) << name;
    EXPECT_EQ(set.pixels, pixels) << name;
  }
}

TEST(FashionMnist, RefusesWrongHeadersAndSizes) {
  TempDir dir;
  write_gz(dir.file("labels.gz"), idx3(2049, 3, 28, 28, pattern(3)));
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("labels.gz")); },
                                        {"labels.gz", "2051", "2049"});
  write_gz(dir.file("dims.gz"), idx3(2051, 1, 32, 32, std::vector<uint8_t>(1024)));
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("dims.gz")); },
                                        {"dims.gz", "32x32", "28x28"});
  auto pixels = pattern(3);
  pixels.pop_back();
  write_gz(dir.file("short.gz"), idx3(2051, 3, 28, 28, pixels));
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("short.gz")); },
                                        {"short.gz", "expected 2352", "found 2351"});
  pixels = pattern(4);
  write_bytes(dir.file("long"), idx3(2051, 3, 28, 28, pixels));
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("long")); },
                                        {"long", "expected 2352", "found 3136"});
  write_bytes(dir.file("header"), {0, 0, 8, 3, 0});
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("header")); },
                                        {"header", "16 bytes", "found 5"});
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("absent.gz")); },
                                        {"absent.gz"});
}

TEST(FashionMnist, RefusesACutOrCorruptGzipStream) {
  TempDir dir;
  write_gz(dir.file("full.gz"), idx3(2051, 20, 28, 28, pattern(20)));
  auto bytes = read_bytes(dir.file("full.gz"));
  write_bytes(dir.file("cut.gz"),
              std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  EXPECT_THROW(read_idx_images(dir.file("cut.gz")), std::runtime_error);
  for (size_t i = 30; i < bytes.size() - 8; i += 7) bytes[i] ^= 0x5a;
  write_bytes(dir.file("garbled.gz"), bytes);
  expect_throw_with<std::runtime_error>([&] { read_idx_images(dir.file("garbled.gz")); },
                                        {"garbled.gz"});
}

TEST(FashionMnist, FindsGzippedOrPlainNamesInAFolder) {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx3(2051, 2, 28, 28, pattern(2)));
  write_bytes(dir.file("t10k-images-idx3-ubyte"), idx3(2051, 1, 28, 28, pattern(1)));
  EXPECT_EQ(load_fashion_mnist(dir.path(), OfficialSplit::kTrain).count, 2);
  EXPECT_EQ(load_fashion_mnist(dir.path(), OfficialSplit::kTest).count, 1);
  TempDir empty;
  expect_throw_with<std::runtime_error>(
      [&] { load_fashion_mnist(empty.path(), OfficialSplit::kTest); },
      {empty.path(), "t10k-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte'"});
}

// The real dataset, installed by the project's setup script (Debian dataset-fashion-mnist).
TEST(FashionMnist, LoadsTheInstalledDataset) {
  DataOptions options;
  options.dataset = "fashion_mnist";
  const ImageSet train = load_split(options, Split::kTrain);
  const ImageSet test = load_split(options, Split::kTest);
  EXPECT_EQ(train.count, 60000);
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(train.shape.length(), 784);
  EXPECT_EQ(train.pixels.size(), 60000u * 784u);
  EXPECT_EQ(test.pixels.size(), 10000u * 784u);
  // Fashion-MNIST's mean intensity is about 0.286 * 255 = 73; a misread file would not be.
  double sum = 0;
  for (uint8_t v : train.pixels) sum += v;
  const double mean = sum / static_cast<double>(train.pixels.size());
  EXPECT_GT(mean, 65.0);
  EXPECT_LT(mean, 80.0);

  options.val_size = 5000;
  const ImageSet held = load_split(options, Split::kTrain);
  const ImageSet val = load_split(options, Split::kVal);
  EXPECT_EQ(held.count, 55000);
  EXPECT_EQ(val.count, 5000);
  EXPECT_TRUE(std::equal(held.pixels.begin(), held.pixels.end(), train.pixels.begin()));
  EXPECT_TRUE(std::equal(val.pixels.begin(), val.pixels.end(), train.pixels.begin() + 55000 * 784));
}

}  // namespace
}  // namespace combiner::data
