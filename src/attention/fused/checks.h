// The fused glue's checks (checks.cpp), shared by the autograd Function (function.cpp): what the
// kernels index must exist, and which rows each pass owns. Errors are c10::Error with one line.
#pragma once

#include <torch/torch.h>

#include "attention/fused/fused.h"

#include <cstdint>
#include <vector>

namespace combiner::attention::fused_glue {

// A call's inputs and plan against q, k, v: the checks below, as its local stage and pools ask.
void check_call(const torch::Tensor& q,
                const torch::Tensor& k,
                const torch::Tensor& v,
                const FusedCall& call);
// q [B, H, Lq, D], k [B, H, Lk, D], v [B, H, Lk, Dv = D].
void check_qkv(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);
// x is [B, H, rows, D] with q's B, H, D, on q's device.
void check_frame(const torch::Tensor& q, const torch::Tensor& x, const char* name);
// g reads rows below `rows` and none below 0.
void fits(const fused::Geometry& g, int64_t rows, const char* what);

// The joint passes: the first and last cover every query row, every query geometry ends at Lq
// (o, lse and dq are indexed by it), sources fit their tensors. ks_rows, u_rows: the rows of ks
// and u (given, or made by pools or a local stage); 0 when there is none.
void check_operands(const torch::Tensor& q,
                    const torch::Tensor& k,
                    const torch::Tensor& v,
                    int64_t ks_rows,
                    int64_t u_rows,
                    const std::vector<FusedPass>& passes);

// The pools of one side (x: k, or q when query_side) against its slot `given` (ks or qs, may be
// undefined): they fit x, write disjoint rows, and the slot is not also given. Returns the slot's
// rows (given or pooled; 0: none).
int64_t check_pools(const torch::Tensor& x,
                    const torch::Tensor& given,
                    const std::vector<FusedPool>& pools,
                    bool query_side);

// A local stage over Lu query rows (qs, or q): no summaries, queries ending at Lu, no row of u
// written twice.
void check_local(int64_t Lu,
                 const torch::Tensor& k,
                 const torch::Tensor& v,
                 const std::vector<FusedPass>& local);
// Pools made on chip (FusedPool::on_chip) and the local passes that make them
// (FusedPass::pooled): each such pass fits on chip for q (pools_fit_on_chip) and makes one
// running max of k and one of q over its keys' rows (into its pooled_keys' rows of ks and its
// queries' rows of qs): each pool's lines, or the first steps of each, made on chip by one pass;
// the joint `passes` read only the rows of ks that are made. Nothing where none is asked for.
void check_pooled(const torch::Tensor& q,
                  const std::vector<FusedPass>& local,
                  const std::vector<FusedPool>& pools,
                  const std::vector<FusedPass>& passes);
// How many local queries write each of u's Lu rows.
std::vector<int64_t> local_writes(const std::vector<FusedPass>& local, int64_t Lu);

// Which of rows 0..rows-1 g's indices name.
std::vector<char> named_rows(const fused::Geometry& g, int64_t rows);
// Whether every row the geometries of `reads` name is marked in `written` (and below its size).
bool names_only(const std::vector<fused::Geometry>& reads, const std::vector<char>& written);
// The geometries through which the joint passes read the slot ks (or, with `values`, u) of
// `rows` rows: source A from the summaries, source B by segment; by prefix, every row.
std::vector<fused::Geometry> slot_reads(const std::vector<FusedPass>& passes,
                                        bool values,
                                        int64_t rows);

// A buffer the glue allocates without zeros, where the plan writes every row before any kernel
// reads it, or no kernel reads the rows it leaves: torch::empty, or NaN while poison_unset is on
// (tests), so that a kernel reading a row nobody wrote shows in its output.
torch::Tensor unset(at::IntArrayRef sizes, const torch::TensorOptions& options);
// Turns unset()'s NaN fill on or off; returns what it was.
bool poison_unset(bool on);
// poison_unset(on) for a scope.
struct PoisonUnsetScope {
  explicit PoisonUnsetScope(bool on = true) : was(poison_unset(on)) {}
  ~PoisonUnsetScope() { poison_unset(was); }
  PoisonUnsetScope(const PoisonUnsetScope&) = delete;
  PoisonUnsetScope& operator=(const PoisonUnsetScope&) = delete;
  bool was;
};

// Whether the segments of g own disjoint rows that together are every row 0..rows-1.
bool covers(const fused::Geometry& g, int64_t rows);
// Whether no two indices (g, t) of g name the same row.
bool injective(const fused::Geometry& g, int64_t rows);

}  // namespace combiner::attention::fused_glue
