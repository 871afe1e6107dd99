// zip: members written by Python's zipfile (stored, deflate, bzip2, with an archive comment)
// and a hand-built zip64 archive read back exactly; corrupt data, missing members and other
// compression methods refused with the path named.
#include "data/zip.h"

#include <zlib.h>

#include "data/data_files.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::put;
using combiner::testing::read_bytes;
using combiner::testing::run_python;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

std::vector<uint8_t> text(const std::string& s) {
  return {s.begin(), s.end()};
}

// One stored member whose sizes and offset all live in zip64 extras and a zip64 end record.
std::vector<uint8_t> zip64_archive(const std::string& name, const std::vector<uint8_t>& data) {
  const uint32_t crc = static_cast<uint32_t>(crc32(0, data.data(), static_cast<uInt>(data.size())));
  std::vector<uint8_t> z;
  put(z, 0x04034b50, 4), put(z, 45, 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 4);
  put(z, crc, 4), put(z, 0xFFFFFFFF, 4), put(z, 0xFFFFFFFF, 4);
  put(z, name.size(), 2), put(z, 20, 2);
  z.insert(z.end(), name.begin(), name.end());
  put(z, 1, 2), put(z, 16, 2), put(z, data.size(), 8), put(z, data.size(), 8);
  z.insert(z.end(), data.begin(), data.end());
  const uint64_t cd_offset = z.size();
  put(z, 0x02014b50, 4), put(z, 45, 2), put(z, 45, 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 4);
  put(z, crc, 4), put(z, 0xFFFFFFFF, 4), put(z, 0xFFFFFFFF, 4);
  put(z, name.size(), 2), put(z, 28, 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 2), put(z, 0, 4);
  put(z, 0xFFFFFFFF, 4);
  z.insert(z.end(), name.begin(), name.end());
  put(z, 1, 2), put(z, 24, 2), put(z, data.size(), 8), put(z, data.size(), 8), put(z, 0, 8);
  const uint64_t cd_size = z.size() - cd_offset;
  const uint64_t end64 = z.size();
  put(z, 0x06064b50, 4), put(z, 44, 8), put(z, 45, 2), put(z, 45, 2), put(z, 0, 4), put(z, 0, 4);
  put(z, 1, 8), put(z, 1, 8), put(z, cd_size, 8), put(z, cd_offset, 8);
  put(z, 0x07064b50, 4), put(z, 0, 4), put(z, end64, 8), put(z, 1, 4);
  put(z, 0x06054b50, 4), put(z, 0, 2), put(z, 0, 2), put(z, 0xFFFF, 2), put(z, 0xFFFF, 2);
  put(z, 0xFFFFFFFF, 4), put(z, 0xFFFFFFFF, 4), put(z, 0, 2);
  return z;
}

TEST(Zip, ReadsStoredAndDeflatedMembersPythonWrote) {
  TempDir dir;
  ASSERT_EQ(run_python(dir, R"(
import zipfile
big = bytes((i * 7919) % 251 for i in range(3 << 20))
with zipfile.ZipFile('a.zip', 'w') as z:
    z.writestr(zipfile.ZipInfo('stored.bin'), big[:1000])
    z.writestr('deflated.bin', big, compress_type=zipfile.ZIP_DEFLATED)
    z.writestr('empty.bin', b'', compress_type=zipfile.ZIP_DEFLATED)
    z.writestr('bz.bin', b'abc' * 100, compress_type=zipfile.ZIP_BZIP2)
    z.comment = b'an archive comment'
open('big.bin', 'wb').write(big)
)"),
            0);
  const std::string zip = dir.file("a.zip");
  const auto entries = list_zip(zip);
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[1].name, "deflated.bin");
  EXPECT_EQ(entries[1].method, 8);
  const auto big = read_bytes(dir.file("big.bin"));
  EXPECT_EQ(read_zip_member(zip, "deflated.bin"), big);
  EXPECT_EQ(read_zip_member(zip, "stored.bin"),
            std::vector<uint8_t>(big.begin(), big.begin() + 1000));
  EXPECT_TRUE(read_zip_member(zip, "empty.bin").empty());
  EXPECT_EQ(read_zip_member(zip, "deflated.bin", 10),
            std::vector<uint8_t>(big.begin(), big.begin() + 10));
  expect_throw_with<std::runtime_error>([&] { read_zip_member(zip, "bz.bin"); },
                                        {"a.zip", "bz.bin", "method 12"});
  expect_throw_with<std::runtime_error>([&] { read_zip_member(zip, "nope"); },
                                        {"a.zip", "nope", "deflated.bin"});
}

TEST(Zip, ReadsZip64Records) {
  TempDir dir;
  const auto archive = zip64_archive("data.npy", text("zip64 payload"));
  write_bytes(dir.file("z64.zip"), archive);
  // Python's zipfile agrees the hand-built archive is valid.
  ASSERT_EQ(run_python(dir,
                       "import zipfile\n"
                       "assert zipfile.ZipFile('z64.zip').read('data.npy') == b'zip64 payload'"),
            0);
  const auto entries = list_zip(dir.file("z64.zip"));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].size, 13u);
  EXPECT_EQ(read_zip_member(dir.file("z64.zip"), "data.npy"), text("zip64 payload"));
}

TEST(Zip, RefusesCorruptArchives) {
  TempDir dir;
  auto archive = zip64_archive("m", text("some member data"));
  archive[55] ^= 0xFF;  // inside the stored data (it starts at 30 + 1 + 20): only the CRC notices
  write_bytes(dir.file("crc.zip"), archive);
  expect_throw_with<std::runtime_error>([&] { read_zip_member(dir.file("crc.zip"), "m"); },
                                        {"crc.zip", "CRC"});
  write_bytes(dir.file("junk.zip"), std::vector<uint8_t>(100, 7));
  expect_throw_with<std::runtime_error>([&] { list_zip(dir.file("junk.zip")); },
                                        {"junk.zip", "end-of-central-directory"});
  write_bytes(dir.file("tiny.zip"), text("PK"));
  EXPECT_THROW(list_zip(dir.file("tiny.zip")), std::runtime_error);
  EXPECT_THROW(list_zip(dir.file("absent.zip")), std::runtime_error);
}

}  // namespace
}  // namespace combiner::data
