// PNG and JPEG bytes through every entry point that decodes images from outside:
// util::read_image_header and util::decode_image_bytes (the file's own channels), then
// data::decode_image (what combiner-data pack --from does per file: 1 or 3 channels, cropped and
// resized) and data::decode_imagenet64_png (what the ImageNet PNG folders do). Images whose
// header claims more than 2^20 pixels are decoded only that far (header and limits): as in
// libjpeg-turbo's own fuzzers, a huge but valid image would only make a run slow.
#include <cstdint>
#include <string>
#include <vector>

#include "data/image_folder.h"
#include "data/imagenet64.h"
#include "fuzz_common.h"
#include "util/image_decode.h"

using namespace combiner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz_image";
  util::ImageHeader header;
  if (!fuzz::refuses_cleanly([&] { header = util::read_image_header(data, size, name); }, name))
    return 0;
  if (header.width < 1 || header.height < 1 || header.channels < 1 || header.channels > 4)
    fuzz::bug("read_image_header accepted " + std::to_string(header.width) + " x " +
              std::to_string(header.height) + " x " + std::to_string(header.channels));
  if (header.width * header.height > (int64_t{1} << 20)) {
    util::DecodeLimits limits;
    limits.max_side = 1024;
    if (fuzz::refuses_cleanly([&] { util::decode_image_bytes(data, size, name, 3, limits); }, name))
      fuzz::bug("an image larger than the limits decoded");
    return 0;
  }
  util::DecodedImage image;
  if (fuzz::refuses_cleanly([&] { image = util::decode_image_bytes(data, size, name); }, name)) {
    if (image.width != header.width || image.height != header.height ||
        image.channels != header.channels ||
        image.pixels.size() != size_t(image.width * image.height * image.channels))
      fuzz::bug("decoded " + std::to_string(image.width) + " x " + std::to_string(image.height) +
                " x " + std::to_string(image.channels) + " (" +
                std::to_string(image.pixels.size()) + " bytes) from a header of " +
                std::to_string(header.width) + " x " + std::to_string(header.height) + " x " +
                std::to_string(header.channels));
  }
  const data::ImageShape shape{5, 7, size % 2 ? 1 : 3};
  std::vector<uint8_t> packed;
  if (fuzz::refuses_cleanly([&] { packed = data::decode_image(data, size, shape, name); }, name) &&
      packed.size() != size_t(shape.length()))
    fuzz::bug("decode_image returned " + std::to_string(packed.size()) + " bytes");
  std::vector<uint8_t> out(12288);
  fuzz::refuses_cleanly([&] { data::decode_imagenet64_png(data, size, name, out.data()); }, name);
  return 0;
}
