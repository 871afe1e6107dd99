// Atomic, durable file output: the content goes to path + ".tmp" through a file descriptor,
// is fsynced, renamed over path, and the folder is fsynced, so readers, crashed runs and power
// losses never see a half-written file under the final name.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace combiner::util {

// Calls write on a stream to path + ".tmp", fsyncs it, renames it to path and fsyncs path's
// folder. If anything fails (the file cannot be created, a write fails with ENOSPC or EFBIG,
// write throws, the rename fails), the .tmp file is removed, path is left as it was, and a
// std::runtime_error "cannot write '<path>': <reason>" is thrown.
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);

// fsyncs the folder that holds path, so a rename or creation in it survives a crash.
// std::runtime_error naming the folder on failure (file systems that cannot sync folders pass).
void sync_parent_directory(const std::string& path);

}  // namespace combiner::util
