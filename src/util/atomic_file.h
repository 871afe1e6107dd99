// Atomic file output: the content goes to path + ".tmp", is flushed and checked, then renamed
// over path, so readers and crashed runs never see a half-written file.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace combiner::util {

// Calls write on a stream to path + ".tmp", then renames it to path. std::runtime_error naming
// path if the file cannot be created, written or renamed (the .tmp file is removed then).
void write_file_atomic(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace combiner::util
