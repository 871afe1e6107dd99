// The `data` config section as plain data.
#pragma once

#include <cstdint>
#include <string>

namespace combiner::data {

struct DataOptions {
  // fashion_mnist | cifar10 | imagenet64 | imagenet32 | images
  std::string dataset = "fashion_mnist";
  std::string dir;       // folder of the dataset's files; "" = dataset default
  int64_t val_size = 0;  // images held out from the end of the training set
  // The images' shape and bits per subpixel. 0 until resolved (resolve_shape): a named
  // dataset's own (8 bits), or for `images` the packed header's, so a run's config.yaml and its
  // checkpoints carry them.
  int64_t height = 0, width = 0, channels = 0, bits = 0;
};

}  // namespace combiner::data
