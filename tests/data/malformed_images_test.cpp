// Malformed images kept in tests/regressions/images/: each made stb_image, the decoder used
// before, read uninitialised memory under valgrind (JPEGs whose scans use Huffman or
// quantisation tables that were never defined, a progressive scan with impossible parameters;
// found by fuzzing stb_image from this project's seeds). Packed with good images, each is skipped
// with one reason naming it and what libjpeg refused. Inputs the fuzzers save go there too, with
// a line here.
#include <filesystem>
#include <map>

#include "data/image_folder.h"
#include "util/image_files.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::TempDir;
using combiner::testing::write_bytes;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kReasons = {
    {"stb-undefined-huffman-table-1.jpg",
     "cannot decode JPEG (Huffman table 0x00 was not defined)"},
    {"stb-undefined-huffman-table-2.jpg",
     "cannot decode JPEG (Huffman table 0x00 was not defined)"},
    {"stb-undefined-quant-table-1.jpg",
     "cannot decode JPEG (Quantization table 0x01 was not defined)"},
    {"stb-undefined-quant-table-2.jpg",
     "cannot decode JPEG (Quantization table 0x01 was not defined)"},
    {"stb-undefined-quant-table-3.jpg",
     "cannot decode JPEG (Quantization table 0x00 was not defined)"},
    {"stb-bad-progressive-parameters.jpg",
     "cannot decode JPEG (Invalid progressive parameters Ss=0 Se=0 Ah=3 Al=6)"},
};

TEST(MalformedImages, EachIsSkippedWithOneReasonNamingIt) {
  const fs::path kept = fs::path(COMBINER_SOURCE_DIR) / "tests/regressions/images";
  TempDir in, out;
  fs::create_directories(in.file("train"));
  fs::create_directories(in.file("test"));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(kept)) {
    ASSERT_TRUE(kReasons.count(entry.path().filename().string()))
        << entry.path() << " needs its reason above";
    fs::copy_file(entry.path(), in.file("train/" + entry.path().filename().string()));
    ++files;
  }
  ASSERT_EQ(files, static_cast<int>(kReasons.size()));
  const std::vector<uint16_t> grey(16 * 16, 128);
  const auto png =
      combiner::testing::png_file({16, 16, PNG_COLOR_TYPE_GRAY, 8, false, {}, {}, true}, grey);
  write_bytes(in.file("train/good.png"), png);
  write_bytes(in.file("test/good.png"), png);

  ImageFolderOptions options;
  options.from = in.path();
  options.out = out.path();
  options.height = options.width = 4;
  options.threads = 2;
  const ImageFolderReport report = pack_image_folder(options);
  EXPECT_EQ(report.train, 1);
  EXPECT_EQ(report.test, 1);
  ASSERT_EQ(report.skipped.size(), kReasons.size());
  for (const auto& [file, why] : report.skipped) {
    const std::string name = fs::path(file).filename().string();
    EXPECT_EQ(why, file + ": " + kReasons.at(name));
  }
}

}  // namespace
}  // namespace combiner::data
