// combiner-data pack's library half: packed Fashion-MNIST and ImageNet-64 (PNG and npz) read
// back exactly as the published readers read them, val is a slice of the mapped training file,
// ImageNet-64 streams in chunks across npz batches, and packing refuses to replace files
// without force and leaves them intact when the disk fills up.
#include "data/pack.h"

#include <stb/stb_image_write.h>

#include <filesystem>

#include "child_process.h"
#include "data/dataset.h"
#include "data/imagenet64.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

namespace fs = std::filesystem;
using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;
using combiner::testing::run_python;
using combiner::testing::TempDir;

void expect_same_images(const ImageSet& a, const ImageSet& b) {
  ASSERT_EQ(a.shape, b.shape);
  ASSERT_EQ(a.count, b.count);
  EXPECT_TRUE(std::equal(a.data(), a.data() + a.count * a.shape.length(), b.data()));
}

DataOptions options_for(const std::string& dataset, const std::string& dir, int64_t val) {
  DataOptions o;
  o.dataset = dataset;
  o.dir = dir;
  o.val_size = val;
  return o;
}

TEST(Pack, FashionMnistReadsBackAsThePublishedFiles) {
  TempDir out;
  PackOptions pack;
  pack.dataset = "fashion_mnist";
  pack.out = out.path();
  const auto paths = pack_dataset(pack);
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], out.file("train.pack"));
  EXPECT_EQ(fs::file_size(out.file("train.pack")), 64u + 60000u * 784u);
  EXPECT_EQ(fs::file_size(out.file("test.pack")), 64u + 10000u * 784u);

  const auto published = options_for("fashion_mnist", "", 1000);
  const auto packed = options_for("fashion_mnist", out.path(), 1000);
  const TrainVal mapped = load_train_val(packed);
  EXPECT_TRUE(mapped.train.pixels.empty());  // mapped, not read into memory
  ASSERT_TRUE(mapped.val.storage);
  EXPECT_EQ(mapped.val.storage, mapped.train.storage);  // val is a slice of the same mapping
  EXPECT_EQ(mapped.val.data(), mapped.train.data() + 59000 * 784);
  const TrainVal in_memory = load_train_val(published);
  expect_same_images(mapped.train, in_memory.train);
  expect_same_images(mapped.val, in_memory.val);
  expect_same_images(load_split(packed, Split::kTest), load_split(published, Split::kTest));
  expect_same_images(load_split(packed, Split::kVal), in_memory.val);
}

TEST(Pack, RefusesToReplaceWithoutForceAndKeepsOldFilesOnAFullDisk) {
  TempDir out;
  PackOptions pack;
  pack.dataset = "fashion_mnist";
  pack.out = out.path();
  pack_dataset(pack);
  const auto before = read_bytes(out.file("test.pack"));
  expect_throw_with<std::invalid_argument>([&] { pack_dataset(pack); },
                                           {out.path(), "already holds", "--force"});
  pack.force = true;
  // The train file fills the 10 MB "disk"; nothing may change.
  const std::string message = combiner::testing::message_in_child(
      combiner::testing::file_size_limit(10 << 20), [&] { pack_dataset(pack); });
  EXPECT_NE(message.find("cannot write '" + out.file("train.pack") + "'"), std::string::npos)
      << message;
  EXPECT_EQ(read_bytes(out.file("test.pack")), before);
  EXPECT_EQ(fs::file_size(out.file("train.pack")), 64u + 60000u * 784u);
  for (const auto& entry : fs::directory_iterator(out.path()))
    EXPECT_NE(entry.path().extension(), ".tmp") << entry.path();
  EXPECT_NO_THROW(pack_dataset(pack));  // with --force and room, it replaces them
}

TEST(Pack, RefusesMismatchedAndIncompletePackedFolders) {
  TempDir out;
  PackOptions pack;
  pack.dataset = "fashion_mnist";
  pack.out = out.path();
  pack_dataset(pack);
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options_for("cifar10", out.path(), 0), Split::kTest); },
      {out.file("test.pack"), "fashion_mnist images", "data.dataset is cifar10"});
  fs::remove(out.file("test.pack"));
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options_for("fashion_mnist", out.path(), 0), Split::kTest); },
      {out.path(), "test.pack", "combiner-data pack"});
  pack.dataset = "mnist";
  EXPECT_THROW(pack_dataset(pack), std::invalid_argument);
  pack.dataset = "cifar10";
  pack.from = out.file("nowhere");
  expect_throw_with<std::runtime_error>([&] { pack_dataset(pack); }, {"nowhere", "cifar10"});
}

// ImageNet-64 in npz batches of 3, 3, ... read 4 at a time crosses every batch boundary.
TEST(Pack, Imagenet64StreamsAcrossNpzBatchesAndPngFolders) {
  TempDir dir;
  ASSERT_EQ(run_python(dir, R"(
rng = np.random.default_rng(5)
for i in range(1, 11):
    np.savez('train_data_batch_%d.npz' % i, data=rng.integers(0, 256, (3, 12288), dtype=np.uint8))
np.savez('val_data.npz', data=rng.integers(0, 256, (2, 12288), dtype=np.uint8))
)"),
            0);
  const ImageSet whole = load_imagenet64(dir.path(), OfficialSplit::kTrain);
  ASSERT_EQ(whole.count, 30);
  Imagenet64Reader reader(dir.path(), OfficialSplit::kTrain);
  EXPECT_EQ(reader.count(), 30);
  std::vector<uint8_t> streamed(30 * 12288);
  int64_t done = 0;
  while (int64_t n = reader.read(streamed.data() + done * 12288, 4)) done += n;
  EXPECT_EQ(done, 30);
  EXPECT_EQ(streamed, whole.pixels);

  TempDir out;
  PackOptions pack;
  pack.dataset = "imagenet64";
  pack.from = dir.path();
  pack.out = out.path();
  pack_dataset(pack);
  const auto packed = options_for("imagenet64", out.path(), 5);
  const auto published = options_for("imagenet64", dir.path(), 5);
  expect_same_images(load_split(packed, Split::kTrain), load_split(published, Split::kTrain));
  expect_same_images(load_split(packed, Split::kTest), load_split(published, Split::kTest));

  // A PNG folder: decoded a chunk at a time in file-name order.
  TempDir png;
  fs::create_directories(png.file("train"));
  fs::create_directories(png.file("valid"));
  std::vector<uint8_t> pixels(12288);
  for (int i = 0; i < 5; ++i) {
    for (size_t p = 0; p < pixels.size(); ++p) pixels[p] = static_cast<uint8_t>(p * (i + 3));
    const std::string folder = i < 4 ? "train/" : "valid/";
    ASSERT_NE(stbi_write_png(png.file(folder + "img_" + std::to_string(i) + ".png").c_str(),
                             64,
                             64,
                             3,
                             pixels.data(),
                             64 * 3),
              0);
  }
  pack.from = png.path();
  pack.force = true;
  pack_dataset(pack);
  const auto png_packed = options_for("imagenet64", out.path(), 0);
  const auto png_published = options_for("imagenet64", png.path(), 0);
  expect_same_images(load_split(png_packed, Split::kTrain),
                     load_split(png_published, Split::kTrain));
  expect_same_images(load_split(png_packed, Split::kTest), load_split(png_published, Split::kTest));
}

}  // namespace
}  // namespace combiner::data
