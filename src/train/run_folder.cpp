// check_run_folder asks the kernel whether the folder could be written (access(2)), and locks a
// folder that already has a train.lock (the lock's record, the one write before the inputs have
// passed); write_run_folder locks the others, writes the rest, and takes back the folders it made
// if it fails.
#include "train/run_folder.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "train/checkpoint.h"
#include "util/atomic_file.h"

namespace combiner::train {
namespace fs = std::filesystem;
namespace {

// dir's outermost folder that does not exist yet (the first create_directories would make), or
// an empty path when dir exists.
fs::path first_missing(const fs::path& dir) {
  std::error_code ec;
  fs::path missing;
  for (fs::path p = dir; !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing = p;
    if (p.parent_path() == p) break;
  }
  return missing;
}

// "" when this process may create entries in folder, else the reason.
std::string write_problem(const fs::path& folder) {
  if (access(folder.c_str(), W_OK | X_OK) == 0) return "";
  return std::strerror(errno);
}

void check_no_checkpoints(const std::string& dir, bool resume) {
  if (!resume && !list_checkpoints(dir).empty())
    throw std::invalid_argument("train.out_dir: " + dir +
                                " already holds checkpoints; pass --resume to continue that run "
                                "or choose another train.out_dir");
}

}  // namespace

std::optional<RunFolderLock> check_run_folder(const std::string& dir, bool resume) {
  const fs::path missing = first_missing(dir);
  if (missing.empty()) {  // the folder exists
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw std::runtime_error(dir + ": cannot create run folder: it exists and is not a folder");
    const std::string problem = write_problem(dir);
    if (!problem.empty())
      throw std::runtime_error((fs::path(dir) / "config.yaml").string() + ": cannot write: " +
                               problem + " (is the run folder writable?)");
    // A trainer that runs here has made train.lock: lock it now, refused while that one runs.
    // Without the file the folder is locked once the inputs have passed (write_run_folder), so a
    // refused run adds nothing to it.
    std::optional<RunFolderLock> lock;
    if (fs::exists(fs::path(dir) / "train.lock", ec)) lock.emplace(dir);
    check_no_checkpoints(dir, resume);
    return lock;
  }
  const fs::path parent = missing.has_parent_path() ? missing.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(parent, ec))
    throw std::runtime_error(dir + ": cannot create run folder: '" + parent.string() +
                             "' is not a folder");
  const std::string problem = write_problem(parent);
  if (!problem.empty())
    throw std::runtime_error(dir + ": cannot create run folder in '" + parent.string() +
                             "': " + problem);
  return std::nullopt;
}

void write_run_folder(const config::Config& config, bool resume,
                      std::optional<RunFolderLock>& lock) {
  const std::string& dir = config.train.out_dir;
  const fs::path missing = first_missing(dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create run folder: " + ec.message());
  try {
    if (!lock) {  // not locked at the check: another trainer may have started here since
      lock.emplace(dir);
      check_no_checkpoints(dir, resume);
    }
    util::write_file_atomic((fs::path(dir) / "config.yaml").string(),
                            [&](std::ostream& out) { out << config::to_yaml(config); });
  } catch (const std::exception&) {
    // Only folders this call made, innermost first; remove() leaves a non-empty one alone.
    if (!missing.empty() && lock) {
      fs::remove(lock->path(), ec);
      lock.reset();
    }
    for (fs::path p = dir; !missing.empty(); p = p.parent_path()) {
      fs::remove(p, ec);
      if (p == missing || !p.has_parent_path()) break;
    }
    throw;
  }
}

}  // namespace combiner::train
