// TensorBoard event files of tiny training runs, read back with Python's protobuf
// (tests/event_reader.h; every record's CRCs checked): the tags and steps of a run, a resumed run
// appending a file that starts after its checkpoint with the config it runs with, a file cut
// mid-record, train.tensorboard false, and a folder or disk that fails: one warning, and training
// goes on.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "child_process.h"
#include "config/config.h"
#include "event_reader.h"
#include "test_utils.h"
#include "train/checkpoint.h"
#include "train/tensorboard_log.h"
#include "train/tiny_run.h"
#include "train/trainer.h"
#include "util/json.h"
#include "util/tfrecord.h"

namespace combiner::train {
namespace {

using combiner::testing::decode_event_files;
using combiner::testing::DecodedEvent;
using combiner::testing::DecodedFile;
using combiner::testing::event_files;
using combiner::testing::read_text;
using combiner::testing::TempDir;

namespace fs = std::filesystem;

std::vector<int64_t> steps_of(const std::vector<DecodedEvent>& events) {
  std::vector<int64_t> out;
  for (const auto& e : events) out.push_back(e.step);
  return out;
}

// metrics.jsonl's value of `key` at each step that has it.
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

// Counts the occurrences of needle in text.
int count_of(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

TEST(TensorBoardRun, EventsHoldTheScalarsSamplesAndConfigOfTheRun) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 4);
  c.train.log_every = 2;
  c.train.eval_every = 2;
  c.train.sample_every = 4;
  c.train.sample_count = 2;
  run_training(c, {});
  const auto files = event_files(tensorboard_folder(c.train.out_dir));
  ASSERT_EQ(files.size(), 1u);
  const DecodedFile f = decode_event_files(files, dir.path())[0];
  EXPECT_EQ(f.truncated_tail, 0);
  ASSERT_GE(f.events.size(), 3u);
  EXPECT_EQ(f.events[0].kind, "version");
  EXPECT_EQ(f.events[0].rest, "brain.Event:2");
  EXPECT_EQ(f.events[1].kind, "start");
  EXPECT_EQ(f.events[0].step, 0);
  EXPECT_EQ(f.events[1].step, 0);

  const auto config = f.of("config");
  ASSERT_EQ(config.size(), 1u);
  EXPECT_EQ(config[0].step, 0);
  // "<plugin> <JSON string>": the text plugin's, holding config.yaml as a Markdown code block.
  ASSERT_EQ(config[0].rest.rfind("text ", 0), 0u) << config[0].rest;
  EXPECT_EQ(util::parse_json(config[0].rest.substr(5)).text,
            config_markdown(read_text(c.train.out_dir + "/config.yaml")));

  const std::vector<int64_t> logged = {2, 4};
  for (const std::string tag : {"train/bpd",
                                "train/lr",
                                "train/grad_norm",
                                "train/tokens_per_s",
                                "train/skipped_steps",
                                "val/bpd"})
    EXPECT_EQ(steps_of(f.of(tag)), logged) << tag;
  // The values metrics.jsonl has at those steps, as float32.
  const std::map<std::string, std::string> same = {{"train/bpd", "train_bpd"},
                                                   {"train/lr", "lr"},
                                                   {"train/grad_norm", "grad_norm"},
                                                   {"val/bpd", "val_bpd"}};
  for (const auto& [tag, key] : same) {
    const auto expected = metric(c.train.out_dir, key);
    for (const auto& e : f.of(tag))
      EXPECT_NEAR(e.value(), expected.at(e.step), 1e-6 * std::abs(expected.at(e.step)))
          << tag << " at step " << e.step;
  }
  for (const auto& e : f.of("train/skipped_steps")) EXPECT_EQ(e.value(), 0.0);
  for (const auto& e : f.of("train/tokens_per_s")) EXPECT_GT(e.value(), 0.0);

  // The grid of samples-00000004.png: 2 tiles of 28 x 28 at scale 2 in a row, grey.
  const auto samples = f.of("samples");
  ASSERT_EQ(samples.size(), 1u);
  EXPECT_EQ(samples[0].step, 4);
  EXPECT_EQ(samples[0].rest, "60 118 1 118 60");
  EXPECT_TRUE(fs::exists(c.train.out_dir + "/samples-00000004.png"));

