// TFRecord framing, the container of TensorBoard's event files: each record is
//   uint64 length | uint32 masked CRC-32C of the length bytes | data | uint32 masked CRC-32C of
//   data
// all little-endian. The CRC is Castagnoli's (CRC-32C), masked as TensorFlow does so that a CRC
// stored inside CRC'd data does not cancel out. No protobuf here: the payloads are opaque bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace combiner::util {

// CRC-32C (Castagnoli) of size bytes; crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);

// TensorFlow's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t mask_crc32c(uint32_t crc);

// One whole record around data: 16 + data.size() bytes.
std::string frame_record(const std::string& data);

// The records of a TFRecord file held in memory. A record cut short at the end (a run killed
// mid-write, a full disk) is not an error: reading stops before it and truncated_tail says how
// many bytes it had. A CRC that does not match is std::runtime_error naming `name` and the
// byte offset of the record.
struct RecordScan {
  std::vector<std::string> records;
  size_t truncated_tail = 0;  // bytes after the last whole record
};
RecordScan read_records(const uint8_t* data, size_t size, const std::string& name);

// The same for a file; std::runtime_error naming path if it cannot be read.
RecordScan read_record_file(const std::string& path);

}  // namespace combiner::util
