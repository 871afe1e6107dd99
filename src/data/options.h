// The `data` config section as plain data.
#pragma once

#include <cstdint>
#include <string>

namespace combiner::data {

struct DataOptions {
  std::string dataset = "fashion_mnist";  // fashion_mnist | cifar10 | imagenet64
  std::string dir;                        // folder of the dataset's files; "" = dataset default
  int64_t val_size = 0;                   // images held out from the end of the training set
};

}  // namespace combiner::data