  std::set<std::string> tags;
  for (const auto& e : f.events)
    if (!e.tag.empty()) tags.insert(e.tag);
  EXPECT_EQ(tags,
            (std::set<std::string>{"config",
                                   "samples",
                                   "train/bpd",
                                   "train/grad_norm",
                                   "train/lr",
                                   "train/skipped_steps",
                                   "train/tokens_per_s",
                                   "val/bpd"}));
}

TEST(TensorBoardRun, AResumedRunAddsAFileThatStartsAfterItsCheckpoint) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 4);
  c.train.checkpoint_every = 2;
  c.train.log_every = 1;
  const auto done = run_training(c, {});
  // As if killed after logging steps 3 and 4 but before the step-4 checkpoint was whole.
  fs::resize_file(done.final_checkpoint, 100);
  RunOptions resume;
  resume.resume = true;
  run_training(c, resume);

  const auto files = event_files(tensorboard_folder(c.train.out_dir));
  ASSERT_EQ(files.size(), 2u);
  const auto decoded = decode_event_files(files, dir.path());
  EXPECT_EQ(steps_of(decoded[0].of("train/bpd")), (std::vector<int64_t>{1, 2, 3, 4}));
  const DecodedFile& resumed = decoded[1];
  ASSERT_GE(resumed.events.size(), 2u);
  EXPECT_EQ(resumed.events[0].kind, "version");
  EXPECT_EQ(resumed.events[0].step, 3);  // the step after the checkpoint's
  EXPECT_EQ(resumed.events[1].kind, "start");
  EXPECT_EQ(resumed.events[1].step, 3);
  ASSERT_EQ(resumed.of("config").size(), 1u);  // the config again, at the restart step
  EXPECT_EQ(resumed.of("config")[0].step, 3);
  EXPECT_EQ(steps_of(resumed.of("train/bpd")), (std::vector<int64_t>{3, 4}));
  // What TensorBoard shows: the first file up to the restart, then the second; each step once,
  // and the resumed steps repeat the lost ones exactly (resume is bit-exact on the CPU).
  std::vector<int64_t> shown;
  for (const auto& e : decoded[0].of("train/bpd"))
    if (e.step < 3) shown.push_back(e.step);
  for (const auto& e : resumed.of("train/bpd")) shown.push_back(e.step);
  EXPECT_EQ(shown, (std::vector<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(decoded[0].of("train/bpd")[2].rest, resumed.of("train/bpd")[0].rest);
  EXPECT_EQ(decoded[0].of("train/bpd")[3].rest, resumed.of("train/bpd")[1].rest);
}

TEST(TensorBoardRun, AResumeWithNewSettingsWritesItsConfigAtItsFirstStep) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 2);
  run_training(c, {});
  const std::string first = read_text(c.train.out_dir + "/config.yaml");
  c.train.steps = 4;  // as --resume --set train.steps=4 would
  c.train.lr = 1e-3;
  RunOptions resume;
  resume.resume = true;
  run_training(c, resume);
  const std::string second = read_text(c.train.out_dir + "/config.yaml");
  ASSERT_NE(first, second);

  const auto decoded =
      decode_event_files(event_files(tensorboard_folder(c.train.out_dir)), dir.path());
  ASSERT_EQ(decoded.size(), 2u);
  // What the Text dashboard shows: the config each invocation ran with, from its first step.
  const std::vector<std::pair<int64_t, std::string>> expected = {{0, first}, {3, second}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const auto config = decoded[i].of("config");
    ASSERT_EQ(config.size(), 1u) << decoded[i].path;
    EXPECT_EQ(config[0].step, expected[i].first);
    ASSERT_EQ(config[0].rest.rfind("text ", 0), 0u) << config[0].rest;
    EXPECT_EQ(util::parse_json(config[0].rest.substr(5)).text, config_markdown(expected[i].second));
  }
  EXPECT_EQ(steps_of(decoded[1].of("train/bpd")), std::vector<int64_t>{4});  // log_every 1000
}

TEST(TensorBoardRun, AFileCutMidRecordReadsUpToItsLastWholeRecord) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 2);
  c.train.log_every = 1;
  run_training(c, {});
  const std::string path = event_files(tensorboard_folder(c.train.out_dir)).at(0);
  const util::RecordScan whole = util::read_record_file(path);
  ASSERT_EQ(whole.records.size(), 13u);  // version, start, config, 2 x 5 scalars
  // Where each record ends, then a cut in the middle of the last one, of the config and of the
  // length field of a scalar.
  std::vector<size_t> ends;
  size_t at = 0;
  for (const auto& r : whole.records) ends.push_back(at += r.size() + 16);
  ASSERT_EQ(ends.back(), fs::file_size(path));
  for (const auto& [cut, records] : std::vector<std::pair<size_t, int64_t>>{
           {ends[12] - 3, 12}, {ends[1] + 40, 2}, {ends[5] + 5, 6}}) {
    const std::string copy = dir.file("cut-" + std::to_string(cut));
    fs::copy_file(path, copy);
    fs::resize_file(copy, cut);
    const auto decoded = decode_event_files({copy}, dir.path());
    EXPECT_EQ(decoded[0].records, records) << "cut at " << cut;
    EXPECT_EQ(decoded[0].truncated_tail, static_cast<int64_t>(cut - ends[records - 1]));
    EXPECT_EQ(util::read_record_file(copy).records.size(), static_cast<size_t>(records));
  }
}

