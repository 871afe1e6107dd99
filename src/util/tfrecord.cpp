// CRC-32C by a byte-wise table (the records are small: scalars, a config, a PNG now and then),
// and the TFRecord framing around it.
#include "util/tfrecord.h"

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

namespace combiner::util {
namespace {

// Reflected polynomial of CRC-32C (Castagnoli).
constexpr uint32_t kCastagnoli = 0x82f63b78u;
constexpr uint32_t kMaskDelta = 0xa282ead8u;

constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1) ? (c >> 1) ^ kCastagnoli : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t get_le(const uint8_t* at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | at[i];
  return value;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = kCrc32cTable[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

uint32_t mask_crc32c(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string frame_record(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, mask_crc32c(crc32c(out.data(), 8)), 4);
  out += data;
  put_le(out, mask_crc32c(crc32c(data.data(), data.size())), 4);
  return out;
}

RecordScan read_records(const uint8_t* data, size_t size, const std::string& name) {
  RecordScan scan;
  size_t at = 0;
  while (at < size) {
    const size_t left = size - at;
    if (left < 12) break;
    const uint64_t length = get_le(data + at, 8);
    if (mask_crc32c(crc32c(data + at, 8)) != get_le(data + at + 8, 4))
      throw std::runtime_error(name + ": TFRecord at byte " + std::to_string(at) +
                               ": the CRC of its length field does not match (corrupt file)");
    if (length > left - 12 || left - 12 - length < 4) break;  // cut short: the tail of a killed run
    const uint8_t* payload = data + at + 12;
    if (mask_crc32c(crc32c(payload, length)) != get_le(payload + length, 4))
      throw std::runtime_error(name + ": TFRecord at byte " + std::to_string(at) + " (" +
                               std::to_string(length) +
                               " bytes): the CRC of its data does not match (corrupt file)");
    scan.records.emplace_back(reinterpret_cast<const char*>(payload), length);
    at += 16 + length;
  }
  scan.truncated_tail = size - at;
  return scan;
}

RecordScan read_record_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open: " + std::strerror(errno));
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return read_records(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path);
}

}  // namespace combiner::util
