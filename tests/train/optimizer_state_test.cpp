// AdamW's state through the bytes of a checkpoint, keyed as either LibTorch keys it: the text
// form of LibTorch up to 2.1 ("0x55d0..."; Debian's 1.13) and the number form from 2.2 on (pip's
// 2.11). Each build writes one form; archives of both are built here the way torch::optim lays
// them out, so each build's suite reads the other's form too. A restored optimizer holds exactly
// the saved moments and step counts, and its next update equals the uninterrupted optimizer's.
// Archives this build cannot use are refused with one line, the optimizer left as it was.
#include <gtest/gtest.h>

#include <torch/version.h>

#include <sstream>

#include "model/transformer.h"
#include "test_utils.h"
#include "train/bits.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/optimizer_state.h"
#include "train/tiny_run.h"

namespace combiner::train {
namespace {

using torch::optim::AdamWParamState;
using torch::serialize::OutputArchive;

config::Config tiny_config(int64_t width = 16) {
  auto c = tiny_run("unused", 5);
  c.model.width = width;
  c.model.dropout = 0.0;
  c.train.weight_decay = 0.1;
  config::validate(c);
  return c;
}

// One update of `run` on the batch of `seed`; the last parameter (the head's bias) gets no
// gradient, so it has no state, which the archive must keep saying.
void take_step(ModelRun& run, int64_t seed) {
  torch::manual_seed(seed);
  const auto x = torch::randint(0, model::kVocab, {2, 784}, torch::kByte);
  run.optimizer->zero_grad();
  mean_bits(run.model->forward(x), x).backward();
  run.model->parameters().back().mutable_grad().reset();
  adamw_step(*run.optimizer);
}

enum class KeyForm { kText, kNumber };

std::string key_of(const torch::Tensor& p, KeyForm form) {
  const void* address = p.unsafeGetTensorImpl();
  if (form == KeyForm::kNumber) return std::to_string(reinterpret_cast<size_t>(address));
  std::ostringstream text;  // c10::guts::to_string of the pointer, as LibTorch 1.13 keys it
  text << address;
  return text.str();
}

// What torch::optim::serialize writes for AdamW, with the keys in `form`; with repeat_key, the
// second parameter of the first group lists the first one's key.
std::vector<char> archive_of(torch::optim::AdamW& optimizer,
                             KeyForm form,
                             const std::string& version = "1.5.0",
                             bool repeat_key = false) {
  OutputArchive archive;
  archive.write("pytorch_version", c10::IValue(version));
  OutputArchive state(archive.compilation_unit()), groups(archive.compilation_unit());
  groups.write("param_groups/size", torch::tensor(int64_t(optimizer.param_groups().size())));
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    OutputArchive saved_group(archive.compilation_unit()), options(archive.compilation_unit());
    saved_group.write("params/size", torch::tensor(int64_t(group.params().size())));
    for (size_t i = 0; i < group.params().size(); ++i) {
      const auto& p = group.params()[i];
      const auto& listed = repeat_key && g == 0 && i == 1 ? group.params()[0] : p;
      saved_group.write("params/" + std::to_string(i), c10::IValue(key_of(listed, form)));
      const auto found = optimizer.state().find(state_key(p));
      if (found == optimizer.state().end()) continue;
      OutputArchive one(archive.compilation_unit());
      static_cast<const AdamWParamState&>(*found->second).serialize(one);
      state.write(key_of(p, form), one);
    }
    static_cast<const torch::optim::AdamWOptions&>(group.options()).serialize(options);
    saved_group.write("options", options);
    groups.write("param_groups/" + std::to_string(g), saved_group);
  }
  archive.write("state", state);
  archive.write("param_groups", groups);
  std::vector<char> bytes;
  archive.save_to([&](const void* data, size_t size) {
    bytes.insert(
        bytes.end(), static_cast<const char*>(data), static_cast<const char*>(data) + size);
    return size;
  });
  return bytes;
}

const AdamWParamState* state_if_any(ModelRun& run, const torch::Tensor& p) {
  const auto found = run.optimizer->state().find(state_key(p));
  return found == run.optimizer->state().end()
             ? nullptr
             : &static_cast<const AdamWParamState&>(*found->second);
}

void expect_same_state(ModelRun& a, ModelRun& b) {
  const auto pa = a.model->parameters(), pb = b.model->parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const auto *s = state_if_any(a, pa[i]), *t = state_if_any(b, pb[i]);
    ASSERT_EQ(s == nullptr, t == nullptr) << "parameter " << i;
    if (!s) continue;
    EXPECT_EQ(s->step(), t->step()) << i;
    EXPECT_TRUE(torch::equal(s->exp_avg(), t->exp_avg())) << i;
    EXPECT_TRUE(torch::equal(s->exp_avg_sq(), t->exp_avg_sq())) << i;
  }
}

