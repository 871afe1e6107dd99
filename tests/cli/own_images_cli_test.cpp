// Your own images end to end: a folder of PNG and JPEG files of different sizes (one grayscale,
// one broken) packed by `combiner-data pack --from --size`, trained on as data.dataset: images,
// evaluated and sampled from its checkpoint; pack's one-line refusals; how a pack was made, in
// its last line and `info`; and scripts/check-pack-exact.py.
#include <gtest/gtest.h>
#include <stb/stb_image_write.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "cli/run_binary.h"
#include "test_utils.h"

namespace combiner {
namespace {

using combiner::testing::run_binary;
using combiner::testing::TempDir;

void write_folder(const std::string& dir) {
  std::filesystem::create_directories(dir + "/b");
  for (int i = 0; i < 12; ++i) {
    const int w = 9 + 5 * i, h = 7 + 3 * (i % 4), c = i == 5 ? 1 : 3;
    std::vector<uint8_t> p(static_cast<size_t>(w * h * c));
    for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<uint8_t>((k * 7 + i * 19) % 256);
    const std::string name = dir + (i % 3 ? "/" : "/b/") + std::to_string(i);
    if (i % 2)
      ASSERT_TRUE(stbi_write_png((name + ".png").c_str(), w, h, c, p.data(), w * c));
    else
      ASSERT_TRUE(stbi_write_jpg((name + ".jpeg").c_str(), w, h, c, p.data(), 90));
  }
  std::ofstream(dir + "/broken.jpg") << "not a jpeg";
}

// dir/NAME.yaml: a 1 x 16 model of `attention` on the images packed in dir/packed, `steps`
// updates of 2 images with an evaluation at the end, its run folder dir/run; returns the path.
std::string images_config(const TempDir& dir,
                          const std::string& name,
                          const std::string& attention,
                          int steps) {
  const std::string path = dir.file(name + ".yaml");
  std::ofstream(path) << "data: {dataset: images, dir: " + dir.file("packed") +
                             ", val_size: 2}\n"
                             "model: {layers: 1, width: 16, heads: 2, mlp_ratio: 2,\n"
                             "        attention: {type: " +
                             attention +
                             "}}\n"
                             "train: {steps: " +
                             std::to_string(steps) +
                             ", batch_size: 2, warmup_steps: 1, threads: 1,\n"
                             "        eval_every: " +
                             std::to_string(steps) + ", out_dir: " + dir.file("run") + "}\n";
  return path;
}

TEST(OwnImages, PackTrainEvaluateAndSampleAFolderOfMixedFiles) {
  TempDir dir;
  write_folder(dir.file("photos"));
  const auto pack = run_binary("combiner-data",
                               "pack --from " + dir.file("photos") + " --size 12x10 --out " +
                                   dir.file("packed") + " --test-fraction 0.25 --seed 3");
  ASSERT_EQ(pack.status, 0) << pack.output;
  long long packed_train = 0, packed_test = 0;
  int skipped = 0;
  ASSERT_EQ(std::sscanf(pack.last_line().c_str(),
                        "images: %lld train, %lld test, %d skipped",
                        &packed_train,
                        &packed_test,
                        &skipped),
            3)
      << pack.output;
  EXPECT_EQ(packed_train + packed_test, 12);  // 13 files, round(0.25 x 13) = 3 of them test
  EXPECT_GE(packed_test, 2);
  EXPECT_EQ(skipped, 1);
  EXPECT_NE(pack.output.find("broken.jpg"), std::string::npos) << pack.output;

  const std::string config = images_config(dir, "own", "combiner-axial-rowmajor", 3);
  const auto train = run_binary("combiner-train", "--config " + config);
  ASSERT_EQ(train.status, 0) << train.output;
  EXPECT_NE(train.output.find("L = 360"), std::string::npos) << train.output;  // 12 x 10 x 3
  EXPECT_NE(train.output.find("test_bpd: "), std::string::npos) << train.output;
  std::ifstream resolved(dir.file("run/config.yaml"));
  const std::string yaml((std::istreambuf_iterator<char>(resolved)), {});
  for (const char* key : {"height: 12", "width: 10", "channels: 3"})
    EXPECT_NE(yaml.find(key), std::string::npos) << yaml;

  // The checkpoint carries the shape: eval and sample need no data to build the model.
  const std::string checkpoint = train.last_line().substr(std::string("checkpoint: ").size());
  const auto eval = run_binary("combiner-eval", "--checkpoint " + checkpoint + " --split test");
  ASSERT_EQ(eval.status, 0) << eval.output;
  EXPECT_EQ(eval.last_line().rfind("test_bpd: ", 0), 0u) << eval.output;
  const auto sample = run_binary(
      "combiner-sample", "--checkpoint " + checkpoint + " --num 2 --out " + dir.file("g.png"));
  ASSERT_EQ(sample.status, 0) << sample.output;
  EXPECT_TRUE(std::filesystem::exists(dir.file("g.png")));
}

// --bits 5 (the 5-bit CelebA-HQ definition): the model predicts 32 values, and every bits/dim
// it logs says it is of 5-bit data.
TEST(OwnImages, FiveBitPackTrainsEvaluatesAndSamples) {
  TempDir dir;
  write_folder(dir.file("photos"));
  const auto pack = run_binary(
      "combiner-data",
      "pack --from " + dir.file("photos") + " --size 6 --bits 5 --out " + dir.file("packed"));
  ASSERT_EQ(pack.status, 0) << pack.output;
  const auto info = run_binary("combiner-data", "info " + dir.file("packed/train.pack"));
  EXPECT_NE(info.output.find("subpixels: 5 bits"), std::string::npos) << info.output;
  const std::string config = images_config(dir, "five", "combiner-fixed", 2);
  const auto train = run_binary("combiner-train", "--config " + config);
  ASSERT_EQ(train.status, 0) << train.output;
  for (const char* says : {" (5-bit data) | lr", " (5-bit data) (2 images)", " (5-bit data) over"})
    EXPECT_NE(train.output.find(says), std::string::npos) << says << "\n" << train.output;
  const std::string checkpoint = train.last_line().substr(std::string("checkpoint: ").size());
  const auto eval = run_binary("combiner-eval", "--checkpoint " + checkpoint + " --split test");
  ASSERT_EQ(eval.status, 0) << eval.output;
  EXPECT_NE(eval.output.find("bits/dim of 5-bit data"), std::string::npos) << eval.output;
  const auto sample = run_binary("combiner-sample",
                                 "--checkpoint " + checkpoint + " --num 2 --out " +
                                     dir.file("g.png") + " --npy " + dir.file("g.npy"));
  ASSERT_EQ(sample.status, 0) << sample.output;
}

TEST(OwnImages, PackRefusesBadArgumentsInOneLine) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("empty"));
  const std::string out = " --out " + dir.file("out");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--from " + dir.file("empty") + " --size 0", "height and width must be 1 to 1024"},
      {"--from " + dir.file("empty") + " --size 2000x8", "height and width must be 1 to 1024"},
      {"--from " + dir.file("empty") + " --size 12x", "--size: expected H or HxW"},
      {"--from " + dir.file("empty") + " --size 8 --channels 4", "--channels 4"},
      {"--from " + dir.file("empty") + " --size 8", "no train images"},
      {"--dataset cifar10 --from " + dir.file("empty") + " --size 8", "--dataset cifar10"},
      {"--size 8", "--size needs --from"},
      {"--from " + dir.file("empty"), "or --size H[xW] with --from FOLDER"},
      {"--from " + dir.file("empty") + " --size 8 --bits 0", "--bits 0: expected 1 to 8"},
      {"--from " + dir.file("empty") + " --size 8 --filter lanczos",
       "--filter 'lanczos': expected box, triangle, mitchell or catmull-rom"},
      {"--from " + dir.file("empty") + " --size 8 --upsample-filter cubic",
       "--upsample-filter 'cubic': expected box"},
      {"--dataset fashion_mnist --filter box", "--filter and --upsample-filter resize your own"},
  };
  for (const auto& [args, message] : cases) {
    const auto r = run_binary("combiner-data", "pack " + args + out);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("out/train.pack"))) << args;
    if (args.find("filter") != std::string::npos) {  // refused before anything is logged
      EXPECT_EQ(r.output, r.last_line() + "\n") << args;
    }
  }
}

