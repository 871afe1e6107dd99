// The CUDA kernels' own source (src/attention/fused/*.cu, src/ops/*.cu), run by the SIMT emulator
// through kernel-check's tables: the cases and tolerances a GPU runs (CUDA's dtypes), under both
// schedules of the emulator's threads. A race between a kernel's threads (a missing barrier)
// shows as errors that differ between the schedules; the emulator's counters show that the
// kernels ran, not their CPU models.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "attention/fused/kernel.h"
#include "emulated/emulated.h"
#include "ops/bias_grad_kernel.h"
#include "ops/cross_entropy_kernel.h"
#include "ops/weight_cast.h"
#include "simt/emulator.h"
#include "tensor_checks.h"
#include "tools/decode_check.h"
#include "tools/kernel_check.h"
#include "tools/linear_check.h"
#include "tools/loss_check.h"
#include "tools/norm_check.h"
#include "tools/norm_linear_check.h"

namespace combiner {
namespace {

using simt::Schedule;

// Runs `check` under both schedules with the emulated kernels installed; `line` prints a result,
// `same` compares the two results' errors, equal unless the kernels' output depends on the order.
template <typename Check, typename Line, typename Same>
void both_schedules(Check check, Line line, Same same) {
  const emulated::EmulatedKernels emulation;
  const int64_t before = simt::launches();
  decltype(check()) forward, reverse;
  {
    const simt::ScheduleScope scope(Schedule::kForward);
    forward = check();
  }
  EXPECT_GT(simt::launches(), before) << line(forward) << ": no kernel was emulated";
  {
    const simt::ScheduleScope scope(Schedule::kReverse);
    reverse = check();
  }
  EXPECT_TRUE(forward.pass) << line(forward) << " " << forward.detail;
  EXPECT_TRUE(reverse.pass) << line(reverse) << " (threads in reverse) " << reverse.detail;
  EXPECT_TRUE(same(forward, reverse)) << "the two schedules differ:\n"
                                      << line(forward) << "\n"
                                      << line(reverse);
}

TEST(SimtKernels, NormLinearKernelPassesItsTable) {
  for (const auto& c : tools::norm_linear_check_cases(false))
    both_schedules([&] { return tools::run_norm_linear_check(c, "cpu"); },
                   [&](const auto& r) { return tools::norm_linear_check_line(c, r); },
                   [](const auto& a, const auto& b) { return a.sum == b.sum && a.y == b.y; });
}

TEST(SimtKernels, LinearBiasKernelsPassTheirTable) {
  for (const auto& c : tools::linear_check_cases(false))
    both_schedules([&] { return tools::run_linear_check(c, "cpu"); },
                   [&](const auto& r) { return tools::linear_check_line(c, r); },
                   [](const auto& a, const auto& b) {
                     return a.y == b.y && a.dx == b.dx && a.dweight == b.dweight &&
                            a.dbias == b.dbias;
                   });
}

// The bias-gradient kernels add in the order their CPU model does: the same bits, partial sums
// included, over a partly used tile (264 columns) and more parts than the reduction's 32 slices.
TEST(SimtKernels, BiasGradKernelsAreTheirCpuModelBitForBit) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    for (const bool gelu : {false, true}) {
      const int64_t rows = 2200, cols = 264, parts = ops::bias_grad_parts(rows);
      torch::manual_seed(9);
      const auto dy = torch::randn({rows, cols}).to(dtype),
                 pre = torch::randn({rows, cols}).to(dtype);
      struct Out {
        torch::Tensor d_pre, partial, db;
      };
      auto run = [&](void (*kernels)(const ops::BiasGrad&)) {
        Out o{torch::zeros_like(dy), torch::zeros({parts, cols}), torch::zeros({cols})};
        ops::BiasGrad g;
        g.rows = rows;
        g.cols = cols;
        g.parts = parts;
        g.dy = dy.data_ptr();
        g.dtype = dtype == torch::kBFloat16 ? ops::Dtype::kBFloat16 : ops::Dtype::kFloat32;
        if (gelu) {
          g.pre = pre.data_ptr();
          g.d_pre = o.d_pre.data_ptr();
        }
        g.partial = o.partial.data_ptr<float>();
        g.dbias = o.db.data_ptr<float>();
        kernels(g);
        return o;
      };
      const auto model = run(&ops::bias_grad_cpu);
      const int64_t before = simt::launches();
      const auto kernel = run([](const ops::BiasGrad& g) { ops::bias_grad_cuda(g, nullptr); });
      EXPECT_EQ(simt::launches() - before, ops::kBiasGradLaunches);
      EXPECT_TRUE(torch::equal(kernel.d_pre, model.d_pre)) << dtype << " " << gelu;
      EXPECT_TRUE(torch::equal(kernel.partial, model.partial)) << dtype << " " << gelu;
      EXPECT_TRUE(torch::equal(kernel.db, model.db)) << dtype << " " << gelu;
    }
}

TEST(SimtKernels, LossKernelsPassTheirTable) {
  for (const auto& c : tools::loss_check_cases(false))
    both_schedules(
        [&] { return tools::run_loss_check(c, "cpu"); },
        [&](const auto& r) { return tools::loss_check_line(c, r); },
        [](const auto& a, const auto& b) { return a.bits == b.bits && a.dlogits == b.dlogits; });
}

// The loss kernels take a row's sums in the order their CPU model does (each lane's columns, then
// the warp's butterfly): the same bits, over a vocabulary not a multiple of the warp, rows past a
// CTA's, both target types and a target outside the vocabulary (its row NaN in both).
TEST(SimtKernels, LossKernelsAreTheirCpuModelBitForBit) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    for (const int64_t vocab : {256, 45}) {
      const int64_t rows = 21;
      torch::manual_seed(10);
      const auto z = (torch::randn({rows, vocab}) * 5.0).to(dtype);
      auto x = torch::randint(0, vocab, {rows}, torch::kLong);
      x[4] = vocab;
      const auto grad = torch::randn({rows});
      const auto x8 = x.clamp_max(255).to(torch::kByte);
      struct Out {
        torch::Tensor bits, lse, dz;
      };
      auto run = [&](void (*forward)(const ops::EntropyForward&),
                     void (*backward)(const ops::EntropyBackward&),
                     const torch::Tensor& targets) {
        Out o{torch::empty({rows}), torch::empty({rows}), torch::empty_like(z)};
        ops::EntropyForward f;
        f.rows = rows;
        f.vocab = vocab;
        f.logits = z.data_ptr();
        f.dtype = dtype == torch::kBFloat16 ? ops::Dtype::kBFloat16 : ops::Dtype::kFloat32;
        f.targets = targets.data_ptr();
        f.target_type = targets.scalar_type() == torch::kByte ? ops::TargetType::kUInt8
                                                              : ops::TargetType::kInt64;
        f.bits = o.bits.data_ptr<float>();
        f.lse = o.lse.data_ptr<float>();
        forward(f);
        ops::EntropyBackward b;
        b.rows = rows;
        b.vocab = vocab;
        b.logits = f.logits;
        b.dtype = f.dtype;
        b.targets = f.targets;
        b.target_type = f.target_type;
        b.lse = f.lse;
        b.grad = grad.data_ptr<float>();
        b.grad_scale = 0.5f;
        b.dlogits = o.dz.data_ptr();
        backward(b);
        return o;
      };
      // Bit patterns, so that NaN rows compare equal.
      auto same = [](const torch::Tensor& a, const torch::Tensor& b) {
        const auto as_int = [](const torch::Tensor& t) {
          return t.scalar_type() == torch::kBFloat16 ? t.view(torch::kShort) : t.view(torch::kInt);
        };
        return torch::equal(as_int(a), as_int(b));
      };
      for (const auto& targets : {x, x8}) {
        const auto model = run(&ops::entropy_forward_cpu, &ops::entropy_backward_cpu, targets);
        const emulated::EmulatedKernels emulation;
        const int64_t before = simt::launches();
        const auto kernel =
            run([](const ops::EntropyForward& f) { ops::entropy_forward_cuda(f, nullptr); },
                [](const ops::EntropyBackward& b) { ops::entropy_backward_cuda(b, nullptr); },
                targets);
        EXPECT_EQ(simt::launches() - before,
                  ops::kEntropyForwardLaunches + ops::kEntropyBackwardLaunches);
        EXPECT_TRUE(same(kernel.bits, model.bits)) << dtype << " " << vocab;
        EXPECT_TRUE(same(kernel.lse, model.lse)) << dtype << " " << vocab;
        EXPECT_TRUE(same(kernel.dz, model.dz)) << dtype << " " << vocab;
        const bool outside = targets.scalar_type() == torch::kLong || vocab < 255;
        EXPECT_EQ(std::isnan(model.bits[4].item<float>()), outside) << vocab;
      }
    }
}

