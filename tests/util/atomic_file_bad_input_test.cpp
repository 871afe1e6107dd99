// write_file_atomic under faults (docs/RELIABILITY.md): the disk filling up mid-write
// (simulated with RLIMIT_FSIZE in a child process, SIGXFSZ ignored so write() fails with
// EFBIG), a folder that is not writable, and a writer that throws. Each time the error names
// the file and the reason, no .tmp file is left, and the previous file is intact.
#include <grp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "child_process.h"
#include "util/atomic_file.h"
#include "util/npy.h"
#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::file_size_limit;
using combiner::testing::message_in_child;
using combiner::testing::read_bytes;
using combiner::testing::TempDir;
using combiner::testing::unprivileged;

namespace fs = std::filesystem;

std::vector<uint8_t> text(const std::string& s) {
  return {s.begin(), s.end()};
}

void write_text(const std::string& path, const std::string& content) {
  write_file_atomic(path, [&](std::ostream& out) { out << content; });
}

TEST(AtomicFileBadInput, DiskFullMidWriteKeepsThePreviousFile) {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  write_text(path, "previous");
  const std::string big(1 << 20, 'x');
  const std::string message =
      message_in_child(file_size_limit(64 << 10), [&] { write_text(path, big); });
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_NE(message.find("cannot write '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_bytes(path), text("previous"));
}

TEST(AtomicFileBadInput, NpyDumpThatFillsTheDiskLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("bits.npy");
  const std::string message = message_in_child(
      file_size_limit(4096), [&] { save_npy(path, torch::zeros({10000}, torch::kFloat)); });
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST(AtomicFileBadInput, ReadOnlyFolderIsNamedWithTheReason) {
  TempDir dir;
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  const std::string folder = dir.file("out");
  fs::create_directory(folder);
  const std::string path = folder + "/x.txt";
  write_text(path, "previous");
  fs::permissions(folder,
                  fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                      fs::perms::others_exec);
  const std::string message =
      message_in_child(unprivileged(folder), [&] { write_text(path, "new"); });
  fs::permissions(folder, fs::perms::owner_all);
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_NE(message.find("cannot write '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("Permission denied"), std::string::npos) << message;
  EXPECT_EQ(read_bytes(path), text("previous"));
}

TEST(AtomicFileBadInput, AWriterThatThrowsLeavesNoPartialFile) {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  write_text(path, "previous");
  try {
    write_file_atomic(path, [](std::ostream& out) {
      out << std::string(100000, 'y');
      throw std::runtime_error("tensor conversion failed");
    });
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("tensor conversion failed"), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_bytes(path), text("previous"));
}

TEST(AtomicFileBadInput, MissingFolderIsNamed) {
  TempDir dir;
  const std::string path = dir.file("no/such/folder/x.bin");
  try {
    write_text(path, "x");
    ADD_FAILURE() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace combiner::util
