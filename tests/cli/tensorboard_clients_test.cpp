// A short run's TensorBoard files as TensorBoard itself shows them: its Python EventAccumulator
// and its Rust data server (tests/python/tensorboard_clients.py, in the venv's python). The run
// is killed with kill -9 between checkpoints and resumed with a new train.steps; then
// combiner-eval --heatmap evaluates the last checkpoint, an older one, and the older one again.
// Each reader must show every scalar of metrics.jsonl once, at its step, with the value the
// resumed run logged; sample grids and heatmaps that decode at their sizes; the config at step 0
// and the resumed config at the restart step; and each evaluation in its own run, with no point
// of the training run lost.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "cli/processes.h"
#include "event_reader.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/tensorboard_log.h"
#include "util/json.h"
#include "venv_python.h"

namespace combiner {
namespace {

using combiner::testing::ChildProcess;
using combiner::testing::read_text;
using combiner::testing::run_binary;
using combiner::testing::TempDir;

namespace fs = std::filesystem;

constexpr int64_t kFirstSteps = 200;   // the killed run's train.steps
constexpr int64_t kResumedSteps = 30;  // what --resume --set train.steps= makes it
constexpr int64_t kEvery = 10;         // eval_every and sample_every
constexpr int64_t kCheckpointEvery = 20;

struct Point {
  int64_t step = 0;
  std::string rest;  // a scalar's value, an image's sizes and mode, a text's JSON array
};
using Series = std::map<std::string, std::map<std::string, std::vector<Point>>>;  // run, tag

// What one reader shows.
struct View {
  std::set<std::string> runs;
  Series scalars, images, texts;
};

// tensorboard_clients.py's output, by reader. Other lines are the readers' own log (TensorBoard
// reports each purge a restart makes).
std::map<std::string, View> parse_views(const std::string& output) {
  std::map<std::string, View> views;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string reader, kind, run, tag;
    words >> reader >> kind >> run;
    if (reader != "event_accumulator" && reader != "data_server") continue;
    View& v = views[reader];
    if (kind == "run") {
      v.runs.insert(run);
      continue;
    }
    Point p;
    words >> tag >> p.step;
    std::getline(words >> std::ws, p.rest);
    Series& s = kind == "scalar" ? v.scalars : kind == "image" ? v.images : v.texts;
    if (kind != "scalar" && kind != "image" && kind != "text")
      throw std::runtime_error("tensorboard_clients.py: unexpected line: " + line);
    s[run][tag].push_back(p);
  }
  return views;
}

std::vector<int64_t> steps_of(const std::vector<Point>& points) {
  std::vector<int64_t> out;
  for (const auto& p : points) out.push_back(p.step);
  return out;
}

// 1, 2, ..., last (every) or every, 2 * every, ..., last.
std::vector<int64_t> steps_up_to(int64_t last, int64_t every) {
  std::vector<int64_t> out;
  for (int64_t s = every; s <= last; s += every) out.push_back(s);
  return out;
}

// metrics.jsonl's `key` by step; the newest line wins (a resumed run writes its steps again).
std::map<int64_t, double> metric(const std::string& run, const std::string& key) {
  std::map<int64_t, double> out;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto json = util::parse_json(line);
    if (const auto* v = json.find(key))
      out[std::stoll(json.find("step")->text)] = std::stod(v->text);
  }
  return out;
}

// Steps that metrics.jsonl holds twice for `key`: those a killed run logged past its checkpoint.
std::set<int64_t> repeated_steps(const std::string& run, const std::string& key) {
  std::set<int64_t> seen, repeated;
  std::ifstream in(run + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const auto json = util::parse_json(line);
    if (!json.find(key)) continue;
    const int64_t step = std::stoll(json.find("step")->text);
    if (!seen.insert(step).second) repeated.insert(step);
  }
  return repeated;
}

