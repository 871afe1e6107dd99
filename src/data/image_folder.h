// combiner-data pack --from FOLDER --size H[xW]: a folder of PNG and JPEG files (your own images)
// as an `images` pack, train.pack and test.pack (data/packed.h), for data.dataset: images.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/image_set.h"
#include "data/packed.h"
#include "data/resize.h"

namespace combiner::data {

struct ImageFolderOptions {
  std::string from;               // searched recursively for *.png, *.jpg, *.jpeg (any case)
  std::string out;                // folder for train.pack and test.pack; created if missing
  int64_t height = 0, width = 0;  // the packed size, 1 to kMaxImageSide each
  int64_t channels = 3;           // 3: RGB; 1: grayscale (stb_image's luma)
  // Filters for the images that need resizing (data/resize.h); an image whose centred crop
  // already has the packed size is copied as it is, whatever they say.
  ResizeFilters filters;
  // Bits per subpixel, 1 to 8: an 8-bit value v is stored as v >> (8 - bits), as the 5-bit
  // CelebA-HQ benchmark defines its data; the model then predicts 2^bits values.
  int64_t bits = 8;
  // Without `train/` and `test/` subfolders in `from`, this fraction of the shuffled files (at
  // least one when above 0) is the test split; with both, they are the splits.
  double test_fraction = 0.1;
  uint64_t seed = 0;            // the order of each split's images
  bool strict = false;          // refuse a file that does not decode, instead of skipping it
  bool force = false;           // replace packed files already in `out`
  double progress_every_s = 5;  // seconds between progress lines (images/s, ETA)
  int threads = 0;              // decoding threads; 0 = every core
};

struct ImageFolderReport {
  std::vector<std::string> paths;                            // the packed files written
  int64_t train = 0, test = 0;                               // images in each
  std::vector<std::pair<std::string, std::string>> skipped;  // file, why
  FolderRecord train_record, test_record;                    // as each file's header holds it
};

// One encoded image to shape.height x shape.width x shape.channels subpixels (the packed order):
// decoded by util::decode_image_bytes (libjpeg-turbo, libpng) with shape.channels channels and at
// most 16384 pixels a side, then fitted by fit_image (data/resize.h):
// cropped to the largest centred rectangle of the target's aspect ratio, copied when that has
// the target size, else resized with `filters`. std::runtime_error "<name>: <why>" for bytes
// that are not a decodable image.
struct DecodedImage {
  std::vector<uint8_t> pixels;
  Fit fit;  // copied or resized, cropped or not
};
DecodedImage decode_image(const uint8_t* bytes,
                          size_t size,
                          const ImageShape& shape,
                          const std::string& name,
                          const ResizeFilters& filters);
// The same with the default filters; the pixels only.
std::vector<uint8_t> decode_image(const uint8_t* bytes,
                                  size_t size,
                                  const ImageShape& shape,
                                  const std::string& name);

// Packs options.from into options.out. Nothing in `out` changes until both files are complete.
// std::invalid_argument for a bad size or channel count, a missing or empty folder, packed files
// already in `out` without force; std::runtime_error for a file that does not decode under
// strict, or an unwritable `out`.
ImageFolderReport pack_image_folder(const ImageFolderOptions& options);

}  // namespace combiner::data
