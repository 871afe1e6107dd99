// CIFAR-10 reader for the binary version (cifar-10-batches-bin): each file is 10000 records of
// one label byte followed by 3072 image bytes stored as R, G and B planes of 32x32, which are
// interleaved here into the sequence order (raster over pixels, R,G,B of a pixel consecutive).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image_set.h"

namespace combiner::data {

constexpr int64_t kCifarRecordsPerFile = 10000;

// One batch file; std::runtime_error naming the path and expected vs found bytes unless it
// holds exactly kCifarRecordsPerFile records.
ImageSet read_cifar10_batch(const std::string& path);
// The same for a batch file held in memory; name is used in messages.
ImageSet parse_cifar10_batch(const uint8_t* data, size_t size, const std::string& name);

// data_batch_1.bin .. data_batch_5.bin (train, 50000 images) or test_batch.bin (test) in dir.
ImageSet load_cifar10(const std::string& dir, OfficialSplit split);

// Planar [C][H*W] bytes to interleaved [H*W][C]: the conversion CIFAR and the ImageNet npz
// batches both need. out must hold C * pixels bytes and not overlap planar.
void planar_to_interleaved(const uint8_t* planar, int64_t pixels, int64_t channels, uint8_t* out);

}  // namespace combiner::data
