// ImageNet-64 npz batches through the project's zip reader: the archive as a whole (data.npy
// decoded into images), and every member it lists read on its own.
#include <cstdint>

#include "data/imagenet64.h"
#include "data/zip.h"
#include "fuzz_common.h"

using namespace combiner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz_batch.npz";
  fuzz::refuses_cleanly(
      [&] {
        const data::ImageSet set = data::parse_imagenet64_npz(data, size, name);
        if (set.pixels.size() != static_cast<size_t>(set.count) * 12288)
          fuzz::bug("accepted an npz whose pixels do not match its count");
      },
      name);
  fuzz::refuses_cleanly(
      [&] {
        const auto archive = data::ZipArchive::in_memory(data, size, name);
        for (const auto& entry : archive.entries())
          fuzz::refuses_cleanly(
              [&] {
                if (archive.read(entry.name).size() != entry.size)
                  fuzz::bug("member '" + entry.name + "' read back at another size");
              },
              name);
      },
      name);
  return 0;
}