// "<width> <height> <width> <height> <mode>": what a reader shows for the PNG at path (its
// IHDR's size twice, as the summary and the decoded image must have it, and PIL's mode).
std::string expected_image(const std::string& path) {
  const std::string png = read_text(path);
  if (png.size() < 26) return "not a PNG: " + path;
  auto be32 = [&](size_t at) {
    uint32_t v = 0;
    for (size_t i = at; i < at + 4; ++i) v = (v << 8) | static_cast<unsigned char>(png[i]);
    return v;
  };
  const int colour = png[25];
  const std::string mode = colour == 0   ? "L"
                           : colour == 2 ? "RGB"
                                         : "colour type " + std::to_string(colour);
  const std::string size = std::to_string(be32(16)) + " " + std::to_string(be32(20));
  return size + " " + size + " " + mode;
}

class VenvTensorBoardClients : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (combiner::testing::venv_python().empty()) return;
    dir_ = new TempDir();
    first_config_ = new std::string;
    eval_bpd_ = new std::map<int64_t, double>;
    views_ = new std::map<std::string, View>;
    setup_error_ = new std::string(train_kill_resume_and_evaluate());
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete setup_error_;
    delete first_config_;
    delete eval_bpd_;
    delete views_;
  }
  void SetUp() override {
    if (combiner::testing::venv_python().empty()) GTEST_SKIP() << combiner::testing::kVenvMissing;
    ASSERT_TRUE(setup_error_->empty()) << *setup_error_;
  }

  static std::string run() { return dir_->file("run"); }
  static std::string binary(const std::string& name) {
    return std::string(COMBINER_BINARY_DIR) + "/" + name;
  }
  static int64_t steps_logged() {
    std::ifstream in(run() + "/metrics.jsonl");
    int64_t n = 0;
    for (std::string line; std::getline(in, line);)
      n += line.find("\"train_bpd\"") != std::string::npos;
    return n;
  }

  // The whole scenario; "" when every command did what it should, else what went wrong.
  static std::string train_kill_resume_and_evaluate() {
    const std::string config = dir_->file("run.yaml");
    std::ofstream(config) << "data: {dataset: fashion_mnist, val_size: 4}\n"
                             "model: {layers: 1, width: 16, heads: 2, mlp_ratio: 2, dropout: 0.1,\n"
                             "        attention: {type: combiner-axial-rowmajor}}\n"
                             "train: {steps: "
                          << kFirstSteps
                          << ", batch_size: 2, warmup_steps: 2, threads: 1, final_test: false,\n"
                             "        log_every: 1, eval_every: "
                          << kEvery << ", sample_every: " << kEvery
                          << ", sample_count: 2,\n        checkpoint_every: " << kCheckpointEvery
                          << ", out_dir: " << run() << "}\n";
    {
      // Killed past its first checkpoint, well before its second.
      ChildProcess train({binary("combiner-train"), "--config", config}, {}, dir_->file("log"));
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
      while (steps_logged() <= kCheckpointEvery + 5 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      train.signal(SIGKILL);
      if (train.wait_for(60) != -1)
        return "the run was not killed: " + read_text(dir_->file("log"));
    }
    *first_config_ = read_text(run() + "/config.yaml");
    const auto resumed = run_binary(
        "combiner-train",
        "--config " + config + " --resume --set train.steps=" + std::to_string(kResumedSteps));
    if (resumed.status != 0) return "--resume failed: " + resumed.output;
    if (resumed.output.find("at step " + std::to_string(kCheckpointEvery) + "\n") ==
        std::string::npos)
      return "expected a resume from step " + std::to_string(kCheckpointEvery) + ": " +
             resumed.output;
    // The last checkpoint, an older one, and the older one again (which replaces the first).
    for (const int64_t step : {kResumedSteps, kCheckpointEvery, kCheckpointEvery}) {
      const auto eval = run_binary("combiner-eval",
                                   "--checkpoint " + train::checkpoint_path(run(), step) +
                                       " --split val --heatmap " + heatmap(step));
      if (eval.status != 0) return "combiner-eval failed: " + eval.output;
      (*eval_bpd_)[step] = std::stod(eval.last_line().substr(std::string("val_bpd: ").size()));
    }
    const auto read = combiner::testing::run_venv_script("tensorboard_clients.py", run());
    if (read.status != 0) return "tensorboard_clients.py failed: " + read.output;
    try {
      *views_ = parse_views(read.output);
    } catch (const std::exception& e) {
      return e.what();
    }
    if (views_->size() != 2) return "expected two readers: " + read.output;
    return "";
  }
  static std::string heatmap(int64_t step) {
    return dir_->file("heat-" + std::to_string(step) + ".png");
  }
  static std::string eval_run(int64_t step) {
    return fs::relative(train::eval_tensorboard_folder(
                            train::tensorboard_folder(run()), step, "val", "model"),
                        run())
        .string();
  }

  static TempDir* dir_;
  static std::string* setup_error_;
  static std::string* first_config_;
  static std::map<int64_t, double>* eval_bpd_;  // combiner-eval's line, by checkpoint step
  static std::map<std::string, View>* views_;   // by reader
};
TempDir* VenvTensorBoardClients::dir_ = nullptr;
std::string* VenvTensorBoardClients::setup_error_ = nullptr;
std::string* VenvTensorBoardClients::first_config_ = nullptr;
std::map<int64_t, double>* VenvTensorBoardClients::eval_bpd_ = nullptr;
std::map<std::string, View>* VenvTensorBoardClients::views_ = nullptr;

