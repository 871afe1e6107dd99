// One writer per run folder: combiner-train (rank 0 of a multi-process run) holds an advisory
// flock(2) on <out_dir>/train.lock for its whole life. The kernel drops the lock when the process
// ends, however it ends, so a kill -9 leaves nothing stale and the folder can be resumed at once;
// the file stays, holding the last holder's pid and host for the refusal message of the next
// trainer. Readers (eval, sample, export) take no lock.
#pragma once

#include <string>

namespace combiner::train {

class RunFolderLock {
 public:
  // Locks the existing folder `dir`. Throws std::runtime_error, one line, naming the folder and
  // the holder's pid and host when another process holds the lock (having written nothing), or
  // naming the lock file when it cannot be created (a read-only folder). Where the file system
  // has no flock, warns once and goes on unlocked.
  explicit RunFolderLock(const std::string& dir);
  ~RunFolderLock();
  RunFolderLock(RunFolderLock&& other) noexcept;
  RunFolderLock& operator=(RunFolderLock&& other) noexcept;
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// "pid <pid> on host <host>": what the holder writes into the lock file.
std::string lock_holder_text();

}  // namespace combiner::train
