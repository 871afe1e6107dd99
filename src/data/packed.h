// Packed dataset files: one file per official split, a header and then every image's raw uint8
// subpixels in sequence order, so training maps the file and reads images in place. The page
// cache holds one copy for every process on the machine, start-up reads the header, and
// resident memory does not grow with the dataset.
//
// Header (little-endian):
//   0  char[8]  magic "CMBPACK\n"        32 u32 height      48 u64 image count
//   8  u32      format version (1 or 2)  36 u32 width       56 u32 CRC-32 (zlib) of the payload
//   12 u32      header bytes (64 or 128) 40 u32 channels    60 u32 CRC-32 of header bytes 0..59
//   16 char[16] dataset name, NUL-padded 44 u32 bits per subpixel (1 to 8; 0, as files written
//                                               before it existed hold, means 8)
// Version 2 (an `images` pack made from a folder) adds how it was made (FolderRecord):
//   64 u32 filter when shrinking    72 u64 images copied      96  u64 images cropped first
//   68 u32 filter when enlarging    80 u64 images shrunk      104 u64 files skipped
//      (ResizeFilter values)        88 u64 images enlarged    112 zero; 124 u32 CRC of 0..123
// Packs of the published datasets stay version 1, which older builds read too.
// The payload is count * height * width * channels bytes; the file is exactly header + payload.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/image_set.h"
#include "data/resize.h"

namespace combiner::data {

constexpr uint32_t kPackedVersion = 2;     // the newest version this build reads
constexpr size_t kPackedHeaderBytes = 64;  // the header of every version
constexpr size_t kFolderRecordBytes = 64;  // what version 2 adds after it
constexpr size_t kPackedHeaderBytesMax = kPackedHeaderBytes + kFolderRecordBytes;

// How an `images` pack was made from a folder (combiner-data pack --from), so that two packs of
// "the same" folder made differently can be told apart. Counts are of this file's images.
struct FolderRecord {
  ResizeFilters filters;  // what --filter and --upsample-filter asked for
  int64_t copied = 0;     // images whose (cropped) source had the packed size: copied, unfiltered
  int64_t shrunk = 0;     // resized with filters.shrink, no side enlarged
  int64_t enlarged = 0;   // resized, some side with filters.enlarge
  int64_t cropped = 0;    // cropped to the packed aspect first (also counted above)
  int64_t skipped = 0;    // files that did not decode
  bool operator==(const FolderRecord& o) const;
};
// "N copied unfiltered, N shrunk (mitchell), N enlarged (catmull-rom), N cropped".
std::string describe(const FolderRecord& record);

struct PackedHeader {
  std::string dataset;  // a dataset_names() entry (at most 15 characters)
  ImageShape shape;
  int64_t count = 0;
  int64_t bits = 8;  // subpixels are below 2^bits; below 8 only in an `images` pack (--bits)
  uint32_t payload_crc = 0;
  // Read from the file; when writing, 0 writes the version the contents need (1, or 2 with a
  // folder record) and anything else is written as it is (tests forge other versions).
  uint32_t version = 0;
  std::optional<FolderRecord> folder;  // version 2 only
  int64_t payload_bytes() const { return count * shape.length(); }
  // Where the payload starts: 64, or 128 with a folder record.
  size_t header_bytes() const { return folder ? kPackedHeaderBytesMax : kPackedHeaderBytes; }
};

// "train.pack" or "test.pack": the file of an official split in a packed folder.
std::string packed_file_name(OfficialSplit split);
// Whether dir holds a packed file of either split (by name; the header is checked on opening).
bool holds_packed_files(const std::string& dir);

// header.header_bytes() bytes.
std::vector<uint8_t> encode_packed_header(const PackedHeader& header);
// Parses the first bytes of a file of file_size bytes (at least kPackedHeaderBytesMax of them
// when the file has as many) and checks it: magic, version, header CRCs, a known shape, a folder
// record that adds up, and that the file holds exactly the header's payload. std::runtime_error
// "<name>: <what is wrong>" otherwise (a truncated file, another format, a newer version).
PackedHeader parse_packed_header(const uint8_t* data,
                                 size_t size,
                                 uint64_t file_size,
                                 const std::string& name);

// The header of the packed file at path, checked as parse_packed_header checks it (the payload's
// checksum is not read). std::runtime_error naming the file.
PackedHeader read_packed_header(const std::string& path);

// Largest height or width of an `images` pack; channels are 1 to 4.
constexpr int64_t kMaxImageSide = 1024;

// A whole packed file held in memory, checked as PackedFile::open(kNow) checks a file: its
// header, size and payload checksum (the fuzz target's entry). Errors name `name`.
PackedHeader check_packed_bytes(const uint8_t* data, size_t size, const std::string& name);

// CRC-32 of a payload in memory, computed on `threads` threads (zlib's crc32, combined).
uint32_t payload_crc(const uint8_t* data, size_t size, int threads);

// A packed file mapped read-only. Opening checks the header and the file's size; the payload's
// checksum is verified at once (kNow) or, for large files, on a low-priority thread while the
// caller goes on (kBackground: check_integrity(true) waits for it, false only reports failures
// already found). Images are paged in on first touch and shared through the page cache.
class PackedFile : public ImageStorage, public std::enable_shared_from_this<PackedFile> {
 public:
  enum class Verify { kNow, kBackground };
  // Payloads up to background_above bytes are verified at once even when kBackground is asked:
  // under a second's work, and the caller may rely on the check being done.
  static constexpr int64_t kBackgroundAbove = int64_t{1} << 30;

