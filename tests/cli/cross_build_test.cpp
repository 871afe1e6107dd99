// Checkpoints across the two builds, through their binaries: the CPU build on Debian's LibTorch
// 1.13 (build/) and the CUDA build on pip's LibTorch 2.11 (build-cuda/), which key the AdamW
// state differently. Both ways, a run trained with one build resumes with the other: restored and
// saved again without an update, its optimizer state equals the writer's exactly; then it goes on
// to the end of the schedule (step counts, learning rates) where the writer's uninterrupted run
// ends, up to the two LibTorch's float round-off (4e-8 in the parameters here, 3e-7 of the
// largest second moment; fresh moments would have ended 3 step counts short). The other build
// evaluates, samples and exports the writer's checkpoint. The other build's folder is
// COMBINER_OTHER_BUILD_DIR (CMake), found beside this one; where it lacks the binaries the tests
// skip, and ctest reports them skipped.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli/run_binary.h"
#include "config/config.h"
#include "model/transformer.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/optimizer.h"
#include "train/optimizer_state.h"
#include "util/safetensors.h"

namespace combiner {
namespace {

namespace fs = std::filesystem;
using combiner::testing::BinaryRun;
using combiner::testing::run_shell;
using combiner::testing::TempDir;

const std::string kThis = COMBINER_BINARY_DIR;
const std::string kOther = COMBINER_OTHER_BUILD_DIR;

// Why the other build cannot take part, or "".
std::string other_build_missing() {
  for (const std::string binary :
       {"combiner-train", "combiner-eval", "combiner-sample", "combiner-export"})
    if (!fs::exists(kOther + "/" + binary))
      return "no " + kOther + "/" + binary + ": build the other LibTorch's binaries there";
  return "";
}

BinaryRun run(const std::string& build, const std::string& binary, const std::string& args) {
  return run_shell(build + "/" + binary + " " + args);
}

// 6 updates (warmup, then cosine), a checkpoint after 3.
std::string write_cross_build_config(const TempDir& dir) {
  const std::string path = dir.file("cross.yaml");
  std::ofstream(path) << "data: {dataset: fashion_mnist, val_size: 6}\n"
                         "model: {layers: 1, width: 16, heads: 2, mlp_ratio: 2,\n"
                         "        attention: {type: combiner-axial-rowmajor}}\n"
                         "train: {steps: 6, batch_size: 2, warmup_steps: 2, threads: 1,\n"
                         "        checkpoint_every: 3, final_test: false, log_every: 1}\n";
  return path;
}

struct AdamW {
  std::vector<int64_t> steps;  // -1: no state
  std::vector<torch::Tensor> exp_avg, exp_avg_sq;
};

// A checkpoint's AdamW state by parameter, read with this build's reader.
AdamW adamw_of(const std::string& path) {
  const auto checkpoint = train::load_checkpoint(path);
  auto c = config::parse_config(checkpoint.config_yaml, path);
  config::validate(c);
  model::ImageTransformer model(model::TransformerOptions::from_config(c));
  auto optimizer = train::make_optimizer(model, c.train);
  train::restore_adamw_state(*optimizer, checkpoint.optimizer, path);
  AdamW out;
  for (const auto& p : model->parameters()) {
    const auto found = optimizer->state().find(train::state_key(p));
    if (found == optimizer->state().end()) {
      out.steps.push_back(-1);
      out.exp_avg.emplace_back();
      out.exp_avg_sq.emplace_back();
      continue;
    }
    const auto& s = static_cast<const torch::optim::AdamWParamState&>(*found->second);
    out.steps.push_back(s.step());
    out.exp_avg.push_back(s.exp_avg());
    out.exp_avg_sq.push_back(s.exp_avg_sq());
  }
  return out;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// The "lr" of each training line of a run's metrics.jsonl, as written.
std::vector<std::string> learning_rates(const std::string& run) {
  std::vector<std::string> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto at = line.find("\"lr\": ");
    if (at != std::string::npos) out.push_back(line.substr(at + 6, line.find(',', at) - at - 6));
  }
  return out;
}

double last_value_after(const std::string& output, const std::string& key) {
  const auto at = output.rfind(key);
  return at == std::string::npos ? -1.0 : std::stod(output.substr(at + key.size()));
}

// `writer` trains; `reader` resumes its checkpoint of step 3, first without an update, then to
// the end; `reader` evaluates, samples and exports it.
void cross(const std::string& writer, const std::string& reader) {
  TempDir dir;
  const std::string config = write_cross_build_config(dir);
  const std::string written = dir.file("written"), resumed = dir.file("resumed");
  const auto trained =
      run(writer, "combiner-train", "--config " + config + " --set train.out_dir=" + written);
  ASSERT_EQ(trained.status, 0) << trained.output;
  const std::string at3 = train::checkpoint_path(written, 3);
  const auto writer_name = train::load_checkpoint(at3).written_by;
  fs::create_directories(resumed + "/checkpoints");
  fs::copy_file(at3, train::checkpoint_path(resumed, 3));

  // Restored and saved again by the reader: the same state, exactly.
  const std::string args = "--config " + config + " --set train.out_dir=" + resumed + " --resume";
  const auto again = run(reader, "combiner-train", args + " --set train.steps=3");
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("at step 3 (written by " + writer_name + ")"), std::string::npos)
      << "the two builds run the same LibTorch?\n"
      << again.output;
  const auto saved = train::load_checkpoint(train::checkpoint_path(resumed, 3));
  EXPECT_NE(saved.written_by, writer_name);
  const auto a = adamw_of(at3), b = adamw_of(train::checkpoint_path(resumed, 3));
  EXPECT_EQ(a.steps, b.steps);
  for (size_t i = 0; i < a.steps.size(); ++i) {
    EXPECT_EQ(a.steps[i], 3) << "parameter " << i;
    if (a.steps[i] < 0 || b.steps[i] < 0) continue;
    EXPECT_TRUE(torch::equal(a.exp_avg[i], b.exp_avg[i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(a.exp_avg_sq[i], b.exp_avg_sq[i])) << "parameter " << i;
  }

  // On to the end: where the writer's uninterrupted run ends.
  const auto rest = run(reader, "combiner-train", args);
  ASSERT_EQ(rest.status, 0) << rest.output;
  const auto straight = train::load_checkpoint(train::checkpoint_path(written, 6));
  const auto ended = train::load_checkpoint(train::checkpoint_path(resumed, 6));
  EXPECT_EQ(ended.samples_seen, straight.samples_seen);
  ASSERT_EQ(ended.model.size(), straight.model.size());
  for (size_t i = 0; i < ended.model.size(); ++i)
    EXPECT_LT(max_difference(ended.model[i].second, straight.model[i].second), 2e-6)
        << ended.model[i].first;
  const auto s = adamw_of(train::checkpoint_path(written, 6));
  const auto e = adamw_of(train::checkpoint_path(resumed, 6));
  for (size_t i = 0; i < s.steps.size(); ++i) {
    EXPECT_EQ(e.steps[i], 6) << "parameter " << i;
    EXPECT_EQ(s.steps[i], 6) << "parameter " << i;
    if (e.steps[i] < 0 || s.steps[i] < 0) continue;
    for (const auto& [ours, theirs] :
         {std::pair(e.exp_avg[i], s.exp_avg[i]), std::pair(e.exp_avg_sq[i], s.exp_avg_sq[i])})
      EXPECT_LE(max_difference(ours, theirs), 1e-4 * theirs.abs().max().item<double>() + 1e-12)
          << "parameter " << i;
  }
  const auto rates = learning_rates(written), continued = learning_rates(resumed);
  ASSERT_EQ(rates.size(), 6u);
  ASSERT_EQ(continued.size(), 3u);  // steps 4 to 6: the run at step 3 took none
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(continued[i], rates[3 + i]) << "step " << 4 + i;

  // Evaluation, sampling and export of the writer's checkpoint by the reader.
  const std::string val = "--checkpoint " + at3 + " --split val";
  const auto here = run(reader, "combiner-eval", val), there = run(writer, "combiner-eval", val);
  ASSERT_EQ(here.status, 0) << here.output;
  ASSERT_EQ(there.status, 0) << there.output;
  EXPECT_GT(last_value_after(here.output, "val_bpd: "), 0.0) << here.output;
  EXPECT_NEAR(last_value_after(here.output, "val_bpd: "),
              last_value_after(there.output, "val_bpd: "),
              2e-4);
  const auto sampled =
      run(reader, "combiner-sample", "--checkpoint " + at3 + " --num 2 --out " + dir.file("s.png"));
  EXPECT_EQ(sampled.status, 0) << sampled.output;
  EXPECT_TRUE(fs::exists(dir.file("s.png")));
  const auto exported =
      run(reader, "combiner-export", "--checkpoint " + at3 + " --out " + dir.file("m.safetensors"));
  ASSERT_EQ(exported.status, 0) << exported.output;
  const auto weights = util::load_safetensors(dir.file("m.safetensors"));
  const auto checkpoint = train::load_checkpoint(at3);
  std::map<std::string, torch::Tensor> expected(checkpoint.model.begin(), checkpoint.model.end());
  EXPECT_EQ(weights.tensors.size(), expected.size());
  for (const auto& [name, tensor] : weights.tensors)
    EXPECT_TRUE(expected.count(name) && torch::equal(tensor, expected.at(name))) << name;
}

TEST(CrossBuild, TheOtherBuildsRunContinuesHere) {
  const auto missing = other_build_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  cross(kOther, kThis);
}

TEST(CrossBuild, ThisBuildsRunContinuesInTheOther) {
  const auto missing = other_build_missing();
  if (!missing.empty()) GTEST_SKIP() << missing;
  cross(kThis, kOther);
}

}  // namespace
}  // namespace combiner
