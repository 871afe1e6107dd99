// CRC-32C against published vectors, and the TFRecord framing: a record read back whole, a
// record cut short at every byte read as a truncated tail, a flipped bit refused by name.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "util/test_support.h"
#include "util/tfrecord.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;

const uint8_t* bytes_of(const std::string& s) {
  return reinterpret_cast<const uint8_t*>(s.data());
}

TEST(Crc32c, KnownVectors) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI), appendix B.4: 32 bytes of zeros, of ones, ascending, descending.
  uint8_t block[32];
  std::memset(block, 0, sizeof(block));
  EXPECT_EQ(crc32c(block, sizeof(block)), 0x8A9136AAu);
  std::memset(block, 0xff, sizeof(block));
  EXPECT_EQ(crc32c(block, sizeof(block)), 0x62A8AB43u);
  for (int i = 0; i < 32; ++i) block[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(crc32c(block, sizeof(block)), 0x46DD794Eu);
  for (int i = 0; i < 32; ++i) block[i] = static_cast<uint8_t>(31 - i);
  EXPECT_EQ(crc32c(block, sizeof(block)), 0x113FDB5Cu);
}

TEST(Crc32c, MaskIsTensorFlows) {
  EXPECT_EQ(mask_crc32c(0), 0xa282ead8u);
  const uint32_t crc = 0xE3069283u;
  EXPECT_EQ(mask_crc32c(crc), ((crc >> 15) | (crc << 17)) + 0xa282ead8u);
}

TEST(TfRecord, FrameLayout) {
  const std::string record = frame_record("abc");
  ASSERT_EQ(record.size(), 19u);
  uint64_t length = 0;
  std::memcpy(&length, record.data(), 8);
  EXPECT_EQ(length, 3u);
  uint32_t length_crc = 0, data_crc = 0;
  std::memcpy(&length_crc, record.data() + 8, 4);
  std::memcpy(&data_crc, record.data() + 15, 4);
  EXPECT_EQ(length_crc, mask_crc32c(crc32c(record.data(), 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(data_crc, mask_crc32c(crc32c("abc", 3)));
}

TEST(TfRecord, RecordsReadBackAndACutTailIsReported) {
  const std::string file = frame_record("first") + frame_record("") + frame_record("third record");
  const RecordScan whole = read_records(bytes_of(file), file.size(), "f");
  EXPECT_EQ(whole.records, (std::vector<std::string>{"first", "", "third record"}));
  EXPECT_EQ(whole.truncated_tail, 0u);
  const size_t two = frame_record("first").size() + frame_record("").size();
  for (size_t cut = two; cut < file.size(); ++cut) {
    const RecordScan scan = read_records(bytes_of(file), cut, "f");
    EXPECT_EQ(scan.records, (std::vector<std::string>{"first", ""})) << "cut at " << cut;
    EXPECT_EQ(scan.truncated_tail, cut - two) << "cut at " << cut;
  }
}

TEST(TfRecord, CorruptBytesAreRefusedWithTheOffset) {
  const std::string first = frame_record("first");
  std::string file = first + frame_record("second");
  file[first.size() + 13] ^= 0x01;  // a data byte of the second record
  expect_throw_with<std::runtime_error>(
      [&] { read_records(bytes_of(file), file.size(), "events.bin"); },
      {"events.bin", "at byte " + std::to_string(first.size()), "CRC of its data"});
  file = first + frame_record("second");
  file[first.size() + 2] ^= 0x01;  // its length field
  expect_throw_with<std::runtime_error>(
      [&] { read_records(bytes_of(file), file.size(), "events.bin"); },
      {"events.bin", "CRC of its length"});
}

}  // namespace
}  // namespace combiner::util