// The weight-cast kernel gives its CPU model's bits (and LibTorch's cast's), through
// ops::WeightCopies with the emulated kernels installed: sizes that leave padding, more threads
// than one CTA's.
TEST(SimtKernels, WeightCastKernelIsItsCpuModelBitForBit) {
  torch::manual_seed(13);
  const std::vector<torch::Tensor> sources = {
      torch::randn({40, 70}), torch::randn({5}) * 1e4, torch::randn({3, 3}), torch::randn({256})};
  auto copies_of = [&](bool emulated) {
    std::unique_ptr<emulated::EmulatedKernels> emulation;
    if (emulated) emulation = std::make_unique<emulated::EmulatedKernels>();
    ops::WeightCopies copies(sources);
    const int64_t before = simt::launches();
    copies.write();
    EXPECT_EQ(simt::launches() - before, emulated ? ops::kWeightCastLaunches : 0);
    std::vector<torch::Tensor> out;
    for (size_t i = 0; i < sources.size(); ++i) out.push_back(copies.copy(i).clone());
    return out;
  };
  const auto model = copies_of(false), kernel = copies_of(true);
  for (size_t i = 0; i < sources.size(); ++i) {
    EXPECT_TRUE(torch::equal(kernel[i].view(torch::kShort), model[i].view(torch::kShort))) << i;
    EXPECT_TRUE(torch::equal(kernel[i].view(torch::kShort),
                             sources[i].to(torch::kBFloat16).view(torch::kShort)))
        << i;
  }
}