TEST_F(VenvTensorBoardClients, EveryScalarOnceAtItsStepWithTheResumedRunsValue) {
  // The scenario did replay steps: the killed run had logged past its checkpoint.
  ASSERT_FALSE(repeated_steps(run(), "train_bpd").empty());
  const std::map<std::string, std::string> keys = {{"train/bpd", "train_bpd"},
                                                   {"train/lr", "lr"},
                                                   {"train/grad_norm", "grad_norm"},
                                                   {"train/tokens_per_s", "tokens_per_s"},
                                                   {"val/bpd", "val_bpd"}};
  for (const auto& [reader, view] : *views_) {
    const auto& tags = view.scalars.at("tb");
    std::set<std::string> names;
    for (const auto& [tag, points] : tags) names.insert(tag);
    EXPECT_EQ(names,
              (std::set<std::string>{"train/bpd",
                                     "train/grad_norm",
                                     "train/lr",
                                     "train/skipped_steps",
                                     "train/tokens_per_s",
                                     "val/bpd"}))
        << reader;
    for (const auto& [tag, key] : keys) {
      const auto expected = metric(run(), key);
      std::vector<int64_t> steps;
      for (const auto& [step, value] : expected) steps.push_back(step);
      EXPECT_EQ(
          steps,
          tag == "val/bpd" ? steps_up_to(kResumedSteps, kEvery) : steps_up_to(kResumedSteps, 1))
          << key << " in metrics.jsonl";
      // Each step once, in order, with the value metrics.jsonl has last (as float32).
      ASSERT_EQ(steps_of(tags.at(tag)), steps) << reader << " " << tag;
      for (const auto& p : tags.at(tag))
        EXPECT_NEAR(std::stod(p.rest), expected.at(p.step), 1e-6 * std::abs(expected.at(p.step)))
            << reader << " " << tag << " at step " << p.step;
    }
    ASSERT_EQ(steps_of(tags.at("train/skipped_steps")), steps_up_to(kResumedSteps, 1)) << reader;
    for (const auto& p : tags.at("train/skipped_steps")) EXPECT_EQ(std::stod(p.rest), 0.0);
  }
}

TEST_F(VenvTensorBoardClients, SampleGridsAndHeatmapsDecodeAtTheirSizes) {
  for (const auto& [reader, view] : *views_) {
    const auto& samples = view.images.at("tb").at("samples");
    ASSERT_EQ(steps_of(samples), steps_up_to(kResumedSteps, kEvery)) << reader;
    for (const auto& p : samples) {
      char name[32];
      std::snprintf(name, sizeof(name), "/samples-%08lld.png", static_cast<long long>(p.step));
      EXPECT_EQ(p.rest, expected_image(run() + name)) << reader << " at step " << p.step;
    }
    EXPECT_EQ(view.images.at("tb").size(), 1u) << reader;  // no heatmap among training's tags
    for (const int64_t step : {kCheckpointEvery, kResumedSteps}) {
      const auto& heat = view.images.at(eval_run(step)).at("eval/val_bits_heatmap");
      ASSERT_EQ(steps_of(heat), std::vector<int64_t>{step}) << reader;
      EXPECT_EQ(heat[0].rest, expected_image(heatmap(step))) << reader;
    }
  }
}

