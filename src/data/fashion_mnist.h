// Fashion-MNIST reader: idx3 image files (magic 2051, N x 28 x 28 uint8), gzipped or plain.
// Files are read whole and parsed in memory (gzip recognised by its magic); every size in the
// header is checked against the bytes actually present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/image_set.h"

namespace combiner::data {

// One idx3 file of 28x28 images, gzipped or not. std::runtime_error naming the path on a bad
// magic, other image dimensions, or a payload that is not exactly count * 784 bytes.
ImageSet read_idx_images(const std::string& path);
// The same for a file's bytes held in memory; name is used in messages.
ImageSet parse_idx_images(const uint8_t* data, size_t size, const std::string& name);

// train-images-idx3-ubyte(.gz) or t10k-images-idx3-ubyte(.gz) in dir.
ImageSet load_fashion_mnist(const std::string& dir, OfficialSplit split);

}  // namespace combiner::data
