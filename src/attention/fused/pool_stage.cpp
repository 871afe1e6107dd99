// The max pools a fused call makes itself (pool_stage.h): the pools' scans, batched into one
// launch per kind and direction, and the slots they make and take back.
#include "attention/fused/pool_stage.h"

#include "attention/fused/checks.h"
#include "attention/fused/launch.h"
#include "attention/fused/pool_scans.h"

#include <algorithm>

namespace combiner::attention {

namespace pools_detail {

// The scans of a fused call's pools in one direction, batched into launches: each launch takes
// every scan of its kind it can (up to kMaxScanParts), except that in the backward a scan joins a
// launch only if no scan of its side is in it (two scans of one side add into the same
// gradient: they would race). `copies` run after the launches.
struct PoolLaunches {
  template <typename Scan>
  struct Batch {
    std::vector<fused::ScanParts<Scan>> launches;
    std::vector<int> sides;  // per launch: bit 1 key side, bit 2 query side
    void add(const Scan& scan, int side, bool exclusive) {
      for (size_t i = 0; i < launches.size(); ++i) {
        auto& l = launches[i];
        if (l.count == fused::kMaxScanParts || l.part[0].dtype != scan.dtype) continue;
        if (exclusive && (sides[i] & side)) continue;
        l.part[l.count++] = scan;
        sides[i] |= side;
        return;
      }
      launches.push_back(fused::one_part(scan));
      sides.push_back(side);
    }
  };
  Batch<fused::RunningMax> running;
  Batch<fused::SegmentMax> segment;
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (from, into)
  std::vector<torch::Tensor> keep;  // tensors a scan reads that nothing else holds
  bool backward = false;

