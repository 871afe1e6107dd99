// safetensors inputs kept for the fuzz target's rule (fuzz/safetensors_fuzz.cpp: refuse bad bytes
// only with std::runtime_error naming the file, parse_safetensors and load_safetensors alike).
// None of these broke the reader; they guard the checks that a mutation is most likely to reach:
// a header length past the file, offsets beyond int64, a shape whose element count wraps 2^64
// to 0 (and would match an empty byte range), and nesting deep enough to exhaust the stack.
// Inputs the fuzzer saves go into tests/regressions/safetensors/ with a line here.
#include <filesystem>

#include "util/safetensors.h"
#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;

std::string regression_file(const std::string& name) {
  return std::string(COMBINER_SOURCE_DIR) + "/tests/regressions/safetensors/" + name;
}

void expect_refused_both_ways(const std::string& name, const std::string& needle) {
  const std::string path = regression_file(name);
  const auto bytes = read_bytes(path);
  ASSERT_FALSE(bytes.empty()) << path;
  expect_throw_with<std::runtime_error>([&] { load_safetensors(path); }, {path, needle});
  expect_throw_with<std::runtime_error>(
      [&] { parse_safetensors(bytes.data(), bytes.size(), name); }, {name, needle});
}

TEST(SafetensorsFuzzRegression, KeptInputsAreRefusedByName) {
  expect_refused_both_ways("header-length-past-end.safetensors", "past the end of the file");
  expect_refused_both_ways("offsets-past-int64.safetensors", "\"data_offsets\" is missing or not");
  expect_refused_both_ways("shape-product-overflow.safetensors", "more bytes than any file holds");
  expect_refused_both_ways("deep-nesting.safetensors", "nested deeper than 64 levels");
}

TEST(SafetensorsFuzzRegression, EveryKeptInputIsListedAbove) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(regression_file(""))) {
    EXPECT_EQ(entry.path().extension(), ".safetensors") << entry.path();
    ++files;
  }
  EXPECT_EQ(files, 4) << "a new file in tests/regressions/safetensors/ needs its check above";
}

}  // namespace
}  // namespace combiner::util
