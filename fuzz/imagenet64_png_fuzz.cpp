// ImageNet-64 PNG images: decoded from memory exactly as read_png_folder decodes each file.
#include <cstdint>
#include <vector>

#include "data/imagenet64.h"
#include "fuzz_common.h"

using namespace combiner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz_image.png";
  std::vector<uint8_t> out(12288);
  fuzz::refuses_cleanly([&] { data::decode_imagenet64_png(data, size, name, out.data()); }, name);
  return 0;
}
