// CIFAR-10: batch files written here in the binary format (label byte + R, G, B planes) come
// back interleaved per pixel, in batch order; files of any other size are refused; load_split
// holds out the end of the training set.
#include "data/cifar10.h"

#include <filesystem>

#include "data/dataset.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

// Planar value of batch b, record r, channel c, pixel p.
uint8_t planar_value(int b, int64_t r, int64_t c, int64_t p) {
  return static_cast<uint8_t>((b * 101 + r * 7 + c * 85 + p * 3) % 256);
}

std::vector<uint8_t> batch_file(int b, int64_t records = kCifarRecordsPerFile) {
  std::vector<uint8_t> out(records * 3073);
  for (int64_t r = 0; r < records; ++r) {
    uint8_t* record = out.data() + r * 3073;
    record[0] = static_cast<uint8_t>(r % 10);  // label, skipped by the reader
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < 1024; ++p) record[1 + c * 1024 + p] = planar_value(b, r, c, p);
  }
  return out;
}

void write_dataset(const TempDir& dir) {
  for (int b = 1; b <= 5; ++b)
    write_bytes(dir.file("data_batch_" + std::to_string(b) + ".bin"), batch_file(b));
  write_bytes(dir.file("test_batch.bin"), batch_file(0));
}

TEST(Cifar10, PlanarToInterleaved) {
  const uint8_t planar[] = {1, 2, 3, 4, 10, 20, 30, 40, 100, 200, 250, 255};  // R, G, B planes
  uint8_t out[12];
  planar_to_interleaved(planar, 4, 3, out);
  const uint8_t expected[] = {1, 10, 100, 2, 20, 200, 3, 30, 250, 4, 40, 255};
  EXPECT_TRUE(std::equal(out, out + 12, expected));
}

TEST(Cifar10, ReadsABatchInSequenceOrder) {
  TempDir dir;
  write_bytes(dir.file("b.bin"), batch_file(3));
  const ImageSet set = read_cifar10_batch(dir.file("b.bin"));
  ASSERT_EQ(set.count, 10000);
  ASSERT_EQ(set.shape, (ImageShape{32, 32, 3}));
  ASSERT_EQ(set.pixels.size(), 10000u * 3072u);
  for (int64_t r : {0, 1, 4567, 9999})
    for (int64_t p : {0, 1, 31, 32, 500, 1023})
      for (int64_t c = 0; c < 3; ++c)
        ASSERT_EQ(set.image(r)[p * 3 + c], planar_value(3, r, c, p)) << r << " " << p << " " << c;
}

TEST(Cifar10, RefusesTruncatedAndOversizedBatches) {
  TempDir dir;
  auto bytes = batch_file(1);
  bytes.pop_back();
  write_bytes(dir.file("short.bin"), bytes);
  expect_throw_with<std::runtime_error>([&] { read_cifar10_batch(dir.file("short.bin")); },
                                        {"short.bin", "expected 30730000", "found 30729999"});
  bytes.push_back(0);
  bytes.push_back(0);
  write_bytes(dir.file("long.bin"), bytes);
  expect_throw_with<std::runtime_error>([&] { read_cifar10_batch(dir.file("long.bin")); },
                                        {"long.bin", "expected 30730000", "found 30730001"});
  expect_throw_with<std::runtime_error>([&] { read_cifar10_batch(dir.file("absent.bin")); },
                                        {"absent.bin"});
}

TEST(Cifar10, LoadsSplitsInBatchOrderWithAValidationHoldout) {
  TempDir dir;
  write_dataset(dir);
  DataOptions options;
  options.dataset = "cifar10";
  options.dir = dir.path();
  options.val_size = 1000;
  const ImageSet train = load_split(options, Split::kTrain);
  const ImageSet val = load_split(options, Split::kVal);
  const ImageSet test = load_split(options, Split::kTest);
  EXPECT_EQ(train.count, 49000);
  EXPECT_EQ(val.count, 1000);
  EXPECT_EQ(test.count, 10000);
  EXPECT_EQ(train.pixels.size(), 49000u * 3072u);
  EXPECT_EQ(val.pixels.size(), 1000u * 3072u);
  // Image 10000 * (b - 1) + r of train is record r of batch b; val is the end of batch 5.
  EXPECT_EQ(train.image(0)[0], planar_value(1, 0, 0, 0));
  EXPECT_EQ(train.image(10000)[1], planar_value(2, 0, 1, 0));
  EXPECT_EQ(train.image(48999)[5], planar_value(5, 8999, 2, 1));
  EXPECT_EQ(val.image(0)[3], planar_value(5, 9000, 0, 1));
  EXPECT_EQ(val.image(999)[3071], planar_value(5, 9999, 2, 1023));
  EXPECT_EQ(test.image(7)[4], planar_value(0, 7, 1, 1));

  options.val_size = 50000;
  expect_throw_with<std::invalid_argument>([&] { load_split(options, Split::kTrain); },
                                           {"val_size", "50000"});
  options.val_size = 0;
  EXPECT_EQ(load_split(options, Split::kTrain).count, 50000);
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kVal); },
                                        {"val", "empty"});

  std::filesystem::remove(dir.file("data_batch_4.bin"));
  std::filesystem::remove(dir.file("data_batch_2.bin"));
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options, Split::kTrain); },
      {dir.path(), "data_batch_2.bin, data_batch_4.bin"});
  write_bytes(dir.file("data_batch_2.bin"), batch_file(2, 9999));
  write_bytes(dir.file("data_batch_4.bin"), batch_file(4));
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTrain); },
                                        {"data_batch_2.bin", "found 30726927"});
}

}  // namespace
}  // namespace combiner::data
