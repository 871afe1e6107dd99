// The dataset registry: names, shapes and default folders, and load_split's refusals of unknown
// datasets, missing folders and bad val_size values.
#include "data/dataset.h"

#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;

TEST(Dataset, NamesShapesAndDefaultFolders) {
  EXPECT_EQ(dataset_names(), (std::vector<std::string>{"fashion_mnist", "cifar10", "imagenet64"}));
  EXPECT_EQ(dataset_shape("fashion_mnist"), (ImageShape{28, 28, 1}));
  EXPECT_EQ(dataset_shape("cifar10"), (ImageShape{32, 32, 3}));
  EXPECT_EQ(dataset_shape("imagenet64"), (ImageShape{64, 64, 3}));
  EXPECT_EQ(dataset_shape("cifar10").length(), 3072);
  EXPECT_EQ(default_dir("fashion_mnist"), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(default_dir("cifar10"), "data/cifar-10-batches-bin");
  EXPECT_EQ(default_dir("imagenet64"), "data/imagenet64");
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
  options.dir = dir.path().string();
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
