// Downsampled ImageNet 64x64 reader, and with side 32 the same for ImageNet 32x32 (the same
// files at the other size). Two layouts of a folder are recognised by what it holds:
//   png: <dir>/train/*.png and <dir>/valid/*.png (van den Oord et al. 2016, the version the
//        PixelRNN, Sparse Transformer and Combiner bits/dim figures use), sorted by file name;
//   npz: train_data_batch_1..10.npz and val_data.npz (image-net.org's 2017 box-resized version,
//        whose bits/dim are not comparable to the papers'; loaded but logged as such).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "data/image_set.h"

namespace combiner::data {

enum class Imagenet64Format { kPng, kNpz };

// kPng if dir holds train/ or valid/, kNpz if it holds the npz batches, else std::runtime_error
// naming dir and the expected files.
// `side` is 64 (ImageNet-64) or 32 (ImageNet-32) everywhere below.
Imagenet64Format detect_imagenet64_format(const std::string& dir, int64_t side = 64);

// Every *.png directly in folder, sorted by file name; each must be side x side with 3 channels.
ImageSet read_png_folder(const std::string& folder, int64_t side = 64);

// One PNG held in memory into out (3 * side^2 bytes); std::runtime_error naming name unless it
// decodes to side x side RGB. The size is read from the header before anything is decoded.
void decode_imagenet64_png(
    const uint8_t* data, size_t size, const std::string& name, uint8_t* out, int64_t side = 64);

// One image-net.org npz batch: its data.npy, uint8 [N, 3 * side^2] channel-planar.
ImageSet read_imagenet64_npz(const std::string& path, int64_t side = 64);
// The same for an npz archive held in memory; name is used in messages.
ImageSet parse_imagenet64_npz(const uint8_t* data,
                              size_t size,
                              const std::string& name,
                              int64_t side = 64);

ImageSet load_imagenet64(const std::string& dir, OfficialSplit split, int64_t side = 64);

// A split read in order, a chunk at a time (PNGs decoded on every core, npz batches one at a
// time), so combiner-data pack never holds the whole set in memory. The count is known on
// construction, from the file list or the npz headers; errors as load_imagenet64's.
class Imagenet64Reader {
 public:
  Imagenet64Reader(const std::string& dir, OfficialSplit split, int64_t side = 64);
  ~Imagenet64Reader();
  int64_t count() const;
  // Decodes the next min(n, images left) images into out; returns how many (0 at the end).
  int64_t read(uint8_t* out, int64_t n);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace combiner::data
