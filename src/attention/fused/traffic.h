// The global-memory traffic of the fused family's launches, read from their plans: the bytes each
// kernel's CTAs load and store, walked tile by tile with the index rules the kernels use
// (kernel.h), without running anything. What bounds a pass at these segment lengths is memory,
// not arithmetic (the cost comment of kernel_forward.cu); this is the floor a launch's time is
// read against, counted the same way on every device.
//  - `read`, `written`: every load and store of every CTA (a segment's key tile read by each of
//    its query tiles counts once per tile; an atomic add or an addend counts a read and a write);
//    `loaded`, the part of `read` the CTAs copy into their tiles (cp.async on a GPU; the SIMT
//    emulator counts the same copies: tests/emulated).
//  - `unique`: each distinct byte read once and each distinct byte written once: what must cross
//    between DRAM and the chip if the L2 cache caught every re-read. unique / bandwidth is the
//    launch's floor; requested / unique says how much it leans on L2.
// Counted for one (batch, head), whose walk every head repeats, and scaled by batch x heads. The
// scans' backward with `accumulate` counts every element of its lines read and written: an upper
// bound, since where it adds depends on the data. LibTorch ops of the glue are not counted.
#pragma once

#include "attention/fused/kernel.h"

namespace combiner::attention::fused {

struct Traffic {  // bytes
  double loaded = 0;
  double read = 0;
  double written = 0;
  double unique = 0;
  double requested() const { return read + written; }
  Traffic& operator+=(const Traffic& t) {
    loaded += t.loaded;
    read += t.read;
    written += t.written;
    unique += t.unique;
    return *this;
  }
};

Traffic traffic(const Forward& f);
Traffic traffic(const ForwardPair& f);  // both passes' CTAs in one count
Traffic traffic(const Delta& d);
Traffic traffic(const Backward& b);      // all of its launches (backward_launches)
Traffic traffic(const BackwardPair& b);  // both passes' CTAs in one count
Traffic traffic(const RunningMaxes& r);
Traffic traffic(const SegmentMaxes& m);

}  // namespace combiner::attention::fused
