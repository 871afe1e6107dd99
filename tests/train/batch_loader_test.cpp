// The background loader hands out exactly BatchStream's batches, whether the batch asked for is
// the one it prefetched or not (a wrong guess is gathered again, never served), across epoch
// boundaries, and from a memory-mapped set as from one in memory.
#include "train/batch_loader.h"

#include <gtest/gtest.h>

#include "data/packed.h"
#include "test_utils.h"

namespace combiner::train {
namespace {

data::ImageSet small_set(int64_t count) {
  data::ImageSet images;
  images.shape = {2, 2, 1};
  images.count = count;
  for (int64_t i = 0; i < count * 4; ++i) images.pixels.push_back(static_cast<uint8_t>(i * 7));
  return images;
}

TEST(BatchLoader, ServesBatchStreamsBatchesWhateverWasPrefetched) {
  const auto images = small_set(7);
  BatchStream reference(images, 3);
  BatchLoader loader(images, 3, torch::kCPU);
  // (position, count, next): in order, across epochs of 7, then guesses that miss.
  const std::vector<std::array<int64_t, 3>> calls = {{0, 3, 3},
                                                     {3, 3, 6},
                                                     {6, 3, 9},
                                                     {9, 3, 12},
                                                     {12, 3, 40},
                                                     {15, 2, -1},
                                                     {20, 5, 25},
                                                     {1, 5, -1}};
  for (const auto& [position, count, next] : calls) {
    SCOPED_TRACE(position);
    const auto batch = loader.take(position, count, next);
    EXPECT_TRUE(torch::equal(batch, reference.take(position, count)));
    EXPECT_EQ(batch.sizes(), (torch::IntArrayRef{count, 4}));
  }
}

TEST(BatchLoader, ReadsMappedSetsLikeInMemoryOnes) {
  testing::TempDir dir;
  const auto in_memory = [] {
    data::ImageSet set;
    set.shape = {28, 28, 1};
    set.count = 9;
    for (int64_t i = 0; i < 9 * 784; ++i) set.pixels.push_back(static_cast<uint8_t>(i % 253));
    return set;
  }();
  data::PackedWriter writer(dir.file("train.pack"), "fashion_mnist", in_memory.shape, 9);
  writer.write(in_memory.data(), 9);
  writer.complete();
  writer.rename_into_place();
  const auto mapped =
      data::PackedFile::open(dir.file("train.pack"), data::PackedFile::Verify::kNow)->image_set();
  BatchLoader a(in_memory, 1, torch::kCPU), b(mapped, 1, torch::kCPU);
  for (int64_t position = 0; position < 30; position += 4)
    EXPECT_TRUE(torch::equal(a.take(position, 4, position + 4), b.take(position, 4, position + 4)));
}

}  // namespace
}  // namespace combiner::train
