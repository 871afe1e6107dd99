// scripts/peer_gpu.py, the plain-PyTorch peer of the GPU comparison, on the CPU with Debian's
// torch (/usr/bin/python3): two steps at a tiny shape write a well-formed row with a finite loss,
// and its model has exactly combiner's parameter count for the same configuration (a check on
// the architecture: widths, MLP ratio, embeddings, head). scripts/perf_csv.py turns our own
// combiner-bench row into a row of the same table.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_binary.h"
#include "test_utils.h"

namespace combiner {
namespace {

using combiner::testing::read_lines;
using combiner::testing::run_binary;
using combiner::testing::run_shell;
using combiner::testing::TempDir;

const std::string kSource = COMBINER_SOURCE_DIR;
const std::string kColumns =
    "gpu,shape,L,batch,system,attention,precision,ms_per_step,tokens_per_s,peak_mib,status";

std::vector<std::string> split(const std::string& row) {
  std::vector<std::string> cells;
  std::stringstream in(row);
  for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
  if (!row.empty() && row.back() == ',') cells.emplace_back();
  return cells;
}

// The number just before `suffix` in `text` (e.g. "11632 parameters").
double number_before(const std::string& text, const std::string& suffix) {
  const auto end = text.find(suffix);
  if (end == std::string::npos || end == 0) return NAN;
  auto start = text.rfind(' ', end - 2);
  start = start == std::string::npos ? 0 : start + 1;
  return std::stod(text.substr(start, end - start));
}

TEST(PeerScript, TinyRunWritesARowAndHasOurParameterCount) {
  TempDir dir;
  const std::string peer_csv = dir.file("peer.csv"), ours_csv = dir.file("ours.csv");
  // MLP ratio 3 and 2 layers, so a wrong ratio or a missing block shows in the count.
  const auto peer = run_shell("/usr/bin/python3 " + kSource +
                              "/scripts/peer_gpu.py --layers 2 --width 16 --heads 2 --mlp 3 "
                              "--length 784 --batch 2 --steps 2 --warmup 0 --threads 1 "
                              "--device cpu --csv " +
                              peer_csv);
  ASSERT_EQ(peer.status, 0) << peer.output;
  const auto lines = read_lines(peer_csv);
  ASSERT_EQ(lines.size(), 2u) << peer.output;
  EXPECT_EQ(lines[0], kColumns);
  const auto cells = split(lines[1]);
  ASSERT_EQ(cells.size(), 11u) << lines[1];
  const std::vector<std::string> fixed = {
      "cpu", "fashion_mnist-2x16", "784", "2", "peer-eager", "explicit-softmax", "float32"};
  for (size_t i = 0; i < fixed.size(); ++i) EXPECT_EQ(cells[i], fixed[i]) << lines[1];
  for (size_t i = 7; i < 10; ++i) EXPECT_GT(std::stod(cells[i]), 0.0) << lines[1];
  EXPECT_EQ(cells[10], "ok");
  // A fresh model's loss is about log2(256) = 8 bits: finite and near it.
  const double loss = number_before(peer.output, " bits/dim");
  EXPECT_TRUE(std::isfinite(loss)) << peer.output;
  EXPECT_NEAR(loss, 8.0, 0.5) << peer.output;

  const auto ours = run_binary(
      "combiner-bench",
      "train --config " + kSource +
          "/configs/fashion_mnist.yaml --steps 1 --warmup 0 --threads 1 --matmul-size 64"
          " --set model.layers=2 --set model.width=16 --set model.heads=2"
          " --set model.mlp_ratio=3 --set train.batch_size=2 --set train.grad_accum=1 --out " +
          ours_csv);
  ASSERT_EQ(ours.status, 0) << ours.output;
  const auto our_lines = read_lines(ours_csv);
  ASSERT_EQ(our_lines.size(), 2u);
  const auto our_cells = split(our_lines[1]);
  ASSERT_GT(our_cells.size(), 7u);
  EXPECT_EQ(our_cells[7], std::to_string(int64_t(number_before(peer.output, " parameters"))))
      << "parameters: ours " << our_lines[1] << "\npeer " << peer.output;

  const auto row =
      run_shell("/usr/bin/python3 " + kSource + "/scripts/perf_csv.py ours --gpu cpu " + ours_csv);
  ASSERT_EQ(row.status, 0) << row.output;
  const auto converted = split(row.output.substr(0, row.output.find('\n')));
  ASSERT_EQ(converted.size(), 11u) << row.output;
  EXPECT_EQ(
      row.output.rfind("cpu,fashion_mnist-2x16,784,2,ours,combiner-axial-rowmajor,float32,", 0), 0u)
      << row.output;
  EXPECT_EQ(converted[10], "ok");
}

}  // namespace
}  // namespace combiner
