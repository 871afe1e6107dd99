// The bad-input catalogue for datasets (docs/RELIABILITY.md): unreadable files (permission
// denied, a folder where a file should be), truncated CIFAR-10 records and wrong PNG sizes
// through load_split, and empty splits. Each must be one std::runtime_error naming the file.
//
// Permission denied: tests often run as root, which chmod 000 does not stop. Then the read
// happens in a child process that drops to the unprivileged uid 65534 (nobody) first; if that
// is impossible the sub-case is skipped with a message saying so.
#include <sys/stat.h>
#include <unistd.h>

#include <stb/stb_image_write.h>
#include <zlib.h>
#include <filesystem>
#include <functional>

#include "child_process.h"
#include "data/cifar10.h"
#include "data/dataset.h"
#include "data/fashion_mnist.h"
#include "data/imagenet64.h"
#include "data/zip.h"
#include "util/npy.h"
#include "util/test_support.h"

namespace combiner::data {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

namespace fs = std::filesystem;

// What a call throws, run in a forked child as an unprivileged user (one that drops to uid/gid
// 65534 when this process is root). "SKIP: ..." if permissions cannot be made to apply.
std::string message_as_unprivileged(const std::string& file, const std::function<void()>& call) {
  return combiner::testing::message_in_child(
      [&]() -> std::string {
        if (::geteuid() == 0) {
          const std::string skip = combiner::testing::drop_root("make chmod 000 apply");
          if (!skip.empty()) return skip;
        }
        if (::access(file.c_str(), R_OK) == 0) return "SKIP: '" + file + "' is still readable";
        return "";
      },
      call,
      60);
}

// A folder that uid 65534 can enter, holding `name` with mode 000.
std::string unreadable_file(const TempDir& dir,
                            const std::string& name,
                            const std::vector<uint8_t>& bytes) {
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec);
  const std::string path = dir.file(name);
  write_bytes(path, bytes);
  fs::permissions(path, fs::perms::none);
  return path;
}

void expect_permission_denied(const std::string& message, const std::string& path) {
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
}

std::vector<uint8_t> idx3(uint32_t count, size_t pixels) {
  std::vector<uint8_t> out;
  for (uint32_t v : {2051u, count, 28u, 28u})
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
  out.resize(out.size() + pixels, 7);
  return out;
}

TEST(DataBadInput, UnreadableCifarBatchNamesFileAndReason) {
  TempDir dir;
  const auto path = unreadable_file(dir, "test_batch.bin", std::vector<uint8_t>(30730000, 1));
  DataOptions options;
  options.dataset = "cifar10";
  options.dir = dir.path();
  expect_permission_denied(
      message_as_unprivileged(path, [&] { load_split(options, Split::kTest); }), path);
}

TEST(DataBadInput, UnreadableIdxFileNamesFileAndReason) {
  TempDir dir;
  const auto path = unreadable_file(dir, "t10k-images-idx3-ubyte", idx3(1, 784));
  expect_permission_denied(
      message_as_unprivileged(
          path, [&] { load_fashion_mnist(dir.path(), OfficialSplit::kTest); }),
      path);
}

TEST(DataBadInput, UnreadableNpzAndNpyNameFileAndReason) {
  TempDir dir;
  const auto npz = unreadable_file(dir, "val_data.npz", std::vector<uint8_t>(100, 0));
  expect_permission_denied(message_as_unprivileged(npz, [&] { read_imagenet64_npz(npz); }), npz);
  const auto npy = unreadable_file(dir, "x.npy", std::vector<uint8_t>(100, 0));
  expect_permission_denied(message_as_unprivileged(npy, [&] { util::load_npy(npy); }), npy);
}

TEST(DataBadInput, UnreadablePngNamesFileAndReason) {
  TempDir dir;
  fs::create_directory(dir.file("valid"));
  const auto path = unreadable_file(dir, "valid/a.png", std::vector<uint8_t>(100, 0));
  fs::permissions(dir.file("valid"),
                  fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  // One file is below read_png_folder's parallel grain, so the child decodes on its own thread.
  expect_permission_denied(
      message_as_unprivileged(path, [&] { read_png_folder(dir.file("valid")); }), path);
}

TEST(DataBadInput, AFolderWhereAFileShouldBeIsNamed) {
  TempDir dir;
  fs::create_directory(dir.file("t10k-images-idx3-ubyte.gz"));
  expect_throw_with<std::runtime_error>(
      [&] { load_fashion_mnist(dir.path(), OfficialSplit::kTest); },
      {dir.file("t10k-images-idx3-ubyte.gz"), "folder"});
  fs::create_directory(dir.file("test_batch.bin"));
  expect_throw_with<std::runtime_error>([&] { read_cifar10_batch(dir.file("test_batch.bin")); },
                                        {dir.file("test_batch.bin")});
  fs::create_directory(dir.file("val_data.npz"));
  expect_throw_with<std::runtime_error>([&] { read_imagenet64_npz(dir.file("val_data.npz")); },
                                        {dir.file("val_data.npz")});
}

TEST(DataBadInput, TruncatedCifarRecordStopsTheSplit) {
  TempDir dir;
  // The last record of the test batch lacks its final byte.
  write_bytes(dir.file("test_batch.bin"), std::vector<uint8_t>(30730000 - 1, 3));
  DataOptions options;
  options.dataset = "cifar10";
  options.dir = dir.path();
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options, Split::kTest); },
      {dir.file("test_batch.bin"), "expected 30730000 bytes, found 30729999", "truncated"});
  // A whole record missing reads the same way.
  write_bytes(dir.file("test_batch.bin"), std::vector<uint8_t>(30730000 - 3073, 3));
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTest); },
                                        {dir.file("test_batch.bin"), "found 30726927"});
}

