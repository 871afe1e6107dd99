// Checkpoints that broke the fuzz target's rule (fuzz/checkpoint_fuzz.cpp: refuse bad bytes only
// with std::runtime_error naming the file), kept so the bugs stay fixed. The state used to be
// read with torch::pickle_load; LibTorch 1.13 crashed (SIGBUS/SIGSEGV) on a pickle whose REDUCE
// finds an empty stack, allocated 4 GB for a record whose zip entry claimed that size, and a
// dict without one of the expected keys escaped as std::out_of_range naming no file.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "test_utils.h"
#include "train/checkpoint.h"

namespace combiner::train {
namespace {

using combiner::testing::expect_contains;

std::string regression_file(const std::string& name) {
  return std::string(COMBINER_SOURCE_DIR) + "/tests/regressions/checkpoint/" + name;
}

std::string load_message(const std::string& path) {
  try {
    load_checkpoint(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG TYPE: ") + e.what();
  }
  return "NO ERROR";
}

TEST(CheckpointFuzzRegression, ReduceOnAnEmptyStackIsRefused) {
  const auto path = regression_file("reduce-on-empty-stack.ckpt");
  expect_contains(load_message(path),
                  {path, "not a valid combiner checkpoint", "data.pkl, byte 3", "stack underflow"});
}

TEST(CheckpointFuzzRegression, RecordClaimingFourGigabytesIsRefusedUnread) {
  const auto path = regression_file("record-claims-4gb.ckpt");
  expect_contains(load_message(path), {path, "archive/data.pkl", "past the end"});
}

TEST(CheckpointFuzzRegression, TensorReachingPastItsStorageIsRefused) {
  // Written by Python's torch.save: 'optimizer' claims 100000 bytes of a 4-byte storage.
  const auto path = regression_file("tensor-past-its-storage.ckpt");
  expect_contains(load_message(path), {path, "reaches past the end of its storage"});
}

// A checkpoint file around a state that torch::pickle_save wrote.
std::vector<char> checkpoint_bytes(const c10::impl::GenericDict& state) {
  const std::vector<char> payload = torch::pickle_save(state);
  const uint64_t size = payload.size();
  const auto crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(size)));
  std::vector<char> file = {'C', 'M', 'B', 'C', 'K', 'P', 'T', '1'};
  file.resize(20);
  std::memcpy(file.data() + 8, &size, 8);
  std::memcpy(file.data() + 16, &crc, 4);
  file.insert(file.end(), payload.begin(), payload.end());
  return file;
}

std::string parse_message(const std::vector<char>& file) {
  try {
    parse_checkpoint(file.data(), file.size(), "x.ckpt");
  } catch (const std::runtime_error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("WRONG TYPE: ") + e.what();
  }
  return "NO ERROR";
}

TEST(CheckpointFuzzRegression, MissingOrMistypedEntriesAreNamed) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("format_version", int64_t{1});
  state.insert("config_yaml", std::string("data: {}\n"));
  expect_contains(parse_message(checkpoint_bytes(state)),
                  {"x.ckpt", "'step' is missing or not an integer"});
  state.insert("step", std::string("three"));
  expect_contains(parse_message(checkpoint_bytes(state)),
                  {"x.ckpt", "'step' is missing or not an integer"});
  state.insert_or_assign("step", int64_t{3});
  state.insert("samples_seen", int64_t{0});
  c10::Dict<std::string, int64_t> model;
  model.insert("w", 5);
  state.insert("model", model);
  expect_contains(parse_message(checkpoint_bytes(state)), {"x.ckpt", "'model.w' is not a tensor"});
}

TEST(CheckpointFuzzRegression, ANewerFormatNamesItsWriterAndWhatToDo) {
  c10::impl::GenericDict state(c10::StringType::get(), c10::AnyType::get());
  state.insert("format_version", int64_t{2});
  state.insert("written_by", std::string("LibTorch 3.0.0"));
  expect_contains(parse_message(checkpoint_bytes(state)),
                  {"x.ckpt",
                   "format version 2 (written by LibTorch 3.0.0), this build reads 1",
                   "read it with the combiner build that wrote it"});
}

TEST(CheckpointFuzzRegression, EveryValueKindTheStateUsesReadsBack) {
  // The strict reader against torch::pickle_save for the shapes a run produces: empty and 0-d
  // tensors, a non-contiguous view, large ints (LONG1) and sizes above 255 (BININT2).
  Checkpoint c;
  c.config_yaml = std::string(70000, 'y');
  c.step = int64_t{1} << 40;
  c.samples_seen = 300;
  const torch::Tensor big = torch::arange(600, torch::kFloat).reshape({20, 30});
  c.model = {{"a.empty", torch::zeros({0, 3})},
             {"b.scalar", torch::tensor(2.5)},
             {"c.transposed", big.t()},
             {"d.long", torch::arange(5, torch::kLong)},
             {"e.half", torch::ones({3}, torch::kHalf)}};
  c.optimizer = std::vector<char>(1000, 'o');
  c.rng_state = torch::arange(16, torch::kUInt8);
  const std::string path = ::testing::TempDir() + "/kinds.ckpt";
  save_checkpoint(path, c);
  const Checkpoint back = load_checkpoint(path);
  EXPECT_EQ(back.config_yaml, c.config_yaml);
  EXPECT_EQ(back.step, c.step);
  EXPECT_EQ(back.samples_seen, 300);
  EXPECT_EQ(back.optimizer, c.optimizer);
  EXPECT_TRUE(torch::equal(back.rng_state, c.rng_state));
  ASSERT_EQ(back.model.size(), c.model.size());
  for (size_t i = 0; i < c.model.size(); ++i) {
    EXPECT_EQ(back.model[i].first, c.model[i].first);
    EXPECT_EQ(back.model[i].second.sizes(), c.model[i].second.sizes()) << c.model[i].first;
    EXPECT_TRUE(torch::equal(back.model[i].second, c.model[i].second)) << c.model[i].first;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace combiner::train