  static std::shared_ptr<PackedFile> open(const std::string& path,
                                          Verify verify,
                                          int64_t background_above = kBackgroundAbove);
  ~PackedFile() override;
  PackedFile(const PackedFile&) = delete;
  PackedFile& operator=(const PackedFile&) = delete;

  const PackedHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  const uint8_t* images() const override { return base_ + header_.header_bytes(); }
  void check_integrity(bool wait) const override;
  // The whole file as one ImageSet that keeps the mapping alive.
  ImageSet image_set() const;

 private:
  PackedFile(std::string path, const uint8_t* base, size_t size, PackedHeader header);
  void verify(int threads) const;  // throws on a mismatch

  std::string path_;
  const uint8_t* base_;
  size_t size_;
  PackedHeader header_;
  struct Check;  // the background verification's thread and outcome
  std::unique_ptr<Check> check_;
};

// Writes a packed file the way every output of this project is written: to path + ".tmp",
// then (commit) the header, fsync, rename over path, fsync of the folder. A failure at any point
// (a full disk, a short count) removes the temporary file and leaves path untouched.
class PackedWriter {
 public:
  PackedWriter(
      std::string path, std::string dataset, ImageShape shape, int64_t count, int64_t bits = 8);
  // header: dataset, shape, count (announced), bits, and a folder record (its counts may be set
  // later, with set_folder_record) for a version-2 file.
  PackedWriter(std::string path, PackedHeader header);
  ~PackedWriter();  // removes the temporary file unless committed
  PackedWriter(const PackedWriter&) = delete;
  PackedWriter& operator=(const PackedWriter&) = delete;

  void write(const uint8_t* images, int64_t n);  // the next n images
  // Completes the temporary file (header with the payload CRC, fsync). rename_into_place()
  // then moves it over path; packing several files completes them all before renaming any.
  void complete();
  // complete() for a writer that announced an upper bound: the header says what was written
  // (at least one image), as when a folder's unreadable files are skipped.
  void complete_short();
  // The folder record written by complete(); std::logic_error for a writer made without one.
  void set_folder_record(const FolderRecord& record);
  void rename_into_place();
  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(const std::string& why);
  void write_all(const uint8_t* data, size_t size);

  std::string path_, tmp_;
  PackedHeader header_;
  int fd_ = -1;
  int64_t written_ = 0;
  bool completed_ = false, renamed_ = false;
};

}  // namespace combiner::data
