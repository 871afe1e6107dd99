// Inputs the config fuzzer (fuzz/config_fuzz.cpp) found, kept so the bugs stay fixed.
//
// yaml-cpp 0.7's YAML::LoadAll never returns on a stream where its parser stops consuming
// tokens (a lone "," or "{a: 1},": jbeder/yaml-cpp#1040), allocating a null document per turn
// until memory runs out; parse_config used it, so a config with a stray top-level comma hung
// combiner-train. Each case runs in a child process with an alarm, so a regression fails the
// test instead of hanging the suite.
#include <fstream>
#include <sstream>
#include <string>

#include "child_process.h"
#include "config/config.h"
#include "config/test_util.h"

namespace combiner::config {
namespace {

// The message parse_config throws on text, from a child killed after 20 s. "TIMEOUT" if it hung.
std::string parse_message_in_child(const std::string& text, const std::string& source) {
  return combiner::testing::text_from_child(
      [&]() -> std::string {
        try {
          parse_config(text, source);
        } catch (const std::invalid_argument& e) {
          return e.what();
        } catch (const std::exception& e) {
          return std::string("WRONG TYPE: ") + e.what();
        }
        return "NO ERROR";
      },
      20);
}

TEST(ConfigFuzzRegression, StrayTopLevelCommaIsAnErrorNotAHang) {
  struct Case {
    std::string text, expected;
  };
  const std::vector<Case> cases = {
      {",", "c.yaml: invalid YAML at line 1, column 1: unexpected ','"},
      {"{data: {val_size: 1}},", "c.yaml: invalid YAML at line 1, column 22: unexpected ','"},
      {"data: {val_size: 1}\n,\n", "c.yaml: invalid YAML at line 2"},
  };
  for (const auto& c : cases) {
    const std::string message = parse_message_in_child(c.text, "c.yaml");
    EXPECT_EQ(message.rfind(c.expected, 0), 0u) << "input '" << c.text << "': " << message;
  }
}

TEST(ConfigFuzzRegression, TheFuzzersOriginalInputIsAnError) {
  // A mutated configs/ preset: a comment line broken so that the next line starts with ','.
  const std::string path =
      std::string(COMBINER_SOURCE_DIR) + "/tests/regressions/config/stray-comma-hang.yaml";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in) << path;
  std::stringstream text;
  text << in.rdbuf();
  const std::string message = parse_message_in_child(text.str(), path);
  EXPECT_EQ(message.rfind(path + ": invalid YAML at line 2, column 1", 0), 0u) << message;
}

TEST(ConfigFuzzRegression, DeeplyNestedFlowCollectionsAreAnError) {
  // yaml-cpp guards its recursion; the error must still come back as a config error.
  const std::string message =
      parse_message_in_child("data: " + std::string(5000, '['), "deep.yaml");
  EXPECT_EQ(message.rfind("deep.yaml: invalid YAML at line 1", 0), 0u) << message;
}

}  // namespace
}  // namespace combiner::config