TEST(SimtKernels, LayerNormKernelsPassTheirTable) {
  for (const auto& c : tools::norm_check_cases(false))
    both_schedules([&] { return tools::run_norm_check(c, "cpu"); },
                   [&](const auto& r) { return tools::norm_check_line(c, r); },
                   [](const auto& a, const auto& b) {
                     return a.y == b.y && a.dx == b.dx && a.d_residual == b.d_residual &&
                            a.dweight == b.dweight && a.dbias == b.dbias;
                   });
}

TEST(SimtKernels, DecodeKernelPassesItsTable) {
  for (const auto& c : tools::decode_check_cases(false))
    both_schedules([&] { return tools::run_decode_check(c, "cpu"); },
                   [&](const auto& r) { return tools::decode_check_line(c, r); },
                   [](const auto& a, const auto& b) {
                     return a.composed == b.composed && a.reference == b.reference;
                   });
}

// The delta kernel (rowsum(dO * O), every backward's first launch) against its CPU model: o laid
// out [B, L, H, D] as the fused call's, d_o contiguous, row counts around a CTA's rows (32 to 128)
// and under one; every row written once (the output starts as NaN).
TEST(SimtKernels, DeltaKernelIsItsCpuModel) {
  namespace fused = attention::fused;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16})
    for (const int64_t D : {32, 64, 128})
      for (const int64_t rows : {5, 64, 200}) {
        const int64_t B = 2, H = 3;
        torch::manual_seed(rows + D);
        const auto o = torch::randn({B, rows, H, D}).to(dtype).transpose(1, 2);
        const auto d_o = torch::randn({B, H, rows, D}).to(dtype);
        auto run = [&](void (*kernel)(const fused::Delta&)) {
          auto delta = torch::full({B, H, rows}, NAN);
          fused::Delta d;
          d.batch = B;
          d.heads = H;
          d.rows = rows;
          d.dim = D;
          d.dtype = dtype == torch::kBFloat16 ? fused::Dtype::kBFloat16 : fused::Dtype::kFloat32;
          d.o = {o.data_ptr(), o.stride(0), o.stride(1), o.stride(2)};
          d.d_o = {d_o.data_ptr(), d_o.stride(0), d_o.stride(1), d_o.stride(2)};
          d.delta = delta.data_ptr();
          kernel(d);
          return delta;
        };
        const auto model = run(&fused::delta_cpu);
        const int64_t before = simt::launches();
        const auto kernel = run([](const fused::Delta& d) { fused::delta_cuda(d, nullptr); });
        EXPECT_EQ(simt::launches() - before, 1);
        const auto expected = (o.to(torch::kFloat) * d_o.to(torch::kFloat)).sum(-1);
        EXPECT_TRUE(torch::allclose(model, expected, 1e-5, 1e-5)) << dtype << " D " << D;
        EXPECT_TRUE(torch::allclose(kernel, model, 1e-5, 1e-5))
            << dtype << " D " << D << " rows " << rows << ": max |diff| "
            << testing::max_abs_diff(kernel, model);
      }
}

// The CUDA grid (float32 and bfloat16) at D 64 (the benchmarks') and 128 (the 128-layer
// preset's), the small sizes (L up to 300).
TEST(SimtKernels, AttentionKernelsPassKernelCheck) {
  for (const auto& c :
       attention::kernel_check_cases("cuda", {64, 128}, attention::KernelCheckSizes::kSmall))
    both_schedules([&] { return attention::run_kernel_check(c, "cpu"); },
                   [&](const auto& r) { return attention::kernel_check_line(c, r); },
                   [](const auto& a, const auto& b) {
                     return a.out_reference == b.out_reference && a.grad_q == b.grad_q &&
                            a.grad_k == b.grad_k && a.grad_v == b.grad_v &&
                            a.grad_summary == b.grad_summary && a.packed == b.packed;
                   });
}

}  // namespace
}  // namespace combiner
