// CIFAR-10 binary batches. A batch is exactly 30,730,000 bytes, which no mutation reaches, so
// inputs starting with 'T' are tiled to that size and the result checked record by record
// against the planar layout (slow: 30 MB per run); other inputs go in as they are and must be
// refused by name.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/cifar10.h"
#include "fuzz_common.h"

using namespace combiner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz_batch.bin";
  if (size < 2 || data[0] != 'T') {
    if (fuzz::refuses_cleanly([&] { data::parse_cifar10_batch(data, size, name); }, name) &&
        size != 30730000)
      fuzz::bug("accepted a batch of " + std::to_string(size) + " bytes");
    return 0;
  }
  // Tile the input by doubling copies (cheap under the sanitizers).
  std::vector<uint8_t> batch(data::kCifarRecordsPerFile * 3073);
  size_t filled = std::min(batch.size(), size - 1);
  std::memcpy(batch.data(), data + 1, filled);
  while (filled < batch.size()) {
    const size_t n = std::min(filled, batch.size() - filled);
    std::memcpy(batch.data() + filled, batch.data(), n);
    filled += n;
  }
  const data::ImageSet set = data::parse_cifar10_batch(batch.data(), batch.size(), name);
  for (int64_t r = 0; r < set.count; r += 1111)
    for (int64_t p = 0; p < 1024; ++p)
      for (int64_t c = 0; c < 3; ++c)
        if (set.image(r)[p * 3 + c] != batch[r * 3073 + 1 + c * 1024 + p])
          fuzz::bug("record " + std::to_string(r) + " is not interleaved correctly");
  return 0;
}
