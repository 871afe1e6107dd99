// The dataset registry: names, shapes and default folders, and load_split's refusals of unknown
// datasets, missing folders and bad val_size values.
#include "data/dataset.h"

#include <utility>
#include <vector>

#include "data/packed.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;

TEST(Dataset, NamesShapesAndDefaultFolders) {
  EXPECT_EQ(dataset_names(),
            (std::vector<std::string>{
                "fashion_mnist", "cifar10", "imagenet64", "imagenet32", "images"}));
  EXPECT_EQ(dataset_shape("fashion_mnist"), (ImageShape{28, 28, 1}));
  EXPECT_EQ(dataset_shape("cifar10"), (ImageShape{32, 32, 3}));
  EXPECT_EQ(dataset_shape("imagenet64"), (ImageShape{64, 64, 3}));
  EXPECT_EQ(dataset_shape("cifar10").length(), 3072);
  EXPECT_EQ(default_dir("fashion_mnist"), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(default_dir("cifar10"), "data/cifar-10-batches-bin");
  EXPECT_EQ(default_dir("imagenet64"), "data/imagenet64");
  EXPECT_EQ(default_dir("images"), "");
  EXPECT_EQ(dataset_shape("imagenet32"), (ImageShape{32, 32, 3}));
  EXPECT_EQ(default_dir("imagenet32"), "data/imagenet32");
}

TEST(Dataset, RefusesUnknownDatasets) {
  expect_throw_with<std::invalid_argument>([] { dataset_shape("mnist"); }, {"mnist", "cifar10"});
  EXPECT_THROW(default_dir("cifar"), std::invalid_argument);
  DataOptions options;
  options.dataset = "svhn";
  expect_throw_with<std::invalid_argument>([&] { load_split(options, Split::kTrain); }, {"svhn"});
}

TEST(Dataset, RefusesMissingFoldersAndNegativeHoldouts) {
  TempDir dir;
  DataOptions options;
  options.dataset = "cifar10";
  options.dir = dir.file("nowhere");
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTest); },
                                        {options.dir, "cifar10"});
  options.dir = dir.path();
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTest); },
                                        {"test_batch.bin", options.dir});
  options.dataset = "imagenet64";
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTest); },
                                        {options.dir, "valid", "val_data.npz"});
  options.val_size = -1;
  expect_throw_with<std::invalid_argument>([&] { load_split(options, Split::kTrain); },
                                           {"val_size", "-1"});
}

TEST(Dataset, SplitNames) {
  EXPECT_EQ(parse_split("val"), Split::kVal);
  EXPECT_STREQ(split_name(Split::kTest), "test");
  EXPECT_THROW(parse_split("validation"), std::invalid_argument);
}

}  // namespace
}  // namespace combiner::data

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;

// A packed `images` folder of H x W x C: train.pack with `train` images, test.pack with 2, image
// n's subpixels all n.
void write_images_pack(const std::string& dir, const ImageShape& shape, int64_t train) {
  for (const auto& [name, count] : {std::pair<std::string, int64_t>{"train.pack", train},
                                    std::pair<std::string, int64_t>{"test.pack", 2}}) {
    PackedWriter writer(dir + "/" + name, "images", shape, count);
    for (int64_t n = 0; n < count; ++n) {
      const std::vector<uint8_t> image(static_cast<size_t>(shape.length()), uint8_t(n));
      writer.write(image.data(), 1);
    }
    writer.complete();
    writer.rename_into_place();
  }
}

TEST(ImagesDataset, TakesItsShapeFromThePackedHeaderAtAnySize) {
  for (const ImageShape shape : {ImageShape{17, 23, 3}, ImageShape{1, 1, 1}}) {
    TempDir dir;
    write_images_pack(dir.path(), shape, 5);
    DataOptions options;
    options.dataset = "images";
    options.dir = dir.path();
    options.val_size = 1;
    EXPECT_EQ(dataset_shape(options), shape);
    EXPECT_EQ(resolve_shape(options), shape);
    EXPECT_EQ(options.height, shape.height);
    EXPECT_EQ(options.width, shape.width);
    EXPECT_EQ(options.channels, shape.channels);
    const TrainVal sets = load_train_val(options);
    EXPECT_EQ(sets.train.shape, shape);
    EXPECT_EQ(sets.train.count, 4);
    EXPECT_EQ(sets.val.count, 1);
    EXPECT_EQ(sets.val.data()[0], 4);  // the last training image
    EXPECT_EQ(load_split(options, Split::kTest).count, 2);
  }
}

TEST(ImagesDataset, RefusesNoFolderNoPackAHalfShapeAndAShapeItDoesNotHave) {
  DataOptions options;
  options.dataset = "images";
  expect_throw_with<std::invalid_argument>([&] { dataset_shape(options); },
                                           {"data.dir", "combiner-data pack --from"});
  TempDir dir;
  options.dir = dir.path();
  expect_throw_with<std::invalid_argument>([&] { dataset_shape(options); },
                                           {"data.dir", "holds no train.pack"});
  options.height = 8;
  expect_throw_with<std::invalid_argument>([&] { dataset_shape(options); },
                                           {"set all three or none", "8 x 0 x 0"});
  write_images_pack(dir.path(), {4, 4, 1}, 3);
  options.width = 8;
  options.channels = 1;  // 8 x 8 x 1 asked, 4 x 4 x 1 packed
  // Both shapes named, and the file: the header's and the config's.
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options, Split::kTrain); },
      {dir.file("train.pack") + "' holds 4 x 4 x 1 images",
       "the config asks for 8 x 8 x 1 (data.height/width/channels)"});
  DataOptions cifar;
  cifar.dataset = "cifar10";
  cifar.height = 64;
  expect_throw_with<std::invalid_argument>([&] { dataset_shape(cifar); },
                                           {"cifar10 images are 32 x 32 x 3", "64 x 0 x 0"});
  expect_throw_with<std::invalid_argument>([] { dataset_shape("images"); },
                                           {"packed files", "data.height"});
}

TEST(ImagesDataset, HeaderRefusesSidesPastTheLimit) {
  TempDir dir;
  PackedWriter writer(dir.file("train.pack"), "images", {1, kMaxImageSide + 1, 1}, 1);
  const std::vector<uint8_t> image(kMaxImageSide + 1, 0);
  writer.write(image.data(), 1);
  writer.complete();
  writer.rename_into_place();
  expect_throw_with<std::runtime_error>([&] { read_packed_header(dir.file("train.pack")); },
                                        {"train.pack", "height and width 1 to 1024"});
}

}  // namespace
}  // namespace combiner::data