TEST_F(VenvTensorBoardClients, TextDashboardShowsTheConfigOfEachStart) {
  const std::string resumed_config = read_text(run() + "/config.yaml");
  ASSERT_NE(resumed_config, *first_config_);
  const std::vector<std::pair<int64_t, std::string>> expected = {
      {0, *first_config_}, {kCheckpointEvery + 1, resumed_config}};
  for (const auto& [reader, view] : *views_) {
    ASSERT_EQ(view.texts.size(), 1u) << reader;  // the training run alone has text
    const auto& config = view.texts.at("tb").at("config");
    ASSERT_EQ(config.size(), expected.size()) << reader;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(config[i].step, expected[i].first) << reader;
      const auto text_and_html = util::parse_json(config[i].rest);
      ASSERT_EQ(text_and_html.items.size(), 2u) << config[i].rest;
      EXPECT_EQ(text_and_html.items[0].text, train::config_markdown(expected[i].second)) << reader;
      // The text plugin renders it as a code block holding the YAML's lines, train.steps's too.
      const std::string& html = text_and_html.items[1].text;
      EXPECT_NE(html.find("<pre><code>"), std::string::npos) << html;
      const std::string& yaml = expected[i].second;
      const auto at = yaml.find("\n  steps: ");
      ASSERT_NE(at, std::string::npos) << yaml;
      const std::string steps = yaml.substr(at + 1, yaml.find('\n', at + 1) - at - 1);
      EXPECT_NE(steps.find(std::to_string(i == 0 ? kFirstSteps : kResumedSteps)),
                std::string::npos);
      EXPECT_NE(html.find(steps + "\n"), std::string::npos)
          << reader << " lacks '" << steps << "': " << html;
    }
  }
}

TEST_F(VenvTensorBoardClients, EvaluatingAnOlderCheckpointDropsNoPointOfTheRun) {
  for (const auto& [reader, view] : *views_) {
    // Every evaluation's bits/dim is shown, once, wherever it went (the last checkpoint's too,
    // which a data server drops if the older checkpoint's lower step comes after it in one run);
    // the second evaluation of the older checkpoint in place of the first.
    std::map<int64_t, std::vector<double>> shown;
    for (const auto& [run_name, tags] : view.scalars)
      if (tags.count("eval/val_bpd"))
        for (const auto& p : tags.at("eval/val_bpd")) shown[p.step].push_back(std::stod(p.rest));
    ASSERT_EQ(shown.size(), 2u) << reader;
    for (const int64_t step : {kCheckpointEvery, kResumedSteps}) {
      ASSERT_EQ(shown[step].size(), 1u) << reader << " at step " << step;
      EXPECT_NEAR(shown[step][0], eval_bpd_->at(step), 5e-5) << reader;
    }
    // Each in a run of its own, which holds nothing else; the training run keeps its own tags
    // and every point of them (the first test checks their values).
    EXPECT_EQ(view.runs,
              (std::set<std::string>{"tb", eval_run(kCheckpointEvery), eval_run(kResumedSteps)}))
        << reader;
    for (const int64_t step : {kCheckpointEvery, kResumedSteps}) {
      ASSERT_EQ(view.scalars.count(eval_run(step)), 1u) << reader;
      EXPECT_EQ(view.scalars.at(eval_run(step)).size(), 1u) << reader;
      EXPECT_EQ(steps_of(view.scalars.at(eval_run(step)).at("eval/val_bpd")),
                std::vector<int64_t>{step});
    }
    EXPECT_EQ(view.scalars.at("tb").count("eval/val_bpd"), 0u) << reader;
    EXPECT_EQ(steps_of(view.scalars.at("tb").at("val/bpd")), steps_up_to(kResumedSteps, kEvery))
        << reader;
  }
  EXPECT_EQ(combiner::testing::event_files(run() + "/" + eval_run(kCheckpointEvery)).size(), 2u);
}

}  // namespace
}  // namespace combiner
