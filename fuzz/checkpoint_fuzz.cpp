// Checkpoint files, in three modes chosen by the first byte (x = first byte % 4):
//   x odd: the rest is the payload (the torch zip container); the target puts a header with
//          the right size and CRC-32 in front, so mutations get past the checksum;
//   x = 2: the rest is the pickle itself (data.pkl); the target wraps it in a torch container
//          with a few 64-byte tensor records, so mutations reach the unpickler and the checks of
//          every entry instead of stopping at the container's own CRCs;
//   x = 0: the rest is a whole file, header and all.
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_common.h"
#include "train/checkpoint.h"
#include "zip_writer.h"

using namespace combiner;

namespace {

std::vector<char> with_header(const uint8_t* payload, size_t size) {
  const uint64_t length = size;
  const uint32_t crc = static_cast<uint32_t>(crc32(0L, payload, static_cast<uInt>(size)));
  std::vector<char> file = {'C', 'M', 'B', 'C', 'K', 'P', 'T', '1'};
  file.resize(20 + size);
  std::memcpy(file.data() + 8, &length, 8);
  std::memcpy(file.data() + 16, &crc, 4);
  if (size > 0) std::memcpy(file.data() + 20, payload, size);
  return file;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  at::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string name = "fuzz.ckpt";
  std::vector<char> file;
  switch (data[0] % 4) {
    case 1:
    case 3:
      file = with_header(data + 1, size - 1);
      break;
    case 2: {
      std::vector<fuzz::ZipMember> members = {{"archive/data.pkl", {data + 1, data + size}}};
      for (int i = 0; i < 8; ++i)
        members.push_back({"archive/data/" + std::to_string(i), fuzz::Bytes(64, 0x3f)});
      members.push_back({"archive/version", {'3', '\n'}});
      const fuzz::Bytes container = fuzz::zip(members);
      file = with_header(container.data(), container.size());
      break;
    }
    default:
      file.assign(data + 1, data + size);
  }
  fuzz::refuses_cleanly([&] { train::parse_checkpoint(file.data(), file.size(), name); }, name);
  return 0;
}
