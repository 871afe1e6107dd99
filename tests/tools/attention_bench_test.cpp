// The attention benchmark's plumbing (no timing assertions): cases and results survive the trip
// through text, a case runs in-process, and a child that hangs, dies or answers is recorded.
#include <gtest/gtest.h>

#include "attention/attention.h"
#include "tools/attention_bench.h"

namespace combiner::attention {
namespace {

TEST(Bench, CaseAndResultRoundTripThroughText) {
  BenchCase c;
  c.variant = "combiner-axial-vertical";
  c.length = 192;
  c.block = 12;
  c.row_len = 16;
  c.backward = true;
  c.repeats = 7;
  c.threads = 1;
  c.device = "cuda:1";
  EXPECT_EQ(encode_case(decode_case(encode_case(c))), encode_case(c));
  EXPECT_EQ(decode_case(encode_case(c)).device, "cuda:1");
  EXPECT_EQ(decode_case(encode_case(c)).backward, true);
  c.count = true;
  EXPECT_EQ(decode_case(encode_case(c)).count, true);
  c.bandwidth_gbps = 4800;
  EXPECT_DOUBLE_EQ(decode_case(encode_case(c)).bandwidth_gbps, 4800);
  BenchResult r{12.5, 3.25, "ok", "", 41, 7.5, 96.25};
  const auto back = decode_result(encode_result(r));
  EXPECT_DOUBLE_EQ(back.ms, 12.5);
  EXPECT_DOUBLE_EQ(back.peak_mib, 3.25);
  EXPECT_EQ(back.launches, 41);
  EXPECT_DOUBLE_EQ(back.allocated_mib, 7.5);
  EXPECT_DOUBLE_EQ(back.kernel_mib, 96.25);
  EXPECT_EQ(back.status, "ok");
  EXPECT_EQ(decode_result("garbage").status, "error");
  EXPECT_THROW(decode_case("variant=full"), std::invalid_argument);
}

TEST(Bench, EveryVariantMatchesTheReferenceBeforeTiming) {
  for (const auto& variant : variant_names()) EXPECT_LT(reference_error(variant), 1e-5) << variant;
}

TEST(Bench, TimesASmallCaseInProcess) {
  BenchCase c;
  c.variant = "combiner-fixed";
  c.length = 64;
  c.block = 8;
  c.heads = 2;
  c.dim = 4;
  c.backward = true;
  c.repeats = 2;
  c.threads = 1;
  const auto r = time_case(c);
  EXPECT_EQ(r.status, "ok") << r.detail;
  EXPECT_GT(r.ms, 0.0);
  EXPECT_GE(r.peak_mib, 0.0);
  c.variant = "axial";
  c.row_len = 7;  // does not divide 64
  EXPECT_EQ(time_case(c).status, "invalid");
}

TEST(Bench, ChildOutcomesBecomeStatuses) {
  const auto sh = [](const std::string& script) {
    return std::vector<std::string>{"/bin/sh", "-c", script};
  };
  auto r = run_child(sh("echo noise; echo 'bench-result 1.5 2.0 -1 -1 -1 ok '"), 30);
  EXPECT_EQ(r.status, "ok");
  EXPECT_DOUBLE_EQ(r.ms, 1.5);
  EXPECT_EQ(run_child(sh("sleep 20"), 0.3).status, "timeout");
  EXPECT_EQ(run_child(sh("kill -9 $$"), 30).status, "oom");
  EXPECT_EQ(run_child(sh("exit 3"), 30).status, "error");
}

TEST(Bench, CsvRowsLeaveUnusedLayoutEmpty) {
  BenchCase c;
  c.variant = "full";
  BenchResult r{1.0, 2.0, "ok", ""};
  EXPECT_EQ(csv_header(),
            "variant,L,block,row_len,layout,dtype,device,pass,batch,heads,dim,threads,ms,peak_mib,"
            "launches,allocated_mib,kernel_mib,status,detail");
  EXPECT_EQ(csv_row(c, r), "full,3072,,,,float32,cpu,forward,1,8,64,0,1.000,2.0,,,,ok,");
  c.variant = "combiner-mixture";
  EXPECT_EQ(csv_row(c, r),
            "combiner-mixture,3072,,96,given,float32,cpu,forward,1,8,64,0,1.000,2.0,,,,ok,");
  r.launches = 12;
  r.allocated_mib = 3.5;
  EXPECT_EQ(csv_row(c, r),
            "combiner-mixture,3072,,96,given,float32,cpu,forward,1,8,64,0,1.000,2.0,12,3.5,,ok,");
  r.kernel_mib = 20.5;
  EXPECT_EQ(
      csv_row(c, r),
      "combiner-mixture,3072,,96,given,float32,cpu,forward,1,8,64,0,1.000,2.0,12,3.5,20.5,ok,");
  r.launches = -1;
  r.status = "oom";
  r.detail = "out of memory, tried 8 GiB";
  c.backward = true;
  EXPECT_EQ(csv_row(c, r),
            "combiner-mixture,3072,,96,given,float32,cpu,forward+backward,1,8,64,0,,,,,,oom,"
            "out of memory; tried 8 GiB");
}

}  // namespace
}  // namespace combiner::attention
