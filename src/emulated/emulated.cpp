#include "emulated/emulated.h"

namespace combiner::emulated {

namespace {

// The *_cuda entry points: the kernels' source, compiled for the emulator (emulated/*_kernel.cpp).
attention::fused_launch::HostKernels attention_kernels() {
  namespace f = attention::fused;
  attention::fused_launch::HostKernels k;
  k.forward = &f::forward_cuda;
  k.forward_pair = &f::forward_pair_cuda;
  k.delta = &f::delta_cuda;
  k.backward = &f::backward_cuda;
  k.backward_pair = &f::backward_pair_cuda;
  k.running_max_forward = &f::running_max_forward_cuda;
  k.running_max_backward = &f::running_max_backward_cuda;
  k.segment_max_forward = &f::segment_max_forward_cuda;
  k.segment_max_backward = &f::segment_max_backward_cuda;
  k.decode_step = &f::decode_step_cuda;
  k.decode_summaries = &f::decode_summaries_cuda;
  return k;
}

ops::HostKernels ops_kernels() {
  ops::HostKernels k;
  k.norm_forward = &ops::norm_forward_cuda;
  k.norm_backward = &ops::norm_backward_cuda;
  k.norm_linear = &ops::norm_linear_cuda;
  k.bias_grad = &ops::bias_grad_cuda;
  k.entropy_forward = &ops::entropy_forward_cuda;
  k.entropy_backward = &ops::entropy_backward_cuda;
  k.weight_cast = &ops::weight_cast_cuda;
  return k;
}

const attention::fused_launch::HostKernels kAttention = attention_kernels();
const ops::HostKernels kOps = ops_kernels();

}  // namespace

EmulatedKernels::EmulatedKernels()
    : attention_(attention::fused_launch::set_host_kernels(&kAttention)),
      ops_(ops::set_host_kernels(&kOps)) {}

EmulatedKernels::~EmulatedKernels() {
  attention::fused_launch::set_host_kernels(attention_);
  ops::set_host_kernels(ops_);
}

}  // namespace combiner::emulated
