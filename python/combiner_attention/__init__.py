"""Combiner attention as a PyTorch operator, torch.ops.combiner.attention: every variant of the
combiner trainer on [B, H, L, D] tensors as scaled_dot_product_attention takes them, CPU and CUDA
(the fused kernels where the package was built with them), with autograd and a Meta kernel, so
that torch.compile(fullgraph=True) traces through it.

    import combiner_attention as ca
    out = ca.attention(q, k, v, "combiner-axial-rowmajor", row_len=32)
    layer = ca.CombinerAttention("combiner-fixed", head_dim=64, block=32,
                                 abstraction="deepsets-max")   # holds phi_query, phi_key
"""
import os

import torch

torch.ops.load_library(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                    "libcombiner_ops.so"))

from .functional import abstractions, attention, path, reference_attention, variants  # noqa: E402
from .module import CombinerAttention  # noqa: E402

__all__ = ["attention", "reference_attention", "path", "variants", "abstractions",
           "CombinerAttention"]