TEST(TensorBoardRun, FalseWritesNoEvents) {
  TempDir dir;
  auto c = tiny_run(dir.file("run"), 1);
  c.train.tensorboard = false;
  run_training(c, {});
  EXPECT_TRUE(fs::exists(c.train.out_dir + "/metrics.jsonl"));
  EXPECT_FALSE(fs::exists(tensorboard_folder(c.train.out_dir)));
}

// Runs body in a forked child (one LibTorch thread) with spdlog's lines captured; returns them
// followed by what body returns, or "SKIP: ..." from prepare.
std::string logged_in_child(const std::function<std::string()>& prepare,
                            const std::function<std::string()>& body) {
  return combiner::testing::text_from_child(
      [&]() -> std::string {
        at::set_num_threads(1);
        const std::string skip = prepare();
        if (!skip.empty()) return skip;
        std::ostringstream log;
        spdlog::default_logger()->sinks().push_back(
            std::make_shared<spdlog::sinks::ostream_sink_st>(log));
        std::string result;
        try {
          result = body();
        } catch (const std::exception& e) {
          result = std::string("THREW ") + e.what();
        }
        return log.str() + "\n" + result;
      },
      300);
}

TEST(TensorBoardRun, AReadOnlyFolderWarnsOnceAndTrainingGoesOn) {
  TempDir dir;
  fs::permissions(dir.path(),
                  fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  auto c = tiny_run(dir.file("run"), 3);
  c.train.log_every = 1;
  const std::string tb = tensorboard_folder(c.train.out_dir);
  fs::create_directories(tb);
  fs::permissions(c.train.out_dir, fs::perms::all);
  fs::permissions(tb,
                  fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                      fs::perms::others_exec);
  const std::string out = logged_in_child(combiner::testing::unprivileged(tb), [&] {
    return "CHECKPOINT " + run_training(c, {}).final_checkpoint;
  });
  fs::permissions(tb, fs::perms::owner_all);
  if (out.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << out.substr(6);
  EXPECT_EQ(count_of(out, "TensorBoard:"), 1) << out;
  EXPECT_NE(out.find(tb), std::string::npos) << out;
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
  EXPECT_NE(out.find("training goes on"), std::string::npos) << out;
  EXPECT_NE(out.find("CHECKPOINT " + checkpoint_path(c.train.out_dir, 3)), std::string::npos)
      << out;
  EXPECT_EQ(load_checkpoint(checkpoint_path(c.train.out_dir, 3)).step, 3);
  EXPECT_TRUE(event_files(tb).empty());
}

TEST(TensorBoardLog, AFullDiskWarnsOnceThenDropsTheRecords) {
  TempDir dir;
  const std::string folder = dir.file("tb");
  fs::create_directories(folder);
  const std::string out =
      logged_in_child(combiner::testing::file_size_limit(8192), [&]() -> std::string {
        TensorBoardLog log(folder, 0, true);
        for (int step = 1; step <= 3; ++step) log.scalar("train/bpd", step, 1.0 / step);
        log.text("config", 0, std::string(20000, 'y'));  // past the limit: cut, then refused
        log.scalar("train/bpd", 4, 0.25);                // dropped without a second warning
        log.train(5, {});
        return std::string("WRITING ") + (log.writing() ? "yes" : "no");
      });
  if (out.rfind("SKIP: ", 0) == 0) GTEST_SKIP() << out.substr(6);
  EXPECT_EQ(count_of(out, "TensorBoard:"), 1) << out;
  EXPECT_NE(out.find("File too large"), std::string::npos) << out;
  EXPECT_NE(out.find("no more events are written"), std::string::npos) << out;
  EXPECT_NE(out.find("WRITING no"), std::string::npos) << out;
  const auto files = event_files(folder);
  ASSERT_EQ(files.size(), 1u);
  const auto decoded = decode_event_files(files, dir.path());
  EXPECT_EQ(decoded[0].records, 5);  // version, start, 3 scalars
  EXPECT_GT(decoded[0].truncated_tail, 0);
  EXPECT_EQ(steps_of(decoded[0].of("train/bpd")), (std::vector<int64_t>{1, 2, 3}));
}

}  // namespace
}  // namespace combiner::train
