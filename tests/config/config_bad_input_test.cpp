// Config files that cannot be read (docs/RELIABILITY.md): permission denied, which root's
// chmod 000 does not cause, so the read runs in a child dropped to uid 65534 when the tests run
// as root; the sub-case is skipped with a message if that is impossible.
#include <unistd.h>

#include <filesystem>

#include "child_process.h"
#include "config/config.h"
#include "config/test_util.h"

namespace combiner::config {
namespace {

using combiner::config::testing::TempDir;
namespace fs = std::filesystem;

// The message load_config(path) throws, read as an unprivileged user; "SKIP: why" if the file
// stays readable.
std::string unprivileged_load_message(const std::string& path) {
  auto load = [&]() -> std::string {
    if (::access(path.c_str(), R_OK) == 0) return "SKIP: '" + path + "' is still readable";
    try {
      load_config(path);
    } catch (const std::invalid_argument& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("WRONG TYPE: ") + e.what();
    }
    return "NO ERROR";
  };
  if (::geteuid() != 0) return load();
  return combiner::testing::text_from_child(
      [&]() -> std::string {
        const std::string skip = combiner::testing::drop_root("make chmod 000 apply");
        return skip.empty() ? load() : skip;
      },
      30);
}

TEST(ConfigBadInput, UnreadableConfigFileIsNamed) {
  TempDir dir;
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  const std::string path = dir.write("secret.yaml", "train: {steps: 5}\n");
  fs::permissions(path, fs::perms::none);
  const std::string message = unprivileged_load_message(path);
  if (message.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << message.substr(6);
  EXPECT_EQ(message, path + ": cannot read config file") << message;
}

}  // namespace
}  // namespace combiner::config