// 3 images of the packed size, 2 larger and 1 smaller: the last line and `info` say how many
// were copied, shrunk and enlarged, with which filters; a pack without the flags says Mitchell.
TEST(OwnImages, PackSaysHowItWasMadeAndInfoReadsItBack) {
  TempDir dir;
  for (const char* split : {"train", "test"})
    std::filesystem::create_directories(dir.file(std::string("photos/") + split));
  int n = 0;
  for (const int side : {6, 6, 6, 12, 12, 3}) {
    std::vector<uint8_t> p(static_cast<size_t>(side * side * 3), static_cast<uint8_t>(40 * n));
    const std::string name = dir.file("photos/train/" + std::to_string(n++) + ".png");
    ASSERT_TRUE(stbi_write_png(name.c_str(), side, side, 3, p.data(), side * 3));
  }
  std::vector<uint8_t> p(9 * 6 * 3, 99);  // 9 wide: cropped to its centre 6 x 6, then copied
  const std::string cropped = dir.file("photos/test/c.png");
  ASSERT_TRUE(stbi_write_png(cropped.c_str(), 9, 6, 3, p.data(), 9 * 3));
  const std::string from = " --from " + dir.file("photos") + " --size 6 --out ";
  const auto box =
      run_binary("combiner-data",
                 "pack" + from + dir.file("box") + " --filter box --upsample-filter triangle");
  ASSERT_EQ(box.status, 0) << box.output;
  EXPECT_EQ(box.last_line(),
            "images: 6 train, 1 test, 0 skipped | 4 copied unfiltered, 2 shrunk (box), "
            "1 enlarged (triangle), 1 cropped")
      << box.output;
  const auto info = run_binary("combiner-data", "info " + dir.file("box/train.pack"));
  ASSERT_EQ(info.status, 0) << info.output;
  EXPECT_NE(info.output.find("version 2"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("made from a folder: 3 copied unfiltered, 2 shrunk (box), "
                             "1 enlarged (triangle), 0 cropped; 0 files skipped"),
            std::string::npos)
      << info.output;
  const auto plain = run_binary("combiner-data", "pack" + from + dir.file("plain"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_NE(plain.last_line().find("2 shrunk (mitchell), 1 enlarged (catmull-rom)"),
            std::string::npos)
      << plain.output;
}

// scripts/check-pack-exact.py, the check data/README.md quotes, on 40 images (2 x 2 blocks packed
// with --filter box): it writes its own PNG files, packs them with this build, finds no change.
TEST(OwnImages, CheckPackExactScriptFindsNothingChanged) {
  for (const char* kind : {"box2"}) {
    const auto r =
        combiner::testing::run_shell(std::string("/usr/bin/python3 ") + COMBINER_SOURCE_DIR +
                                     "/scripts/check-pack-exact.py --count 40 --kind " + kind +
                                     " --binary " + COMBINER_BINARY_DIR + "/combiner-data");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_NE(r.last_line().find(std::string(kind) +
                                 ": 40 packed of 40 sources, the same images: "
                                 "yes; 0 differ from their nearest source, 0 subpixels changed"),
              std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace combiner
