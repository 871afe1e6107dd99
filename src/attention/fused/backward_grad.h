// The gradients of a fused call's backward (backward.cpp): for each input slot, the buffer its
// passes write and how each writes it, planned before the buffers are made so that the zeroed
// ones of a summary group come from one fill.
#pragma once

#include <torch/torch.h>

#include "attention/fused/function.h"
#include "attention/fused/pool_stage.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace combiner::attention::fused_glue {

// The gradient of one input slot (q, k, v, ks or u) and how each pass writes it. `readers`: the
// steps (passes, in the order they run) whose gradient lands in the slot (for q every pass, for the
// others the passes reading it as source A or as source B by segment) and their geometries;
// `shared`: whether a pass reads it as source B by prefix.
//  - every reader writes each of its rows once (injective) and the slot is not shared: the
//    kernel dtype, with no Acc buffer and no atomics; the first reader stores (into an empty
//    buffer where it covers every row, else a zeroed one), each later reader adds its part in
//    place (addend = the buffer itself). Each pass's part is rounded to the kernel dtype before
//    it is added: bfloat16 sums a few partial gradients (two or three passes) in bfloat16.
//  - otherwise (summaries read by every later segment, key rows shared by segments): a zeroed
//    Acc buffer every reader adds into, converted when returned; or, for a key slot whose one
//    reader's segments all read the same rows and those are all of its rows (writes_slabs:
//    rowmajor's columns over the row summaries), an empty one that the sum of that reader's
//    slabs fills (the passes write slabs of dk alone); or, where that slot's one later reader is
//    a segment max over all of its rows (rowmajor's row maxes), the slabs themselves, which that
//    segment max's backward sums as it reads them (SegmentMax::dy_slabs): no sum launch.
// `home`, when defined, is where the gradient is returned: a part of the packed gradient of q, k
// and v when they were the parts of one packed tensor (attention/heads.h). The kernel-dtype
// buffer is then `home` itself; an Acc one is copied into it at the end.
struct Grad {
  torch::Tensor buffer;                 // the slot's gradient: kernel dtype or Acc
  std::vector<fused::GradOut> by_pass;  // how step i writes it (kind kNone: not a reader)
  bool slabs_fill = false;              // the sum of its one reader's slabs is the whole buffer
  int64_t slabs = 1;  // > 1: the buffer is that many slabs, whose sum is the gradient

  fused::GradOut out(size_t step) const {
    return by_pass.empty() ? fused::GradOut{} : by_pass[step];
  }
  // As source B by prefix (summaries): the zeroed Acc buffer, added into.
  fused::GradOut summary_out() const {
    return buffer.defined() ? grad_out(buffer, fused::GradOut::kAtomic) : fused::GradOut{};
  }
};

// The backward's readers of one gradient: (step, the geometry it writes through).
using Readers = std::vector<std::pair<size_t, fused::Geometry>>;

// Segments that all read the same key rows (seg_stride 0: rowmajor's columns over the row
// summaries): where their dk is added (kAtomic), each writes a slab of its own instead of W CTAs
// adding into the same rows, and the slabs are summed after the pass.
bool writes_slabs(const fused::Geometry& key);

// Whether such a pass writes every row of its slabs: the dk/dv kernel writes every valid key row
// of a segment, seen by a query or not, so where a segment's keys are all of rows 0..limit-1.
bool writes_whole_slabs(const fused::Geometry& key);

// A contiguous buffer to make: its sizes and options, and whether it starts as zeros.
struct BufferSpec {
  std::vector<int64_t> sizes;  // empty: none
  torch::TensorOptions options;
  bool zeroed = false;
};

// The buffers of `specs`, the zeroed ones views into one zero-filled allocation (each from a
// 256-byte boundary): one fill for all of them where each zeros() would launch its own.
std::vector<torch::Tensor> make_buffers(const std::vector<BufferSpec>& specs);

// How a slot's gradient is written, decided before its buffer is made (so that the zeroed
// buffers of a summary group are made in one fill): see Grad.
struct GradPlan {
  bool in_place = false;    // kernel dtype, each reader storing or adding its own rows
  bool slabs_fill = false;  // Grad::slabs_fill
  int64_t slabs = 1;        // Grad::slabs
  BufferSpec buffer;        // no sizes: no gradient
};

// Whether the first of `writers` stores every row that the later ones add into and that
// `read_after` (the rows read once they are done; null: every row) names.
bool first_stores_what_is_read(const Readers& writers,
                               const std::vector<fused::Geometry>* read_after,
                               int64_t rows);

// `read_after`: the rows of the gradient read after its readers have written it (by the local
// passes, or the pools' backward; null: every row, as where it is returned). Rows none of them
// reads need not be zeros. `keys`: the slot is read as keys (k, ks), whose gradient a pass
// writing slabs writes (a value slot's is added into the buffer, zeroed, whatever its geometry).
// `summed_as_read`: the gradient's one later reader is a segment max over all of its rows, which
// takes it as slabs (Grad::slabs).
GradPlan plan_grad(const torch::Tensor& x,
                   const Readers& readers,
                   bool shared,
                   const std::vector<fused::Geometry>* read_after = nullptr,
                   bool keys = false,
                   bool summed_as_read = false);

// The gradient of plan `g` in `buffer` (made from g.buffer, or the slot's home). `adds`: the
// buffer holds a gradient already, which its first reader adds into as the later ones do.
Grad bind_grad(const GradPlan& g,
               torch::Tensor buffer,
               const Readers& readers,
               size_t steps,
               bool adds = false);

// The rows of one side's slot that its pools' backward reads, where some pool reads only some
// (FusedPool::read_steps); else none (the pools read every row they make).
std::vector<fused::Geometry> read_in_backward(const std::vector<FusedPool>& pools, bool query_side);

// Which of rows 0..rows-1 the geometries name.
std::vector<char> named_rows_of(const std::vector<fused::Geometry>& gs, int64_t rows);

// The gradient of slot x, planned and made (plan_grad, bind_grad). `home` as in Grad;
// `home_holds`: it holds a gradient already (an earlier call's), which the readers add into where
// it is the buffer (else the buffer is added into it at the end).
Grad slot_grad(const torch::Tensor& x,
               const Readers& readers,
               size_t steps,
               bool shared,
               const torch::Tensor& home = {},
               bool home_holds = false,
               bool keys = false);

}  // namespace combiner::attention::fused_glue
