// ImageNet 64x64: PNG folders written with stb_image_write load in file-name order with exact
// pixels; other sizes, channel counts and undecodable files are refused by name; npz batches
// written by numpy (compressed and not) match numpy's own planar-to-interleaved transpose.
#include "data/imagenet64.h"

#include <stb/stb_image_write.h>

#include <filesystem>

#include "data/dataset.h"
#include "data/pack.h"
#include "util/npy.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;
using combiner::testing::run_python;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

std::vector<uint8_t> image_bytes(int seed, int side = 64, int channels = 3) {
  std::vector<uint8_t> pixels(side * side * channels);
  for (size_t i = 0; i < pixels.size(); ++i)
    pixels[i] = static_cast<uint8_t>((seed * 53 + i * 13) % 256);
  return pixels;
}

void write_seeded_png(const std::string& path, int seed, int side = 64, int channels = 3) {
  const auto pixels = image_bytes(seed, side, channels);
  ASSERT_NE(stbi_write_png(path.c_str(), side, side, channels, pixels.data(), side * channels), 0);
}

TEST(Imagenet64, LoadsPngFoldersInFileNameOrder) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("train"));
  std::filesystem::create_directories(dir.file("valid"));
  // Written out of order; "img_10" sorts before "img_2".
  write_seeded_png(dir.file("train/img_2.png"), 2);
  write_seeded_png(dir.file("train/img_10.png"), 10);
  write_seeded_png(dir.file("train/img_1.png"), 1);
  write_seeded_png(dir.file("valid/v.png"), 7);
  write_bytes(dir.file("train/notes.txt"), {1, 2, 3});  // not a PNG: ignored
  EXPECT_EQ(detect_imagenet64_format(dir.path()), Imagenet64Format::kPng);

  DataOptions options;
  options.dataset = "imagenet64";
  options.dir = dir.path();
  options.val_size = 1;
  const ImageSet train = load_split(options, Split::kTrain);
  const ImageSet val = load_split(options, Split::kVal);
  const ImageSet test = load_split(options, Split::kTest);
  ASSERT_EQ(train.count, 2);
  ASSERT_EQ(val.count, 1);
  ASSERT_EQ(test.count, 1);
  EXPECT_EQ(train.shape, (ImageShape{64, 64, 3}));
  const auto first = image_bytes(1), second = image_bytes(10), third = image_bytes(2);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), train.image(0)));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), train.image(1)));
  EXPECT_TRUE(std::equal(third.begin(), third.end(), val.image(0)));
  const auto valid = image_bytes(7);
  EXPECT_EQ(test.pixels, valid);
}

TEST(Imagenet64, RefusesOtherSizesChannelsAndBrokenFiles) {
  const std::vector<std::tuple<std::string, int, int, std::string>> cases = {
      {"small.png", 32, 3, "32x32 with 3 channels"},
      {"grey.png", 64, 1, "64x64 with 1 channels"},
      {"rgba.png", 64, 4, "64x64 with 4 channels"},
  };
  for (const auto& [name, side, channels, found] : cases) {
    TempDir dir;
    write_seeded_png(dir.file("a.png"), 0);
    write_seeded_png(dir.file(name), 0, side, channels);
    expect_throw_with<std::runtime_error>([&] { read_png_folder(dir.path()); },
                                          {dir.file(name), found, "expected 64x64 with 3"});
  }
  TempDir dir;
  write_seeded_png(dir.file("a.png"), 0);
  auto bytes = read_bytes(dir.file("a.png"));
  write_bytes(dir.file("b.png"), std::vector<uint8_t>(bytes.begin(), bytes.begin() + 60));
  expect_throw_with<std::runtime_error>([&] { read_png_folder(dir.path()); },
                                        {dir.file("b.png"), "cannot decode"});
  TempDir empty;
  expect_throw_with<std::runtime_error>([&] { read_png_folder(empty.path()); },
                                        {empty.path(), "no .png"});
  expect_throw_with<std::runtime_error>([&] { read_png_folder(empty.file("train")); },
                                        {empty.file("train")});
}

