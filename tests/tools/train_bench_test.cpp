// The training benchmark's FLOP count against hand computations on a tiny model (no timing
// assertions), and one short run of its loop.
#include <gtest/gtest.h>

#include "attention/plan.h"
#include "config/config.h"
#include "model/transformer.h"
#include "tools/train_bench.h"

namespace combiner::train {
namespace {

// Fashion-MNIST (L = 784 = 28 rows of 28), 1 layer, 16 wide, 2 heads (D = 8), MLP ratio 2.
config::Config tiny_config(const std::string& attention) {
  config::Config c;
  c.data.dataset = "fashion_mnist";
  c.model.layers = 1;
  c.model.width = 16;
  c.model.heads = 2;
  c.model.mlp_ratio = 2;
  c.model.attention.type = attention;
  c.train.batch_size = 2;
  c.train.threads = 1;
  config::validate(c);  // block = row_len = 28
  return c;
}

model::ImageTransformer tiny_model(const std::string& attention) {
  return model::ImageTransformer(model::TransformerOptions::from_config(tiny_config(attention)));
}

TEST(TrainBench, LinearWeightsAreTheBlockMatricesAndTheHead) {
  auto model = tiny_model("full");
  // qkv 16 x 48, attn_out 16 x 16, mlp_in 16 x 32, mlp_out 32 x 16, head 16 x 256.
  EXPECT_EQ(linear_weight_count(*model), 768 + 256 + 512 + 512 + 4096);
}

TEST(TrainBench, AttendedTermsByHand) {
  const int64_t L = 784, W = 28, n = 28;
  attention::AttentionOptions o{"full", 28, 28, "max"};
  EXPECT_EQ(attended_terms(o, L), L * (L + 1) / 2);  // 307720
  // rowmajor: (col + 1) direct positions of its own row, plus one span per earlier row.
  o.type = "combiner-axial-rowmajor";
  const int64_t rowmajor = n * W * (W + 1) / 2 + W * n * (n - 1) / 2;  // 21952
  EXPECT_EQ(attended_terms(o, L), rowmajor);
  o.type = "combiner-fixed";  // s = W: a block is a row, so the same count
  EXPECT_EQ(attended_terms(o, L), rowmajor);
  // vertical: own row up to i, own column above, and W - 1 column spans once row > 0.
  o.type = "combiner-axial-vertical";
  const int64_t vertical = rowmajor + (n - 1) * W * (W - 1);
  EXPECT_EQ(attended_terms(o, L), vertical);
  // horizontal: the axial support plus, per earlier row, 2 spans (1 at the first or last column).
  o.type = "combiner-axial-horizontal";
  const int64_t horizontal = rowmajor + W * (n - 1) * n / 2 * 2 - 2 * (n - 1) * n / 2;
  EXPECT_EQ(attended_terms(o, L), horizontal);
  o.type = "combiner-mixture";  // both plans are computed
  EXPECT_EQ(attended_terms(o, L), vertical + horizontal);
}

TEST(TrainBench, AttendedTermsAgreeWithThePlans) {
  for (const auto& type : attention::variant_names()) {
    const attention::AttentionOptions o{type, 8, 8, "max"};
    int64_t expected = 0;
    for (const auto& plan : attention::make_plans(o, 64))
      for (const auto& position : plan)
        expected += int64_t(position.direct.size() + position.spans.size());
    EXPECT_EQ(attended_terms(o, 64), expected) << type;
  }
}

TEST(TrainBench, StepFlopsByHand) {
  auto model = tiny_model("full");
  const auto f = count_step_flops(*model, 2);
  const double tokens = 2 * 784;
  EXPECT_DOUBLE_EQ(f.dense, 6.0 * 6144 * tokens);  // 57,802,752
  // 2 (q.k) + 2 (weights x v) FLOPs per dim per term, D = 8, 2 heads, batch 2, x 3, 1 layer.
  EXPECT_DOUBLE_EQ(f.attention, 4.0 * 8 * 307720 * 2 * 2 * 3 * 1);  // 118,164,480
  EXPECT_DOUBLE_EQ(f.total(), 57802752.0 + 118164480.0);

  auto deeper = model::ImageTransformer([] {
    auto o = model::TransformerOptions::from_config(tiny_config("combiner-axial-rowmajor"));
    o.layers = 3;
    return o;
  }());
  const auto g = count_step_flops(*deeper, 1);
  EXPECT_EQ(g.linear_weights, 3 * (768 + 256 + 512 + 512) + 4096);
  EXPECT_DOUBLE_EQ(g.attention, 4.0 * 8 * 21952 * 2 * 1 * 3 * 3);
}

// One untimed step, on one thread, counting live tensor bytes (--memory tensors).
TrainBenchOptions one_counted_step() {
  TrainBenchOptions options;
  options.steps = 1;
  options.warmup = 0;
  options.threads = 1;
  options.matmul_size = 64;
  options.memory = "tensors";
  return options;
}

// --memory tensors: the peak bytes of live tensors (weights, AdamW state, activations), here of
// the fused path's CPU model.
TEST(TrainBench, CountsTensorBytesOnTheFusedPath) {
  auto options = one_counted_step();
  auto config = tiny_config("combiner-axial-vertical");
  config.train.attention_path = "fused";
  const auto one = run_train_bench(config, options);
  config.train.batch_size = 4;
  const auto two = run_train_bench(config, options);
  const double weights_mib = double(one.parameters) * 4 / (1024.0 * 1024.0);
  EXPECT_GT(one.peak_mib, weights_mib);
  // Activations are almost all of it at this size: twice the batch, about twice the bytes.
  EXPECT_NEAR(two.peak_mib / one.peak_mib, 2.0, 0.1)
      << one.peak_mib << " MiB at batch 2, " << two.peak_mib << " at 4";
  EXPECT_TRUE(one.attention_check.ok()) << one.checks;
  options.memory = "heap";
  EXPECT_THROW(run_train_bench(config, options), std::invalid_argument);
}

// --cuda-graph: on the CPU, and with recomputation (whose generator state a capture cannot
// hold), a one-line refusal before anything is built.
TEST(TrainBench, CudaGraphRefusesTheCpuAndWholeBlockRecomputation) {
  auto options = one_counted_step();
  options.memory = "rss";
  options.cuda_graph = true;
  auto config = tiny_config("full");
  const auto refusal = [&] {
    try {
      run_train_bench(config, options);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no refusal");
  };
  config.train.device = "cpu";
  EXPECT_EQ(refusal(),
            "--cuda-graph: needs a CUDA device; the step runs on cpu (train.device cpu)");
  config.train.activation_checkpointing = "true";
  EXPECT_EQ(refusal().rfind("--cuda-graph: train.activation_checkpointing sets the generator's", 0),
            0u);
}

// Recomputing the MLP halves keeps fewer bytes than keeping everything, and recomputing whole
// blocks fewer still (counted live tensors, float32 composed path on the CPU).
TEST(TrainBench, RecomputationKeepsFewerTensorBytes) {
  const auto options = one_counted_step();
  auto config = tiny_config("combiner-axial-rowmajor");
  config.model.layers = 4;
  const double kept = run_train_bench(config, options).peak_mib;
  config.train.recompute_mlp = true;
  const double mlp = run_train_bench(config, options).peak_mib;
  config.train.activation_checkpointing = "true";
  const double whole = run_train_bench(config, options).peak_mib;
  EXPECT_LT(mlp, 0.9 * kept) << kept << " MiB kept, " << mlp << " MLP recomputed";
  EXPECT_LT(whole, mlp) << mlp << " MiB MLP recomputed, " << whole << " whole blocks";
}

// The plan's step measured at 1 to 3 images (train/memory_plan.h) predicts the bench's tensor
// peak at 6 images, never below it, for each plan named and for auto (which takes nothing
// recomputed here, where memory is plentiful); the summary line says so.
TEST(TrainBench, PredictsItsStepsTensorPeak) {
  auto options = one_counted_step();
  options.warmup = 1;  // the peak of a step with AdamW's moments already there, as they are
  auto config = tiny_config("combiner-axial-rowmajor");
  config.model.layers = 4;
  config.train.batch_size = 6;
  for (const std::string plan : {"false", "true", "auto"}) {
    SCOPED_TRACE(plan);
    config.train.activation_checkpointing = plan;
    const auto r = run_train_bench(config, options);
    EXPECT_GE(r.estimated_peak_mib, r.peak_mib);
    EXPECT_LE(r.estimated_peak_mib, 1.05 * r.peak_mib);
    const auto line = summary_line(r);
    EXPECT_NE(
        line.find("; memory: " + std::string(plan == "true" ? "whole blocks"
                                             : plan == "auto"
                                                 ? "train.activation_checkpointing auto: nothing"
                                                 : "nothing")),
        std::string::npos)
        << line;
  }
}

TEST(TrainBench, PrecisionAutoRunsFloat32OnTheCpu) {
  auto config = tiny_config("full");
  config.train.precision = "auto";
  const auto r = run_train_bench(config, one_counted_step());
  EXPECT_EQ(r.precision, "float32");
  EXPECT_NE(summary_line(r).find(", cpu, float32, "), std::string::npos) << summary_line(r);
}

TEST(TrainBench, ShortRunReportsConsistentNumbers) {
  TrainBenchOptions options;
  options.steps = 1;
  options.warmup = 0;
  options.threads = 1;
  options.matmul_size = 64;
  const auto r = run_train_bench(tiny_config("combiner-axial-rowmajor"), options);
  EXPECT_EQ(r.length, 784);
  EXPECT_EQ(r.batch, 2);
  EXPECT_EQ(r.threads, 1);
  EXPECT_EQ(r.device, "cpu");
  EXPECT_EQ(r.precision, "float32");
  EXPECT_GT(r.ms_per_step, 0.0);
  EXPECT_GT(r.matmul_gflops_before, 0.0);
  EXPECT_GT(r.matmul_gflops_after, 0.0);
  EXPECT_EQ(r.matmul_gflops, std::max(r.matmul_gflops_before, r.matmul_gflops_after));
  // The checks ran on the CPU, where the foreach update is bitwise torch::optim::AdamW's.
  EXPECT_EQ(r.update_check.adamw, 0.0);
  EXPECT_EQ(r.update_check.clip, 0.0);
  EXPECT_EQ(r.attention_check.prefix, 56);  // 2 rows of 28
  EXPECT_TRUE(r.attention_check.ok()) << r.checks;
  EXPECT_NE(summary_line(r).find("checks: update vs"), std::string::npos);
  EXPECT_NEAR(r.tokens_per_s, 2 * 784 / (r.ms_per_step / 1e3), 1e-6 * r.tokens_per_s);
  EXPECT_NEAR(r.mfu, r.flops.total() / (r.ms_per_step / 1e3) / (r.matmul_gflops * 1e9), 1e-12);
  EXPECT_NE(summary_line(r).find("tokens/s"), std::string::npos);
  EXPECT_EQ(train_csv_row(r).rfind("fashion_mnist,combiner-axial-rowmajor,784,2,", 0), 0u);
  EXPECT_NE(train_csv_row(r).find(",cpu,float32,1,1,"), std::string::npos);
  options.steps = 0;
  EXPECT_THROW(run_train_bench(tiny_config("full"), options), std::invalid_argument);
}

}  // namespace
}  // namespace combiner::train
