#include "attention/fused/backward_grad.h"

#include "attention/fused/checks.h"

#include <c10/util/accumulate.h>

namespace combiner::attention::fused_glue {

bool writes_slabs(const fused::Geometry& key) {
  return key.seg_stride == 0 && key.segments > 1;
}

bool writes_whole_slabs(const fused::Geometry& key) {
  return key.first == 0 && key.row_stride == 1 && key.seg_len >= key.limit;
}

namespace {

int64_t bytes_of(const BufferSpec& s) {
  return c10::multiply_integers(s.sizes) * int64_t(s.options.dtype().itemsize());
}

}  // namespace

std::vector<torch::Tensor> make_buffers(const std::vector<BufferSpec>& specs) {
  constexpr int64_t kAlign = 256;
  std::vector<int64_t> offsets(specs.size(), 0);
  int64_t end = 0;  // of the zeroed bytes so far
  torch::TensorOptions zeroed_options;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].sizes.empty() || !specs[i].zeroed) continue;
    offsets[i] = (end + kAlign - 1) / kAlign * kAlign;
    end = offsets[i] + bytes_of(specs[i]);
    zeroed_options = specs[i].options;
  }
  const auto zeros =
      end > 0 ? torch::zeros({end}, zeroed_options.dtype(torch::kByte)) : torch::Tensor();
  std::vector<torch::Tensor> made(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    if (s.sizes.empty()) continue;
    made[i] = s.zeroed ? zeros.narrow(0, offsets[i], bytes_of(s))
                             .view(s.options.dtype().toScalarType())
                             .view(s.sizes)
                       : unset(s.sizes, s.options);
  }
  return made;
}

bool first_stores_what_is_read(const Readers& writers,
                               const std::vector<fused::Geometry>* read_after,
                               int64_t rows) {
  if (covers(writers[0].second, rows)) return true;
  if (read_after == nullptr) return false;
  std::vector<fused::Geometry> reads = *read_after;
  for (size_t i = 1; i < writers.size(); ++i) reads.push_back(writers[i].second);
  return names_only(reads, named_rows(writers[0].second, rows));
}

GradPlan plan_grad(const torch::Tensor& x,
                   const Readers& readers,
                   bool shared,
                   const std::vector<fused::Geometry>* read_after,
                   bool keys,
                   bool summed_as_read) {
  GradPlan g;
  if (!x.defined() || (readers.empty() && !shared)) return g;
  const int64_t rows = x.size(2);
  g.in_place = !shared && !readers.empty();
  for (const auto& r : readers) g.in_place = g.in_place && injective(r.second, rows);
  g.slabs_fill = keys && !g.in_place && !shared && readers.size() == 1 &&
                 writes_slabs(readers[0].second) && readers[0].second.limit == rows;
  g.buffer.sizes = x.sizes().vec();
  g.buffer.options = g.in_place ? x.options() : x.options().dtype(acc_type(x.scalar_type()));
  g.buffer.zeroed =
      g.in_place ? !first_stores_what_is_read(readers, read_after, rows) : !g.slabs_fill;
  if (g.slabs_fill && summed_as_read) {
    const auto& key = readers[0].second;
    g.slabs = key.segments;
    g.buffer.sizes[2] = key.segments * key.limit;
    g.buffer.zeroed = !writes_whole_slabs(key);
  }
  return g;
}

Grad bind_grad(
    const GradPlan& g, torch::Tensor buffer, const Readers& readers, size_t steps, bool adds) {
  Grad grad;
  if (!buffer.defined()) return grad;
  grad.buffer = std::move(buffer);
  grad.slabs_fill = g.slabs_fill;
  grad.slabs = g.slabs;
  grad.by_pass.assign(steps, GradOut{});
  for (size_t i = 0; i < readers.size(); ++i) {
    GradOut& o = grad.by_pass[readers[i].first];
    if (g.slabs > 1) {  // its one reader's slab of each segment, stored
      o = grad_out(grad.buffer, GradOut::kStoreAcc);
      o.segment_rows = readers[i].second.limit;
      continue;
    }
    o = grad_out(grad.buffer, g.in_place ? GradOut::kStore : GradOut::kAtomic);
    if (g.in_place && (i > 0 || adds)) {
      o.addend = grad.buffer.data_ptr();
      o.addend_in_storage = true;
    }
  }
  return grad;
}

std::vector<fused::Geometry> read_in_backward(const std::vector<FusedPool>& pools,
                                              bool query_side) {
  std::vector<fused::Geometry> read;
  bool some = false;
  for (const auto& p : pools) {
    if (p.query_side != query_side) continue;
    read.push_back(fused_pools::read_in_backward(p));
    some = some || p.read_steps != 0;
  }
  return some ? read : std::vector<fused::Geometry>{};
}

std::vector<char> named_rows_of(const std::vector<fused::Geometry>& gs, int64_t rows) {
  std::vector<char> named(size_t(rows), 0);
  for (const auto& g : gs) {
    const auto one = named_rows(g, rows);
    for (int64_t r = 0; r < rows; ++r) named[r] = named[r] || one[r];
  }
  return named;
}

Grad slot_grad(const torch::Tensor& x,
               const Readers& readers,
               size_t steps,
               bool shared,
               const torch::Tensor& home,
               bool home_holds,
               bool keys) {
  const GradPlan g = plan_grad(x, readers, shared, nullptr, keys);
  if (g.buffer.sizes.empty()) return {};
  const bool in_home =
      g.in_place && home.defined() && home.scalar_type() == g.buffer.options.dtype().toScalarType();
  if (!in_home) return bind_grad(g, make_buffers({g.buffer})[0], readers, steps);
  if (home_holds) return bind_grad(g, home, readers, steps, /*adds=*/true);
  return bind_grad(g, g.buffer.zeroed ? home.zero_() : home, readers, steps);
}

}  // namespace combiner::attention::fused_glue
