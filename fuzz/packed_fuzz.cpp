// Packed dataset files (data/packed.h), checked in memory as PackedFile::open checks a file.
// Inputs starting with 'V' become the payload of a fashion_mnist file with a correct header
// (so the accepting path and the payload CRC run too) and must be accepted with every image
// intact; anything else goes in as it is and must be refused by name unless it is valid.
#include <cstdint>
#include <cstring>
#include <vector>

#include "data/packed.h"
#include "fuzz_common.h"

using namespace combiner;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name = "fuzz.pack";
  if (size < 1 || data[0] != 'V') {
    data::PackedHeader header;
    if (fuzz::refuses_cleanly([&] { header = data::check_packed_bytes(data, size, name); }, name) &&
        header.header_bytes() + static_cast<size_t>(header.payload_bytes()) != size)
      fuzz::bug("accepted a file whose size disagrees with its header");
    return 0;
  }
  const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(size - 1) / 784);
  std::vector<uint8_t> payload(static_cast<size_t>(count * 784), 0);
  std::memcpy(payload.data(), data + 1, std::min(payload.size(), size - 1));
  data::PackedHeader header;
  header.dataset = "fashion_mnist";
  header.shape = {28, 28, 1};
  header.count = count;
  header.payload_crc = data::payload_crc(payload.data(), payload.size(), 1);
  const auto head = data::encode_packed_header(header);
  std::vector<uint8_t> file(head.begin(), head.end());
  file.insert(file.end(), payload.begin(), payload.end());
  const auto parsed = data::check_packed_bytes(file.data(), file.size(), name);
  if (parsed.count != count || parsed.payload_crc != header.payload_crc)
    fuzz::bug("a valid file did not read back as written");
  return 0;
}
