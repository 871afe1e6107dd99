// safetensors files: a round trip of every dtype with metadata that needs escaping, the layout
// Python's reader expects, each rule of the format refused with the file and the tensor named,
// and the strict JSON reader under it.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "util/json.h"
#include "util/safetensors.h"
#include "util/test_support.h"

namespace combiner::util {
namespace {

using combiner::testing::expect_throw_with;
using combiner::testing::read_bytes;
using combiner::testing::TempDir;
using combiner::testing::write_bytes;

// A file with the given JSON header (padded to 8) and data bytes.
std::vector<uint8_t> file_of(std::string header, size_t data_bytes) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + header.size() + data_bytes, 0);
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  std::memcpy(out.data() + 8, header.data(), header.size());
  return out;
}

void expect_refused(const std::vector<uint8_t>& bytes, const std::vector<std::string>& needles) {
  std::vector<std::string> with_name = needles;
  with_name.push_back("m.safetensors");
  expect_throw_with<std::runtime_error>(
      [&] { parse_safetensors(bytes.data(), bytes.size(), "m.safetensors"); }, with_name);
  TempDir dir;
  const std::string path = dir.file("m.safetensors");
  write_bytes(path, bytes);
  with_name.back() = path;
  expect_throw_with<std::runtime_error>([&] { load_safetensors(path); }, with_name);
}

TEST(Safetensors, RoundTripKeepsEveryDtypeShapeAndValue) {
  TempDir dir;
  const std::string path = dir.file("t.safetensors");
  torch::manual_seed(0);
  const NamedTensorList tensors = {
      {"blocks.0.qkv.weight", torch::randn({3, 4})},
      {"half", torch::randn({5}).to(torch::kHalf)},
      {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
      {"f64", torch::randn({1}, torch::kDouble)},
      {"ints", torch::arange(6, torch::kLong).view({2, 3})},
      {"i32", torch::arange(3, torch::kInt)},
      {"bytes", torch::arange(7, torch::kUInt8)},
      {"scalar", torch::tensor(2.5f)},
      {"empty", torch::zeros({0, 3})},
      {"strided", torch::randn({4, 3}).t()},  // not contiguous: written in C order
  };
  const std::map<std::string, std::string> metadata = {
      {"config", "model:\n  width: 16  # \"quoted\" \\ and\ttab \x01"}, {"format", "pt"}};
  save_safetensors(path, tensors, metadata);

  const auto bytes = read_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "the data section starts 8-byte aligned";
  for (const auto& loaded :
       {load_safetensors(path), parse_safetensors(bytes.data(), bytes.size(), path)}) {
    EXPECT_EQ(loaded.metadata, metadata);
    ASSERT_EQ(loaded.tensors.size(), tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      EXPECT_EQ(loaded.tensors[i].first, tensors[i].first);
      EXPECT_EQ(loaded.tensors[i].second.scalar_type(), tensors[i].second.scalar_type());
      EXPECT_TRUE(torch::equal(loaded.tensors[i].second, tensors[i].second)) << tensors[i].first;
    }
  }
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  // What the reference implementation writes for {"a": [1., 2.], "b": [[3]] int64}.
  auto bytes =
      file_of(R"({"b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]},)"
              R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"__metadata__":{"k":"v"}})",
              16);
  const size_t data = bytes.size() - 16;
  const float a[2] = {1.0f, 2.0f};
  const int64_t b = 3;
  std::memcpy(bytes.data() + data, a, 8);
  std::memcpy(bytes.data() + data + 8, &b, 8);
  const auto loaded = parse_safetensors(bytes.data(), bytes.size(), "h.safetensors");
  ASSERT_EQ(loaded.tensors.size(), 2u);
  EXPECT_EQ(loaded.tensors[0].first, "a");  // in data order
  EXPECT_TRUE(torch::equal(loaded.tensors[0].second, torch::tensor({1.0f, 2.0f})));
  EXPECT_TRUE(torch::equal(loaded.tensors[1].second, torch::full({1, 1}, 3, torch::kLong)));
  EXPECT_EQ(loaded.metadata.at("k"), "v");
}