TEST(Imagenet64, LoadsNpzBatchesLikeNumpyTransposes) {
  TempDir dir;
  // Batches 1-5 compressed (deflate), 6-10 stored, as np.savez and np.savez_compressed write.
  ASSERT_EQ(run_python(dir, R"(
rng = np.random.RandomState(0)
def planar(n):
    return rng.randint(0, 256, size=(n, 12288)).astype(np.uint8)
def interleaved(d):
    return d.reshape(-1, 3, 64, 64).transpose(0, 2, 3, 1).reshape(-1, 12288).copy()
parts = []
for i in range(1, 11):
    d = planar(i % 3 + 1)
    save = np.savez_compressed if i <= 5 else np.savez
    save('train_data_batch_%d.npz' % i, data=d, labels=np.arange(len(d)) + 1, mean=np.zeros(12288))
    parts.append(d)
np.save('expected_train.npy', interleaved(np.concatenate(parts)))
v = planar(4)
np.savez('val_data.npz', data=v, labels=np.ones(4, np.int64))
np.save('expected_val.npy', interleaved(v))
os.mkdir('bad')
np.savez('bad/shape.npz', data=np.zeros((2, 100), np.uint8))
np.savez('bad/float.npz', data=np.zeros((2, 12288), np.float32))
np.savez('bad/nodata.npz', x=np.zeros((2, 12288), np.uint8))
)"),
            0);
  EXPECT_EQ(detect_imagenet64_format(dir.path()), Imagenet64Format::kNpz);
  DataOptions options;
  options.dataset = "imagenet64";
  options.dir = dir.path();
  options.val_size = 2;
  const torch::Tensor expected = util::load_npy(dir.file("expected_train.npy"));
  ASSERT_EQ(expected.size(0), 20);
  const ImageSet train = load_split(options, Split::kTrain);
  const ImageSet val = load_split(options, Split::kVal);
  ASSERT_EQ(train.count, 18);
  ASSERT_EQ(val.count, 2);
  const uint8_t* e = expected.data_ptr<uint8_t>();
  EXPECT_TRUE(std::equal(train.pixels.begin(), train.pixels.end(), e));
  EXPECT_TRUE(std::equal(val.pixels.begin(), val.pixels.end(), e + 18 * 12288));
  const ImageSet test = load_split(options, Split::kTest);
  const torch::Tensor expected_val = util::load_npy(dir.file("expected_val.npy"));
  ASSERT_EQ(test.count, 4);
  EXPECT_TRUE(std::equal(test.pixels.begin(), test.pixels.end(), expected_val.data_ptr<uint8_t>()));

  expect_throw_with<std::runtime_error>([&] { read_imagenet64_npz(dir.file("bad/shape.npz")); },
                                        {"shape.npz", "[2, 100]"});
  expect_throw_with<std::runtime_error>([&] { read_imagenet64_npz(dir.file("bad/float.npz")); },
                                        {"float.npz", "<f4"});
  expect_throw_with<std::runtime_error>([&] { read_imagenet64_npz(dir.file("bad/nodata.npz")); },
                                        {"nodata.npz", "data.npy"});
  const auto bytes = read_bytes(dir.file("train_data_batch_3.npz"));
  write_bytes(dir.file("train_data_batch_3.npz"),
              std::vector<uint8_t>(bytes.begin(), bytes.begin() + bytes.size() / 2));
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTrain); },
                                        {"train_data_batch_3.npz"});
  std::filesystem::remove(dir.file("train_data_batch_7.npz"));
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTrain); },
                                        {dir.path(), "train_data_batch_7.npz"});
}

}  // namespace
// ImageNet-32: image-net.org's Imagenet32 npz batches (the same names, [N, 3072] planar rows),
// through the dataset registry and combiner-data's packer; a 64x64 batch is refused by name.
TEST(Imagenet32, LoadsNpzBatchesAndPacks) {
  TempDir dir;
  ASSERT_EQ(run_python(dir, R"(
rng = np.random.RandomState(1)
def planar(n):
    return rng.randint(0, 256, size=(n, 3072)).astype(np.uint8)
def interleaved(d):
    return d.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1).reshape(-1, 3072).copy()
parts = []
for i in range(1, 11):
    d = planar(i % 2 + 1)
    np.savez('train_data_batch_%d.npz' % i, data=d, labels=np.arange(len(d)) + 1)
    parts.append(d)
np.save('expected_train.npy', interleaved(np.concatenate(parts)))
np.savez('val_data.npz', data=planar(3), labels=np.ones(3, np.int64))
os.mkdir('big')
np.savez('big/b.npz', data=np.zeros((2, 12288), np.uint8))
)"),
            0);
  DataOptions options;
  options.dataset = "imagenet32";
  options.dir = dir.path();
  const ImageSet train = load_split(options, Split::kTrain);
  ASSERT_EQ(train.shape, (ImageShape{32, 32, 3}));
  const torch::Tensor expected = util::load_npy(dir.file("expected_train.npy"));
  ASSERT_EQ(train.count, expected.size(0));
  EXPECT_TRUE(std::equal(train.pixels.begin(), train.pixels.end(), expected.data_ptr<uint8_t>()));
  EXPECT_EQ(load_split(options, Split::kTest).count, 3);
  expect_throw_with<std::runtime_error>([&] { read_imagenet64_npz(dir.file("big/b.npz"), 32); },
                                        {"imagenet32", "b.npz", "[N, 3072]", "[2, 12288]"});

  PackOptions pack;
  pack.dataset = "imagenet32";
  pack.from = dir.path();
  pack.out = dir.file("packed");
  pack_dataset(pack);
  options.dir = pack.out;
  const ImageSet packed = load_split(options, Split::kTrain);
  EXPECT_EQ(packed.shape, (ImageShape{32, 32, 3}));
  ASSERT_EQ(packed.count, train.count);
  EXPECT_TRUE(std::equal(packed.data(), packed.data() + packed.count * 3072, train.pixels.data()));
}

}  // namespace combiner::data
