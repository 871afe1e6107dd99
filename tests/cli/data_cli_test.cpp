// combiner-data end to end, and the trainer and evaluator on packed files: packed and published
// Fashion-MNIST give the same training curve and the same bits/dim to the last digit; a corrupt
// packed file stops training before a step; --config finds the presets in configs/.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cli/run_binary.h"
#include "test_utils.h"

namespace combiner {
namespace {

namespace fs = std::filesystem;
using combiner::testing::run_binary;
using combiner::testing::run_shell;
using combiner::testing::TempDir;

std::string tiny_config(const TempDir& dir, const std::string& data_dir, const std::string& run) {
  const std::string path = dir.file(run + ".yaml");
  std::ofstream(path) << "data: {dataset: fashion_mnist, val_size: 8" +
                             (data_dir.empty() ? "" : ", dir: " + data_dir) +
                             "}\n"
                             "model: {layers: 1, width: 16, heads: 2, mlp_ratio: 2,\n"
                             "        attention: {type: combiner-axial-rowmajor}}\n"
                             "train: {steps: 3, batch_size: 2, warmup_steps: 1, threads: 1,\n"
                             "        eval_every: 3, final_test: false, out_dir: " +
                             dir.file(run) + "}\n";
  return path;
}

// metrics.jsonl without the tokens/s field, which is a timing.
std::string metrics_without_timing(const std::string& path) {
  std::ifstream in(path);
  std::string line, out;
  while (std::getline(in, line)) out += line.substr(0, line.find(", \"tokens_per_s\"")) + "\n";
  return out;
}

class DataCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const auto r = run_binary("combiner-data", "pack --dataset fashion_mnist --out " + packed());
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.output.find("packed: " + packed() + "/train.pack"), std::string::npos) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string packed() { return dir_->file("packed"); }
  static TempDir* dir_;
};
TempDir* DataCli::dir_ = nullptr;

TEST_F(DataCli, InfoPrintsTheHeaderAndVerifiesTheChecksum) {
  const auto r = run_binary("combiner-data", "info " + packed() + "/test.pack");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("dataset: fashion_mnist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("images: 10000 of 28x28x1 (L = 784)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("payload: 7840000 bytes"), std::string::npos) << r.output;
  EXPECT_EQ(r.last_line().rfind("checksum: CRC-32 ", 0), 0u) << r.output;
  EXPECT_NE(r.last_line().find("verified"), std::string::npos) << r.output;

  // One flipped payload byte: the header still prints, then one error line and status 1.
  TempDir dir;
  const std::string bad = dir.file("bad.pack");
  fs::copy_file(packed() + "/test.pack", bad);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 12345);
    f.put('\x7f');
  }
  const auto corrupt = run_binary("combiner-data", "info " + bad);
  EXPECT_EQ(corrupt.status, 1) << corrupt.output;
  EXPECT_NE(corrupt.output.find("images: 10000"), std::string::npos) << corrupt.output;
  EXPECT_EQ(corrupt.last_line(),
            "combiner-data: error: " + bad + ": payload checksum mismatch (CRC-32 " +
                corrupt.last_line().substr(corrupt.last_line().find("CRC-32 ") + 7, 8) +
                ", the header says " +
                r.last_line().substr(std::string("checksum: CRC-32 ").size(), 8) +
                "): the images are corrupt; pack the dataset again")
      << corrupt.output;
}