TEST(SafetensorsBadInput, EachRuleIsRefusedNamingTheFileAndTensor) {
  const std::string f32 = R"("dtype":"F32","shape":[2],"data_offsets":)";
  expect_refused({1, 2, 3}, {"shorter than the 8-byte header length"});
  auto huge = file_of("{}", 0);
  huge[5] = 1;  // N = 2^40 + ...
  expect_refused(huge, {"past the end of the file"});
  expect_refused(file_of(R"({"a":{)" + f32 + "[0,8]}", 8), {"not JSON", "JSON byte"});
  expect_refused(file_of(R"([1, 2])", 0), {"the header is an array, not an object"});
  expect_refused(file_of(R"({"a":{)" + f32 + "[0,8]},\"a\":{" + f32 + "[8,16]}}", 16),
                 {"duplicate key \"a\""});
  expect_refused(file_of(R"({"w":{"dtype":"F8","shape":[2],"data_offsets":[0,2]}})", 2),
                 {"tensor 'w'", "unsupported dtype \"F8\""});
  expect_refused(file_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
                 {"tensor 'w'", "F32 [3] needs 3 x 4 bytes", "hold 8"});
  expect_refused(file_of(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
                 {"tensor 'w'", "\"shape\""});
  expect_refused(file_of(R"({"w":{)" + f32 + "[8,0]}}", 8), {"tensor 'w'", "end before"});
  expect_refused(file_of(R"({"w":{)" + f32 + "[0,8],\"extra\":1}}", 8),
                 {"tensor 'w'", "unexpected key \"extra\""});
  // Offsets out of range: past the data section, or short of it.
  expect_refused(file_of(R"({"w":{)" + f32 + "[0,8]}}", 4),
                 {"tensor 'w'", "end at 8", "holds 4 bytes", "truncated"});
  expect_refused(file_of(R"({"w":{)" + f32 + "[0,8]}}", 12), {"tensor 'w'", "extra bytes"});
  // Overlapping and gapped offsets.
  expect_refused(file_of(R"({"a":{)" + f32 + "[0,8]},\"b\":{" + f32 + "[4,12]}}", 12),
                 {"tensor 'b'", "overlap those of 'a' [0, 8]"});
  expect_refused(file_of(R"({"a":{)" + f32 + "[0,8]},\"b\":{" + f32 + "[12,20]}}", 20),
                 {"tensor 'b'", "begin at 12, expected 8", "a gap after 'a'"});
  expect_refused(file_of(R"({"a":{)" + f32 + "[0,8]},\"__metadata__\":{\"n\":1}}", 8),
                 {"\"__metadata__\" entry \"n\" is not a string"});
  expect_refused(file_of(R"({"w":{"dtype":"F32","shape":[1099511627776,1099511627776,)"
                         R"(1099511627776],"data_offsets":[0,8]}})",
                         8),
                 {"tensor 'w'", "more bytes than any file holds"});
}

TEST(SafetensorsBadInput, WritingRefusesWhatTheFormatCannotHold) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  expect_throw_with<std::invalid_argument>(
      [&] {
        save_safetensors(path, {{"c", torch::zeros({2}, torch::kComplexFloat)}}, {});
      },
      {path, "tensor 'c'"});
  expect_throw_with<std::invalid_argument>(
      [&] {
        save_safetensors(path, {{"a", torch::zeros({1})}, {"a", torch::zeros({1})}}, {});
      },
      {path, "'a'", "repeated"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Json, ParsesTheGrammarStrictly) {
  const JsonValue v = parse_json(
      " {\"s\": \"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\", \"n\": -0.5e+3, \"i\": 12,"
      " \"t\": true, \"f\": false, \"z\": null, \"a\": [1, [], {}]} ");
  ASSERT_EQ(v.kind, JsonValue::Kind::kObject);
  EXPECT_EQ(v.find("s")->text, "a\"b\\c/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("n")->text, "-0.5e+3");
  EXPECT_EQ(v.find("n")->as_index(), std::nullopt);
  EXPECT_EQ(v.find("i")->as_index(), 12u);
  EXPECT_TRUE(v.find("t")->boolean);
  EXPECT_FALSE(v.find("f")->boolean);
  EXPECT_EQ(v.find("z")->kind, JsonValue::Kind::kNull);
  EXPECT_EQ(v.find("a")->items.size(), 3u);
  EXPECT_EQ(v.find("missing"), nullptr);
  for (const char* bad : {"",
                          "{",
                          "{\"a\" 1}",
                          "{\"a\":1,}",
                          "[1,]",
                          "01",
                          "1.",
                          "-",
                          "\"\\x\"",
                          "\"\\ud800\"",
                          "\"tab\there\"",
                          "tru",
                          "{} {}",
                          "{'a': 1}",
                          "[1 2]",
                          "{\"a\":1,\"a\":2}"})
    EXPECT_THROW(parse_json(bad), std::runtime_error) << bad;
  EXPECT_THROW(parse_json(std::string(100, '[') + std::string(100, ']')), std::runtime_error);
  EXPECT_NO_THROW(parse_json(std::string(60, '[') + std::string(60, ']')));
}

TEST(Json, QuotingRoundTrips) {
  const std::string text = "line\nnext \"q\" \\ \t \x01 \xc3\xa9";
  EXPECT_EQ(parse_json(json_quote(text)).text, text);
  EXPECT_EQ(json_quote("a\"b"), "\"a\\\"b\"");
}

}  // namespace
}  // namespace combiner::util
