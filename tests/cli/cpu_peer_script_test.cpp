// scripts/bench-cpu-peer.sh, the CPU comparison with the venv's torch 2.11 as the peer, at its toy
// size (plumbing only, no numbers worth reading): it checks that ours and the peer have the same
// parameter count, then writes one row per system in scripts/perf_csv.py's peer table, with the
// peer on F.scaled_dot_product_attention; it refuses a python without SDPA and --toy without an
// --out of its own. torch.compile is left out here (its first step takes minutes on this CPU).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_binary.h"
#include "test_utils.h"
#include "venv_python.h"

namespace combiner {
namespace {

using combiner::testing::csv_cells;
using combiner::testing::run_shell;
using combiner::testing::TempDir;

std::string script(const std::string& args) {
  return std::string(COMBINER_SOURCE_DIR) + "/scripts/bench-cpu-peer.sh --build " +
         COMBINER_BINARY_DIR + " " + args;
}

TEST(VenvCpuPeerScript, ToyRunChecksTheParameterCountsAndWritesARowPerSystem) {
  if (combiner::testing::venv_python().empty()) GTEST_SKIP() << combiner::testing::kVenvMissing;
  TempDir dir;
  const std::string out = dir.file("cpu-vs-peer.csv");
  const auto run = run_shell(script("--toy --no-compile --threads 1 --python " +
                                    combiner::testing::venv_python() + " --out " + out));
  ASSERT_EQ(run.status, 0) << run.output;
  // "parameters: ours N, peer N", equal or the script stops before timing.
  const auto at = run.output.find("parameters: ours ");
  ASSERT_NE(at, std::string::npos) << run.output;
  std::istringstream counts(run.output.substr(at + 17));
  std::string ours, label, peer;
  counts >> ours >> label >> peer;
  EXPECT_EQ(ours, peer + ",") << run.output.substr(at, 60);

  const auto rows = combiner::testing::csv_rows(out);
  ASSERT_EQ(rows.size(), 4u) << run.output;
  EXPECT_EQ(rows[0],
            csv_cells("gpu,shape,L,batch,system,attention,precision,ms_per_step,tokens_per_s,"
                      "peak_mib,status"));
  const std::vector<std::pair<std::string, std::string>> systems = {
      {"ours", "combiner-axial-rowmajor"}, {"ours", "full"}, {"peer-eager", "sdpa-causal"}};
  for (size_t i = 0; i < systems.size(); ++i) {
    const auto& r = rows[i + 1];
    ASSERT_EQ(r.size(), 11u);
    EXPECT_EQ(
        std::vector<std::string>(r.begin(), r.begin() + 7),
        (std::vector<std::string>{
            "cpu", "cifar10-1x16", "3072", "2", systems[i].first, systems[i].second, "float32"}));
    for (size_t c = 7; c < 10; ++c) EXPECT_GT(std::stod(r[c]), 0.0) << c;
    EXPECT_EQ(r[10], "ok");
  }
}

TEST(CpuPeerScript, RefusesAPythonWithoutSdpaOrNotThere) {
  TempDir dir;
  // Debian's python3 has torch 1.13: no F.scaled_dot_product_attention.
  const auto old = run_shell(script("--toy --python /usr/bin/python3 --out " + dir.file("x.csv")));
  EXPECT_EQ(old.status, 1);
  EXPECT_EQ(old.output,
            "bench-cpu-peer: --python: '/usr/bin/python3' has no torch with "
            "F.scaled_dot_product_attention (torch >= 2 expected)\n");
  const auto missing = run_shell(script("--python " + dir.file("none")));
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.output.find("'" + dir.file("none") + "' is not an executable"),
            std::string::npos)
      << missing.output;
}

TEST(CpuPeerScript, RefusesAToyRunIntoDocs) {
  // The refusal comes before the peer runs, so no torch is needed: a stand-in interpreter that
  // answers the script's SDPA probe with success lets it run without the venv.
  TempDir dir;
  const std::string python = dir.file("python");
  std::ofstream(python) << "#!/bin/sh\nexit 0\n";
  std::filesystem::permissions(python, std::filesystem::perms::owner_all);
  const auto toy = run_shell(script("--toy --python " + python));
  EXPECT_EQ(toy.status, 1);
  EXPECT_EQ(toy.output,
            "bench-cpu-peer: --toy: pass --out FILE (toy numbers never go to docs/perf)\n");
}

}  // namespace
}  // namespace combiner
