// Fashion-MNIST idx3 files, plain and gzipped. Inputs starting with 'Z' are gzipped here first
// (the rest of the input), so the header and size checks are explored behind the gzip layer
// too, where mutations of a real .gz would mostly just break its CRC.
#include <zlib.h>

#include <cstdint>
#include <vector>

#include "data/fashion_mnist.h"
#include "fuzz_common.h"

using namespace combiner;

namespace {

std::vector<uint8_t> gzip(const uint8_t* data, size_t size) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    fuzz::bug("deflateInit2 failed");
  std::vector<uint8_t> out(deflateBound(&z, size) + 32);
  z.next_in = const_cast<uint8_t*>(data);
  z.avail_in = static_cast<uInt>(size);
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  if (deflate(&z, Z_FINISH) != Z_STREAM_END) fuzz::bug("deflate did not finish");
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void parse(const uint8_t* data, size_t size) {
  const std::string name = "fuzz-images-idx3-ubyte";
  fuzz::refuses_cleanly(
      [&] {
        const data::ImageSet set = data::parse_idx_images(data, size, name);
        if (!(set.shape == data::ImageShape{28, 28, 1}) ||
            set.pixels.size() != static_cast<size_t>(set.count) * 784)
          fuzz::bug("accepted an idx file whose pixels do not match its count");
      },
      name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == 'Z') {
    const auto gz = gzip(data + 1, size - 1);
    parse(gz.data(), gz.size());
  } else {
    parse(data, size);
  }
  return 0;
}
