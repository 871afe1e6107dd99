"""CombinerAttention: the operator as an nn.Module holding the variant's learned DeepSets maps,
initialised as the trainer's SpanSummary initialises them."""
import math

import torch
from torch import nn

from .functional import _layout, attention


class CombinerAttention(nn.Module):
    """Causal attention of one variant over already-projected heads: forward(q, k, v) with q, k
    [B, H, L, D] and v [B, H, L, Dv] returns [B, H, L, Dv]. With a deepsets abstraction the
    module holds phi_query and phi_key ([head_dim, head_dim], shared by the heads; the names the
    trainer's checkpoints give them), drawn as randn / sqrt(head_dim), phi_query first, as the
    trainer's SpanSummary does: after torch.manual_seed(s) they equal the trainer's after
    torch::manual_seed(s). The options are checked here, except that row_len must divide L,
    which the operator checks per call."""

    def __init__(self, variant, head_dim, *, block=None, row_len=None, abstraction="max",
                 device=None, dtype=None):
        super().__init__()
        head_dim = _layout("head_dim", head_dim)
        if head_dim <= 0:
            raise ValueError(f"CombinerAttention: head_dim: expected > 0, got {head_dim}")
        self.variant, self.head_dim, self.abstraction = variant, head_dim, abstraction
        self.block, self.row_len = block, row_len
        self.map_names = list(torch.ops.combiner.learned_maps(
            variant, _layout("block", block), _layout("row_len", row_len), abstraction))
        for name in self.map_names:
            self.register_parameter(name, nn.Parameter(
                torch.empty(head_dim, head_dim, device=device, dtype=dtype)))
        self.reset_parameters()

    def reset_parameters(self):
        """Draws the maps as the trainer does: float32 randn / sqrt(D) from the default CPU
        generator, in registration order, then to the parameters' device and dtype."""
        with torch.no_grad():
            for name in self.map_names:
                drawn = torch.randn(self.head_dim, self.head_dim) / math.sqrt(self.head_dim)
                getattr(self, name).copy_(drawn)

    def forward(self, q, k, v):
        return attention(q, k, v, self.variant, block=self.block, row_len=self.row_len,
                         abstraction=self.abstraction,
                         phi_query=getattr(self, "phi_query", None),
                         phi_key=getattr(self, "phi_key", None))

    def extra_repr(self):
        layout = "".join(f", {n}={getattr(self, n)}" for n in ("block", "row_len")
                         if getattr(self, n) is not None)
        return f"{self.variant!r}, head_dim={self.head_dim}{layout}, abstraction={self.abstraction!r}"