void copy_parameters(ModelRun& from, ModelRun& to) {
  torch::NoGradGuard no_grad;
  const auto a = from.model->parameters(), b = to.model->parameters();
  for (size_t i = 0; i < a.size(); ++i) b[i].copy_(a[i]);
}

class OptimizerStateKeys : public ::testing::TestWithParam<KeyForm> {};

TEST_P(OptimizerStateKeys, RestoredStateEqualsTheSavedAndTheNextUpdateEqualsAnUninterruptedOne) {
  const auto c = tiny_config();
  auto straight = make_model_run(c);
  for (int64_t step = 0; step < 2; ++step) take_step(straight, 100 + step);
  const auto bytes = archive_of(*straight.optimizer, GetParam());

  auto resumed = make_model_run(c);
  copy_parameters(straight, resumed);
  restore_adamw_state(*resumed.optimizer, bytes, "test archive");
  expect_same_state(straight, resumed);
  EXPECT_EQ(state_if_any(resumed, resumed.model->parameters().front())->step(), 2);
  EXPECT_EQ(state_if_any(resumed, resumed.model->parameters().back()), nullptr);

  take_step(straight, 102);
  take_step(resumed, 102);
  expect_same_state(straight, resumed);
  const auto a = straight.model->parameters(), b = resumed.model->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
}

INSTANTIATE_TEST_SUITE_P(EitherLibTorch,
                         OptimizerStateKeys,
                         ::testing::Values(KeyForm::kText, KeyForm::kNumber),
                         [](const auto& info) {
                           return info.param == KeyForm::kText ? "TextKeysOfLibTorch1"
                                                               : "NumberKeysOfLibTorch2";
                         });

TEST(OptimizerState, ThisBuildsOwnArchiveRoundTrips) {
  const auto c = tiny_config();
  auto saved = make_model_run(c);
  take_step(saved, 100);
  auto restored = make_model_run(c);
  restore_adamw_state(*restored.optimizer, capture_optimizer(*saved.optimizer), "own");
  expect_same_state(saved, restored);
}

// The bytes a checkpoint gets are capture_optimizer's, and the optimizer goes on holding its own
// moment tensors (a captured step holds their addresses); the CPU ones are copies then put back.
TEST(OptimizerState, CheckpointBytesLeaveTheOptimizersTensorsInPlace) {
  const auto c = tiny_config();
  auto run = make_model_run(c);
  take_step(run, 100);
  std::vector<torch::Tensor> before;
  for (auto& entry : run.optimizer->state()) {
    auto& s = static_cast<AdamWParamState&>(*entry.second);
    before.push_back(s.exp_avg());
    before.push_back(s.exp_avg_sq());
  }
  ASSERT_FALSE(before.empty());
  const auto bytes = adamw_state_bytes(*run.optimizer);
  EXPECT_EQ(bytes, capture_optimizer(*run.optimizer));
  size_t i = 0;
  for (auto& entry : run.optimizer->state()) {
    auto& s = static_cast<AdamWParamState&>(*entry.second);
    EXPECT_TRUE(s.exp_avg().is_same(before[i++]));
    EXPECT_TRUE(s.exp_avg_sq().is_same(before[i++]));
  }
  auto restored = make_model_run(c);
  restore_adamw_state(*restored.optimizer, bytes, "bytes");
  expect_same_state(run, restored);
}