  void run(const torch::Tensor& on) {
    for (const auto& l : segment.launches)
      backward ? fused_launch::segment_max_backward(on, l) : fused_launch::segment_max(on, l);
    for (const auto& l : running.launches)
      backward ? fused_launch::running_max_backward(on, l) : fused_launch::running_max(on, l);
    for (auto& [from, into] : copies) into.copy_(from);
  }
};

// One pool of a fused call (pool_stage.h) into `launches`: forward into rows [first, first +
// rows) of `slot`; backward (dy: those rows of the slot's gradient) adding into dx. The tensors
// the scan reads and writes are views of these (or kept in `launches`): alive until it runs.
// `slabs`: dy_slot is that many slabs of the slot's gradient (SegmentMax::dy_slabs), the slot
// this segment max's rows alone.
void add_pool(const FusedPool& p,
              const torch::Tensor& x_in,
              const torch::Tensor& slot,
              const torch::Tensor& dy_slot,
              const torch::Tensor& dx,
              PoolLaunches& launches,
              int64_t slabs = 1) {
  const bool backward = dy_slot.defined();
  const int side = p.query_side ? 2 : 1;
  TORCH_CHECK(slabs == 1 || (backward && p.kind == FusedPool::Kind::kSegmentMax && p.first == 0 &&
                             dy_slot.size(2) == slabs * p.segments),
              "fused pools: a gradient in slabs is a segment max's whole slot's");
  const auto dy = backward ? dy_slot.narrow(2, p.first, slabs * p.rows()) : torch::Tensor();
  if (p.kind == FusedPool::Kind::kSegmentMax) {
    auto m = segment_max_of(x_in, p.segments, p.len);
    if (!backward) {
      // The kernel writes [B, H, segments, D] contiguous: the slot's rows where they are.
      const auto y = slot.narrow(2, p.first, p.segments);
      const auto out =
          y.is_contiguous() ? y : torch::empty_like(y, torch::MemoryFormat::Contiguous);
      m.y = out.data_ptr();
      launches.segment.add(m, side, false);
      if (!out.is_same(y)) launches.copies.emplace_back(out, y);
      return;
    }
    const auto d = dy.contiguous();
    launches.keep.push_back(d);
    m.dy = d.data_ptr();
    m.dy_acc = d.scalar_type() != x_in.scalar_type();  // (add_backward: then float for bfloat16)
    m.dy_slabs = slabs;
    set_dx(m, dx);
    m.accumulate = true;
    launches.segment.add(m, side, true);
    return;
  }
  fused::RunningMax r;
  // The backward's lines: the steps whose rows are read (FusedPool::read_steps), each line's
  // first in its scan order; the running max at those steps depends on x's there alone.
  const auto read = [&](const torch::Tensor& lines) {
    const int64_t n = p.steps(), s = p.read_steps;
    if (!backward || s == 0 || s == n) return lines;
    return lines.narrow(p.dim, p.reverse ? n - s : 0, s);
  };
  auto x = read(segments_of(x_in, p.segments, p.len));
  const int64_t scan = scan_layout(x, p.dim, r);
  launches.keep.push_back(x);  // (a copy, where scan_layout made one)
  const auto lines = [&](const torch::Tensor& t) {
    return t.view({t.size(0), t.size(1), p.segments, p.len, t.size(3)});
  };
  r.reverse = p.reverse;
  r.dtype = scan_dtype(x.scalar_type());
  r.x = x.data_ptr();
  if (!backward) {
    const auto y = lines(slot.narrow(2, p.first, p.rows()));
    r.y_at = layout_of(y, p.dim, scan);
    r.y = y.data_ptr();
    launches.running.add(r, side, false);
    return;
  }
  const auto d = read(lines(dy)), d_x = read(segments_of(dx, p.segments, p.len));
  r.y_at = layout_of(d, p.dim, scan);
  r.dx_at = layout_of(d_x, p.dim, scan);
  r.dy = d.data_ptr();
  r.dx = d_x.data_ptr();
  r.accumulate = true;
  launches.running.add(r, side, true);
}

}  // namespace pools_detail

namespace fused_pools {

constexpr size_t kPoolInts = 9;

std::vector<int64_t> encode(const std::vector<FusedPool>& pools) {
  std::vector<int64_t> out;
  for (const auto& p : pools)
    out.insert(out.end(),
               {int64_t(p.kind),
                int64_t(p.query_side),
                p.segments,
                p.len,
                p.dim,
                int64_t(p.reverse),
                p.first,
                int64_t(p.on_chip),
                p.read_steps});
  return out;
}

std::vector<FusedPool> decode(const std::vector<int64_t>& in) {
  std::vector<FusedPool> out;
  for (size_t i = 0; i + kPoolInts <= in.size(); i += kPoolInts) {
    FusedPool p;
    p.kind = FusedPool::Kind(in[i]);
    p.query_side = in[i + 1] != 0;
    p.segments = in[i + 2];
    p.len = in[i + 3];
    p.dim = in[i + 4];
    p.reverse = in[i + 5] != 0;
    p.first = in[i + 6];
    p.on_chip = in[i + 7] != 0;
    p.read_steps = in[i + 8];
    out.push_back(p);
  }
  return out;
}

fused::Geometry read_in_backward(const FusedPool& p) {
  if (p.kind == FusedPool::Kind::kSegmentMax)
    return {1, p.segments, 0, 1, p.first + p.rows(), p.first};
  const int64_t n = p.steps(), s = p.read_steps == 0 ? n : p.read_steps;
  const int64_t skipped = p.reverse ? n - s : 0;  // the lines' steps before the read ones
  if (p.dim == 3)                                 // a line per segment, its steps its rows
    return {p.segments, s, p.len, 1, p.first + p.rows(), p.first + skipped};
  // a line per column of the segments, its steps one row of each segment
  return {p.len, s, 1, p.len, p.first + p.rows(), p.first + skipped * p.len};
}

int64_t slot_rows(const std::vector<FusedPool>& pools, bool query_side) {
  int64_t rows = 0;
  for (const auto& p : pools)
    if (p.query_side == query_side) rows = std::max(rows, p.first + p.rows());
  return rows;
}

namespace {
// A query side's running max made on chip: its pooled local pass holds it in its tiles alone.
// (A query side's segment max made on chip is written to its slot by the local pass whose
// queries it is: Forward::query_pool.)
bool in_tiles(const FusedPool& p) {
  return p.query_side && p.on_chip && p.kind == FusedPool::Kind::kRunningMax;
}

// One side's slot: [B, H, rows, D] like x, every row written by its pool (else zeros), or, where
// a pooled local pass makes a pool's first steps of each line only, the rows it leaves read by
// no pass (check_pooled); none for the pools held in tiles alone.
torch::Tensor slot_for(const std::vector<FusedPool>& pools,
                       bool query_side,
                       const torch::Tensor& x) {
  int64_t rows = 0, written = 0;
  for (const auto& p : pools) {
    if (p.query_side != query_side || in_tiles(p)) continue;
    rows = std::max(rows, p.first + p.rows());
    written += p.rows();
  }
  if (rows == 0) return {};
  const auto options = x.options().memory_format(torch::MemoryFormat::Contiguous);
  const std::vector<int64_t> shape = {x.size(0), x.size(1), rows, x.size(3)};
  // The pools write disjoint rows (checks.cpp), so `written` == rows means every row.
  return written == rows ? fused_glue::unset(shape, options) : torch::zeros(shape, options);
}

// dx checked, or made (zeros) where undefined.
void ready_dx(const torch::Tensor& x, torch::Tensor& dx) {
  if (!dx.defined()) dx = torch::zeros_like(x, torch::MemoryFormat::Contiguous);
  TORCH_CHECK(dx.scalar_type() == x.scalar_type() && dx.sizes() == x.sizes() && dx.stride(3) == 1,
              "fused pools: the gradient they add into must be ",
              x.scalar_type(),
              " of x's shape with a contiguous last axis, got ",
              dx.scalar_type(),
              " of strides ",
              dx.strides());
}
}  // namespace

std::pair<torch::Tensor, torch::Tensor> make(const std::vector<FusedPool>& pools,
                                             const torch::Tensor& k,
                                             const torch::Tensor& q) {
  auto ks = slot_for(pools, false, k), qs = slot_for(pools, true, q);
  pools_detail::PoolLaunches launches;
  for (const auto& p : pools)
    if (!p.on_chip)
      pools_detail::add_pool(p, p.query_side ? q : k, p.query_side ? qs : ks, {}, {}, launches);
  launches.run(k);
  return {ks, qs};
}

fused::SegmentMax on_chip_forward(const FusedPool& pool,
                                  const torch::Tensor& k,
                                  const torch::Tensor& ks) {
  TORCH_CHECK(ks.defined() && ks.is_contiguous() && ks.size(2) == pool.segments &&
                  ks.scalar_type() == k.scalar_type(),
              "fused pools: a segment max made on chip writes a contiguous slot of its rows");
  auto m = pools_detail::segment_max_of(k, pool.segments, pool.len);
  m.y = ks.data_ptr();
  return m;
}

fused::SegmentMax on_chip_backward(const FusedPool& pool,
                                   const torch::Tensor& k,
                                   const torch::Tensor& d_ks,
                                   const torch::Tensor& dk,
                                   int64_t slabs) {
  TORCH_CHECK(d_ks.is_contiguous() && d_ks.size(2) == slabs * pool.segments &&
                  dk.scalar_type() == k.scalar_type() && dk.sizes() == k.sizes() &&
                  dk.stride(3) == 1,
              "fused pools: a segment max's backward on chip reads a contiguous gradient of its "
              "rows and adds into k's");
  auto m = pools_detail::segment_max_of(k, pool.segments, pool.len);
  m.dy = d_ks.data_ptr();
  m.dy_acc = d_ks.scalar_type() != k.scalar_type();
  m.dy_slabs = slabs;
  pools_detail::set_dx(m, dk);
  m.accumulate = true;
  return m;
}

bool remade_in_backward(const std::vector<FusedPool>& pools) {
  return std::any_of(pools.begin(), pools.end(), [](const FusedPool& p) {
    return p.kind == FusedPool::Kind::kRunningMax;
  });
}

void add_backward(const std::vector<FusedPool>& pools,
                  const torch::Tensor& k,
                  const torch::Tensor& d_ks,
                  torch::Tensor& dk,
                  const torch::Tensor& q,
                  const torch::Tensor& d_qs,
                  torch::Tensor& dq,
                  int64_t key_slabs) {
  pools_detail::PoolLaunches launches;
  launches.backward = true;
  torch::Tensor dy[2];  // the slots' gradients in k's and q's dtype, or float for segment maxes
  for (const bool query_side : {false, true}) {
    const auto& d_slot = query_side ? d_qs : d_ks;
    const auto& x = query_side ? q : k;
    if (!d_slot.defined()) continue;
    ready_dx(x, query_side ? dq : dk);
    // A bfloat16 call's float32 summary gradient goes to segment maxes as it is (SegmentMax::
    // dy_acc): no cast launch, one rounding. The running max reads x's dtype.
    const bool segment_maxes = std::all_of(pools.begin(), pools.end(), [&](const FusedPool& p) {
      return p.query_side != query_side || p.kind == FusedPool::Kind::kSegmentMax;
    });
    const bool as_it_is = segment_maxes && x.scalar_type() == torch::kBFloat16 &&
                          d_slot.scalar_type() == torch::kFloat;
    dy[query_side] = as_it_is ? d_slot : d_slot.to(x.scalar_type());
    const int64_t slabs = query_side ? 1 : key_slabs;
    TORCH_CHECK(slabs == 1 || as_it_is || d_slot.scalar_type() == x.scalar_type(),
                "fused pools: a gradient in slabs is read as it is");
    for (const auto& p : pools)
      if (p.query_side == query_side)
        pools_detail::add_pool(p, x, {}, dy[query_side], query_side ? dq : dk, launches, slabs);
  }
  launches.run(k);
}

}  // namespace fused_pools

}  // namespace combiner::attention
