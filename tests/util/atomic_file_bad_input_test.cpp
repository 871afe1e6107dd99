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

#include "util/atomic_file.h"
#include "util/npy.h"
#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::read_bytes;
using combiner::testing::TempDir;

namespace fs = std::filesystem;

// Runs call in a forked child (one thread, LibTorch's pool unused) after `prepare`, and returns
// the message of the exception it threw, "NO ERROR", or "SKIP: why" if prepare says so.
std::string message_in_child(const std::function<std::string()>& prepare,
                             const std::function<void()>& call) {
  int fds[2];
  if (::pipe(fds) != 0) return "SKIP: pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ::alarm(60);
    at::set_num_threads(1);
    std::string out = prepare();
    if (out.empty()) {
      out = "NO ERROR";
      try {
        call();
      } catch (const std::runtime_error& e) {
        out = e.what();
      } catch (const std::exception& e) {
        out = std::string("WRONG TYPE: ") + e.what();
      }
    }
    const ssize_t written = ::write(fds[1], out.data(), out.size());
    ::_exit(written == static_cast<ssize_t>(out.size()) ? 0 : 1);
  }
  ::close(fds[1]);
  std::string out;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof(buffer))) > 0;) out.append(buffer, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? out : "CHILD DIED: " + out;
}

// The child may write files of at most `bytes` bytes; past that write() fails with EFBIG.
std::function<std::string()> file_size_limit(rlim_t bytes) {
  return [bytes]() -> std::string {
    ::signal(SIGXFSZ, SIG_IGN);
    const rlimit limit{bytes, bytes};
    return ::setrlimit(RLIMIT_FSIZE, &limit) == 0 ? "" : "SKIP: setrlimit failed";
  };
}

// The child runs as uid 65534 when this process is root, so that folder permissions apply.
std::function<std::string()> unprivileged(const std::string& folder) {
  return [folder]() -> std::string {
    if (::geteuid() == 0 &&
        (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0))
      return "SKIP: running as root and cannot drop to uid 65534 to make the folder read-only";
    if (::access(folder.c_str(), W_OK) == 0) return "SKIP: '" + folder + "' is still writable";
    return "";
  };
}

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