TEST_F(DataCli, ShowWritesOneImageAndRefusesIndicesOutOfRange) {
  TempDir dir;
  const auto r = run_binary(
      "combiner-data", "show " + packed() + "/train.pack --index 7 --out " + dir.file("x.png"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_GT(fs::file_size(dir.file("x.png")), 100u);
  const auto out_of_range = run_binary(
      "combiner-data", "show " + packed() + "/test.pack --index 10000 --out " + dir.file("y.png"));
  EXPECT_EQ(out_of_range.status, 1);
  EXPECT_EQ(out_of_range.last_line(),
            "combiner-data: error: --index 10000: " + packed() +
                "/test.pack holds 10000 images (0..9999)");
  EXPECT_FALSE(fs::exists(dir.file("y.png")));
  const auto not_packed = run_binary(
      "combiner-data", "info /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz");
  EXPECT_EQ(not_packed.status, 1);
  EXPECT_NE(not_packed.last_line().find("not a packed dataset file"), std::string::npos)
      << not_packed.output;
}

TEST_F(DataCli, PackRefusesToReplaceFilesWithoutForce) {
  const auto before = fs::last_write_time(packed() + "/train.pack");
  const auto r = run_binary("combiner-data", "pack --dataset fashion_mnist --out " + packed());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.last_line(),
            "combiner-data: error: pack: '" + packed() +
                "' already holds packed files; pass --force to replace them");
  EXPECT_EQ(fs::last_write_time(packed() + "/train.pack"), before);
}

// The same config on the published idx files and on the packed files: the same images in the
// same order, so the same curve; and evaluation prints the same bits/dim to the last digit.
TEST_F(DataCli, PackedAndPublishedDataTrainAndEvaluateAlike) {
  TempDir dir;
  const auto published = run_binary("combiner-train", "--config " + tiny_config(dir, "", "pub"));
  ASSERT_EQ(published.status, 0) << published.output;
  const auto mapped = run_binary("combiner-train", "--config " + tiny_config(dir, packed(), "pk"));
  ASSERT_EQ(mapped.status, 0) << mapped.output;
  EXPECT_NE(mapped.output.find("data: mapped " + packed() + "/train.pack"), std::string::npos)
      << mapped.output;
  const std::string curve = metrics_without_timing(dir.file("pub/metrics.jsonl"));
  EXPECT_NE(curve.find("val_bpd"), std::string::npos) << curve;
  EXPECT_EQ(metrics_without_timing(dir.file("pk/metrics.jsonl")), curve);

  const std::string checkpoint = published.last_line().substr(std::string("checkpoint: ").size());
  const auto on_published =
      run_binary("combiner-eval", "--checkpoint " + checkpoint + " --split val");
  const auto on_packed = run_binary(
      "combiner-eval", "--checkpoint " + checkpoint + " --split val --set data.dir=" + packed());
  ASSERT_EQ(on_published.status, 0) << on_published.output;
  ASSERT_EQ(on_packed.status, 0) << on_packed.output;
  EXPECT_EQ(on_packed.last_line().rfind("val_bpd: ", 0), 0u) << on_packed.output;
  EXPECT_EQ(on_packed.last_line(), on_published.last_line());
}

TEST_F(DataCli, TrainingRefusesCorruptPackedFilesBeforeAnyStep) {
  TempDir dir;
  fs::create_directories(dir.file("data"));
  fs::copy_file(packed() + "/train.pack", dir.file("data/train.pack"));
  fs::copy_file(packed() + "/test.pack", dir.file("data/test.pack"));
  {
    std::fstream f(dir.file("data/train.pack"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 1000);
    f.put('\x01');
  }
  const auto r =
      run_binary("combiner-train", "--config " + tiny_config(dir, dir.file("data"), "run"));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.last_line().find(dir.file("data/train.pack") + ": payload checksum mismatch"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoints")) &&
               !fs::is_empty(dir.file("run/checkpoints")));
  // The test file too, when the run ends with a test: checked at the start, not after training.
  fs::copy_file(
      packed() + "/train.pack", dir.file("data/train.pack"), fs::copy_options::overwrite_existing);
  {
    std::fstream f(dir.file("data/test.pack"), std::ios::in | std::ios::out | std::ios::binary);
    f.put('X');  // the magic
  }
  const auto test = run_binary(
      "combiner-train",
      "--config " + tiny_config(dir, dir.file("data"), "run2") + " --set train.final_test=true");
  EXPECT_EQ(test.status, 1) << test.output;
  EXPECT_NE(test.last_line().find(dir.file("data/test.pack") + ": not a packed dataset file"),
            std::string::npos)
      << test.output;
  EXPECT_EQ(test.output.find("step "), std::string::npos) << test.output;
}

// scripts/make_synthetic_packed.py writes the format from its documented layout with Python's
// struct and zlib: the C++ reader must accept it and agree on every field.
TEST(DataFormat, AFileWrittenByThePythonWriterReadsBack) {
  TempDir dir;
  const auto made = run_shell(std::string("/usr/bin/python3 ") + COMBINER_SOURCE_DIR +
                              "/scripts/make_synthetic_packed.py --dataset cifar10 --count 3 "
                              "--out " +
                              dir.file("x.pack"));
  ASSERT_EQ(made.status, 0) << made.output;
  const auto r = run_binary("combiner-data", "info " + dir.file("x.pack"));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("images: 3 of 32x32x3 (L = 3072)"), std::string::npos) << r.output;
  EXPECT_NE(made.output.find(r.last_line().substr(std::string("checksum: ").size(), 15)),
            std::string::npos)
      << made.output << r.output;
}

TEST(ConfigLookup, PresetsAreFoundByNameFromTheProjectFolder) {
  // From the project folder the preset resolves, and the run gets as far as the data.
  TempDir dir;
  const auto found =
      run_shell(std::string("cd ") + COMBINER_SOURCE_DIR + " && " + COMBINER_BINARY_DIR +
                "/combiner-train --config cifar_axial.yaml --set data.dir=/nowhere "
                "--set train.out_dir=" +
                dir.file("run"));
  EXPECT_EQ(found.status, 1) << found.output;
  EXPECT_EQ(found.last_line(),
            "combiner-train: error: data: folder '/nowhere' for dataset cifar10 does not exist; "
            "see data/README.md for the expected files");
  const auto missing = run_shell("cd " + dir.path() + " && " + COMBINER_BINARY_DIR +
                                 "/combiner-train --config cifar_axial.yaml");
  EXPECT_EQ(missing.status, 1);
  EXPECT_EQ(missing.last_line(),
            "combiner-train: error: cifar_axial.yaml: cannot read config file (no such file "
            "here, nor configs/cifar_axial.yaml)");
}

}  // namespace
}  // namespace combiner