// The message restore_adamw_state throws into an optimizer of config c, which it must leave
// unchanged.
std::string refusal(const config::Config& c, const std::vector<char>& bytes) {
  auto into = make_model_run(c);
  take_step(into, 5);  // some state of its own, to see it kept
  const auto before = capture_optimizer(*into.optimizer);
  std::string message = "NO ERROR";
  try {
    restore_adamw_state(*into.optimizer, bytes, "bad.ckpt");
  } catch (const std::runtime_error& e) {
    message = e.what();
  }
  auto reference = make_model_run(c);
  restore_adamw_state(*reference.optimizer, before, "before");
  expect_same_state(reference, into);
  return message;
}

TEST(OptimizerState, ArchivesThisBuildCannotUseAreRefusedWithOneLine) {
  const auto c = tiny_config();
  auto source = make_model_run(c);
  take_step(source, 1);
  auto wide_source = make_model_run(tiny_config(32));
  take_step(wide_source, 1);
  auto other = c;
  other.model.layers = 2;
  config::validate(other);
  auto deeper_source = make_model_run(other);
  take_step(deeper_source, 1);

  const std::vector<std::pair<std::vector<char>, std::vector<std::string>>> cases = {
      {std::vector<char>(100, 'x'), {"not a torch::optim archive this build reads"}},
      {archive_of(*source.optimizer, KeyForm::kText, "9.9.9"), {"unknown torch::optim format"}},
      {archive_of(*deeper_source.optimizer, KeyForm::kNumber),
       {"param_groups/0 holds", "parameters"}},
      {archive_of(*wide_source.optimizer, KeyForm::kText), {"exp_avg' is [", "its parameter is ["}},
      {archive_of(*source.optimizer, KeyForm::kNumber, "1.5.0", true),
       {"param_groups/0 parameter 1: its state key '", "' is listed twice"}},
  };
  for (const auto& [bytes, parts] : cases) {
    const std::string message = refusal(c, bytes);
    EXPECT_EQ(message.rfind("bad.ckpt: optimizer state: ", 0), 0u) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    for (const auto& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

TEST(OptimizerState, ACheckpointRefusalNamesTheFileTheWriterAndWhatToDo) {
  auto run = make_model_run(tiny_config());
  Checkpoint checkpoint;
  checkpoint.optimizer = std::vector<char>(100, 'x');
  auto message_for = [&](const std::string& writer) {
    checkpoint.written_by = writer;
    try {
      restore_optimizer(*run.optimizer, checkpoint, "run/checkpoints/step-00000002.ckpt");
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("NO ERROR");
  };
  const std::string other = message_for("LibTorch 9.9.0");
  for (const std::string& part :
       std::vector<std::string>{"run/checkpoints/step-00000002.ckpt: optimizer state",
                                "written by LibTorch 9.9.0, this build runs " + torch_build_name(),
                                "resume it with the build that wrote it"})
    EXPECT_NE(other.find(part), std::string::npos) << other;
  EXPECT_EQ(other.find('\n'), std::string::npos) << other;
  const std::string same = message_for(torch_build_name());
  EXPECT_NE(same.find("the file is damaged"), std::string::npos) << same;
  EXPECT_EQ(same.find("the build that wrote it"), std::string::npos) << same;
}

TEST(OptimizerState, CheckpointsRecordTheLibTorchThatWroteThem) {
  EXPECT_EQ(torch_build_name(), std::string("LibTorch ") + TORCH_VERSION);
  Checkpoint c;
  c.config_yaml = "data: {}\n";
  c.rng_state = torch::zeros({4}, torch::kUInt8);
  c.optimizer = {'o'};
  combiner::testing::TempDir dir;
  save_checkpoint(dir.file("c.ckpt"), c);
  EXPECT_EQ(load_checkpoint(dir.file("c.ckpt")).written_by, torch_build_name());
}

}  // namespace
}  // namespace combiner::train
