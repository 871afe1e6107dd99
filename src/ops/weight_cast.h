// The bfloat16 copies of a set of float32 tensors, all written by one launch of the kernel of
// ops/weight_cast_kernel.h (on CUDA tensors the CUDA kernel in CUDA builds, elsewhere its CPU
// model): what a model under bf16 autocast reads its matmul weights as, written once per forward,
// where autocast casts each weight and each bias as a layer reads it (model/transformer.h).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

namespace combiner::ops {

// Why WeightCopies cannot take these (empty when it can): one or more float32 tensors, each
// contiguous, all on one device; on a GPU, a build with the kernels.
std::string weight_copies_unsupported(const std::vector<torch::Tensor>& sources);

class WeightCopies {
 public:
  // The copies' buffer and the table the kernel reads (each source's address, its copy's first
  // element, its size), both made here on the sources' device, so that a CUDA graph may capture
  // write() (a captured write reads the sources where they were planned). Throws
  // std::invalid_argument where weight_copies_unsupported says why.
  explicit WeightCopies(const std::vector<torch::Tensor>& sources);

  // Whether `sources` are the tensors planned: the same memory and sizes, in order.
  bool covers(const std::vector<torch::Tensor>& sources) const;
  // Every copy from its source as it is now (in stream order on a GPU): one launch.
  void write();
  // Source i's copy, as of the last write(): a bfloat16 view of the buffer, of its source's shape
  // (made with the plan, so a forward takes its copies without an op).
  const torch::Tensor& copy(size_t i) const { return copies_.at(i); }
  size_t size() const { return sources_.size(); }

 private:
  struct Source {
    const void* data;
    std::vector<int64_t> shape;
  };
  std::vector<Source> sources_;
  torch::Tensor table_, buffer_;
  std::vector<torch::Tensor> copies_;
};

// Launches of the kernel (CUDA) or of its model (CPU) so far, as a GPU counts them.
int64_t weight_cast_launches();

}  // namespace combiner::ops
