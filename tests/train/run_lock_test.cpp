// One writer per run folder: a second lock on a held folder is refused naming the folder and the
// holder's pid and host; the lock goes when its holder is destroyed or killed (kill -9); a
// trainer refused by it, fresh or resuming, leaves every file of the folder as it was.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "test_utils.h"
#include "train/run_lock.h"
#include "train/tiny_run.h"
#include "train/trainer.h"

namespace combiner::train {
namespace {

namespace fs = std::filesystem;
using combiner::testing::read_text;
using combiner::testing::TempDir;

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "NO ERROR";
}

// Every file under `dir` with its bytes.
std::map<std::string, std::string> contents(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    out[entry.path().string()] = entry.is_regular_file() ? read_text(entry.path().string()) : "/";
  return out;
}

TEST(RunLock, ASecondLockIsRefusedNamingTheFolderAndTheHolder) {
  TempDir dir;
  RunFolderLock held(dir.path());
  EXPECT_EQ(held.path(), dir.file("train.lock"));
  EXPECT_EQ(read_text(held.path()), lock_holder_text() + "\n");
  const std::string message = refusal([&] { RunFolderLock second(dir.path()); });
  for (const std::string& part :
       std::vector<std::string>{"train.out_dir: " + dir.path() + " is in use",
                                lock_holder_text(),
                                "pid " + std::to_string(getpid()) + " on host "})
    EXPECT_NE(message.find(part), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(RunLock, IsReleasedWhenItsHolderGoes) {
  TempDir dir;
  { RunFolderLock first(dir.path()); }
  RunFolderLock second(dir.path());
  RunFolderLock moved = std::move(second);  // the lock moves with it
  EXPECT_NE(refusal([&] { RunFolderLock third(dir.path()); }), "NO ERROR");
}

TEST(RunLock, IsReleasedWhenItsHolderIsKilled) {
  TempDir dir;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  if (child == 0) {
    RunFolderLock held(dir.path());
    const char byte = 'L';
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    for (;;) pause();  // until killed
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  const std::string message = refusal([&] { RunFolderLock second(dir.path()); });
  EXPECT_NE(message.find("pid " + std::to_string(child) + " on host"), std::string::npos)
      << message;
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  RunFolderLock after(dir.path());  // at once: no stale lock to clear
  EXPECT_EQ(read_text(after.path()), lock_holder_text() + "\n");
}

TEST(RunLock, ATrainerRefusedByTheLockWritesNothing) {
  TempDir dir;
  const auto c = tiny_run(dir.file("run"), 2);
  run_training(c, {});  // a finished run: config, metrics, events, checkpoint, lock file
  const auto before = contents(dir.file("run"));
  ASSERT_TRUE(before.count(dir.file("run/checkpoints/step-00000002.ckpt")));

  RunFolderLock held(dir.file("run"));  // another trainer, as far as the kernel can tell
  RunOptions resume;
  resume.resume = true;
  auto more = tiny_run(dir.file("run"), 4);
  for (const auto& options : {RunOptions{}, resume}) {
    const std::string message = refusal([&] { run_training(more, options); });
    const std::string expected =
        dir.file("run") + " is in use by another combiner-train (" + lock_holder_text() + ", ";
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  // The holder's record is the one the finished run left (this process's pid, both times).
  EXPECT_EQ(contents(dir.file("run")), before);
}

}  // namespace
}  // namespace combiner::train