void write_flat_png(const std::string& path, int width, int height, int channels) {
  const std::vector<uint8_t> pixels(static_cast<size_t>(width * height * channels), 100);
  ASSERT_NE(stbi_write_png(path.c_str(), width, height, channels, pixels.data(), width * channels),
            0);
}

TEST(DataBadInput, PngFolderWithOtherSizesOrChannelsStopsTheSplit) {
  const std::vector<std::tuple<int, int, int, std::string>> cases = {
      {64, 63, 3, "64x63 with 3 channels"},
      {128, 128, 3, "128x128 with 3 channels"},
      {64, 64, 2, "64x64 with 2 channels"},
      {64, 64, 4, "64x64 with 4 channels"},
  };
  for (const auto& [width, height, channels, found] : cases) {
    TempDir dir;
    fs::create_directory(dir.file("train"));
    write_flat_png(dir.file("train/a.png"), 64, 64, 3);
    write_flat_png(dir.file("train/b.png"), width, height, channels);
    DataOptions options;
    options.dataset = "imagenet64";
    options.dir = dir.path();
    expect_throw_with<std::runtime_error>(
        [&] { load_split(options, Split::kTrain); },
        {dir.file("train/b.png"), found, "expected 64x64 with 3"});
  }
}

TEST(DataBadInput, EmptySplitsAreRefusedByName) {
  TempDir dir;
  DataOptions options;
  options.dataset = "fashion_mnist";
  options.dir = dir.path();
  // An idx file that holds no images: a valid file, but an empty test split.
  write_bytes(dir.file("t10k-images-idx3-ubyte"), idx3(0, 0));
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options, Split::kTest); },
      {"test split", "fashion_mnist", dir.path(), "empty"});
  // val_size 0 makes the validation split empty.
  write_bytes(dir.file("train-images-idx3-ubyte"), idx3(2, 2 * 784));
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kVal); },
                                        {"val split", "empty", "val_size is 0"});
  // A holdout as large as the training set leaves no training images.
  options.val_size = 2;
  expect_throw_with<std::invalid_argument>([&] { load_split(options, Split::kTrain); },
                                           {"data.val_size", "2", "holds 2"});

  // ImageNet-64: a train/ folder without PNGs, and an npz batch of zero images.
  TempDir png;
  fs::create_directory(png.file("train"));
  fs::create_directory(png.file("valid"));
  options.dataset = "imagenet64";
  options.dir = png.path();
  options.val_size = 0;
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTrain); },
                                        {png.file("train"), "no .png files"});
  TempDir npz;
  ASSERT_EQ(combiner::testing::run_python(
                npz, "np.savez('val_data.npz', data=np.zeros((0, 12288), np.uint8))"),
            0);
  options.dir = npz.path();
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTest); },
                                        {"test split", "imagenet64", npz.path(), "empty"});
}

std::vector<uint8_t> gzip(const std::vector<uint8_t>& bytes) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::vector<uint8_t> out(deflateBound(&z, static_cast<uLong>(bytes.size())) + 32);
  z.next_in = const_cast<uint8_t*>(bytes.data());
  z.avail_in = static_cast<uInt>(bytes.size());
  z.next_out = out.data();
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

TEST(DataBadInput, GzipMembersAreJoinedAndGarbageAfterThemRefused) {
  // gzip(1) concatenates members when files are joined: both halves are read.
  const auto whole = idx3(2, 2 * 784);
  auto joined = gzip(std::vector<uint8_t>(whole.begin(), whole.begin() + 800));
  const auto second = gzip(std::vector<uint8_t>(whole.begin() + 800, whole.end()));
  joined.insert(joined.end(), second.begin(), second.end());
  EXPECT_EQ(parse_idx_images(joined.data(), joined.size(), "joined.gz").count, 2);
  // Anything else after the end is not silently dropped.
  auto garbage = gzip(whole);
  garbage.insert(garbage.end(), {'j', 'u', 'n', 'k'});
  expect_throw_with<std::runtime_error>(
      [&] { parse_idx_images(garbage.data(), garbage.size(), "garbage.gz"); },
      {"garbage.gz", "4 bytes of garbage after the gzip data"});
}

TEST(DataBadInput, MissingFilesAreListedByName) {
  TempDir dir;
  DataOptions options;
  options.dataset = "fashion_mnist";
  options.dir = dir.path();
  expect_throw_with<std::runtime_error>(
      [&] { load_split(options, Split::kTrain); },
      {dir.path(), "train-images-idx3-ubyte.gz", "train-images-idx3-ubyte'"});
  options.dataset = "cifar10";
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTrain); },
                                        {"data_batch_1.bin", "data_batch_5.bin", "get-cifar10.sh"});
  write_bytes(dir.file("val_data.npz"), std::vector<uint8_t>(10, 0));
  options.dataset = "imagenet64";
  expect_throw_with<std::runtime_error>([&] { load_split(options, Split::kTrain); },
                                        {dir.path(), "train_data_batch_1.npz"});
}

}  // namespace
}  // namespace combiner::data
