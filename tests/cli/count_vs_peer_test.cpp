// scripts/count_vs_peer.py at its toy size: ours and the plain-PyTorch peer counted per block
// (launches by one rule, the bytes kept for backward two ways). With `full` our block is the
// peer's op for op but for its two LayerNorms (ours: one fused kernel forward and two backward,
// its output already bf16; the peer's: LayerNorm and a bf16 cast each way), the two residual
// adds (ours: each in the passes of the LayerNorm after it; the peer's: the add, and backward
// the gradients' sum and the cast to the branch's bf16), the gradient of the q, k, v
// projection (ours: one stack into its layout; the peer's: a stack and a copy) and the four
// linears' bias gradients (ours: two kernels each, the MLP's GELU backward in them; the peer's:
// a column sum and its cast each, and the GELU backward) and their weights in bf16 (ours: read
// from the copies the model writes once a forward, the weight gradients float32 from their
// GEMMs; the peer's: each weight and bias cast forward, each weight gradient cast back), so the
// two must agree exactly on that: a glue op added to the block (three selects for q, k, v, say,
// or a bias added apart from its matmul) or bytes kept that the peer does not keep fail it. The
// bytes kept differ by the block's bf16 weights alone, which the peer's autocast makes and keeps
// each forward and ours keeps between steps. It needs this build to be pip's torch (SDPA on the
// CPU) and the venv's python.
#include <gtest/gtest.h>

#include <torch/version.h>

#include <string>

#include "cli/run_binary.h"
#include "test_utils.h"
#include "venv_python.h"

namespace combiner {
namespace {

TEST(VenvCountVsPeer, ToyRunOurFullBlockIsThePeers) {
  if (combiner::testing::venv_python().empty()) GTEST_SKIP() << combiner::testing::kVenvMissing;
  if (TORCH_VERSION_MAJOR < 2)
    GTEST_SKIP() << "this build's LibTorch " << TORCH_VERSION << " has no SDPA: `full` would not "
                 << "run the peer's kernel (the build of scripts/build-cuda.sh does)";
  combiner::testing::TempDir dir;
  const std::string out = dir.file("count.csv");
  const auto run =
      combiner::testing::run_shell(combiner::testing::venv_python() + " " + COMBINER_SOURCE_DIR +
                                   "/scripts/count_vs_peer.py --toy --threads 1 --bench " +
                                   COMBINER_BINARY_DIR + "/combiner-bench --out " + out);
  ASSERT_EQ(run.status, 0) << run.output;
  const auto rows = combiner::testing::csv_rows(out);
  ASSERT_EQ(rows.size(), 7u) << run.output;
  EXPECT_EQ(
      rows[0],
      combiner::testing::csv_cells(
          "shape,system,attention,block_launches,fused_kernels,rest_launches,block_kept_mib"));
  // Per shape: the peer, ours with full, ours with the shape's Combiner. At --toy every shape is
  // 32 wide; the MLP ratio is 4 at CIFAR-10 6 x 512 and 2 at 128 x 256.
  const int64_t mlp_ratio[2] = {4, 2};
  for (size_t shape = 0; shape < 2; ++shape) {
    const auto& peer = rows[1 + 3 * shape];
    const auto& full = rows[2 + 3 * shape];
    const auto& combiner = rows[3 + 3 * shape];
    SCOPED_TRACE(peer[0]);
    ASSERT_EQ(peer.size(), 7u);
    EXPECT_EQ(peer[1], "peer-eager");
    EXPECT_EQ(full[2], "full");
    // Two LayerNorms: the peer's 2 ops + 2 casts each, ours 3 fused kernels each; the two
    // residual adds: the peer's 3 ops each, ours none; the projection's gradient: the peer's 2
    // ops, ours 1; the bias gradients: the peer's 9 ops, ours 8 kernels; the weights' and biases'
    // casts: the peer's 8 forward and 4 backward, ours none.
    EXPECT_EQ(std::stoi(full[3]), std::stoi(peer[3]) - 22)
        << "launches per block, ours with full against the peer's";
    // The block's weights, (3 + 1 + 2 r) W^2 in bf16; the CSV rounds each figure to 0.01 MiB.
    const double weights_mib = double((4 + 2 * mlp_ratio[shape]) * 32 * 32 * 2) / (1 << 20);
    EXPECT_NEAR(std::stod(peer[6]) - std::stod(full[6]), weights_mib, 0.01)
        << "MiB kept per block, ours with full against the peer's";
    EXPECT_GT(std::stod(peer[6]), 0.0);
    EXPECT_GT(std::stoi(combiner[4]), 0) << "the Combiner's fused kernels count";
    EXPECT_EQ(full[4], "14") << "the fused LayerNorms' kernels and the bias gradients'";
  }
}

}  // namespace
}  // namespace combiner
