"""What the package's tests share: each variant's layout argument, inputs, and the DeepSets maps a
variant learns, as plain tensors."""
import torch

import combiner_attention as ca

COMBINER = [v for v in ca.variants() if v.startswith("combiner-")]


def layout(variant, size):
    """block= or row_len= for the variant (the one it reads), or nothing."""
    if variant in ("fixed", "combiner-fixed"):
        return {"block": size}
    if variant == "axial" or variant == "combiner-mixture" or variant.startswith("combiner-axial"):
        return {"row_len": size}
    return {}


def qkv(B, H, L, D, seed, dtype=torch.float64, requires_grad=False, Dv=None):
    g = torch.Generator().manual_seed(seed)
    shapes = [(B, H, L, D), (B, H, L, D), (B, H, L, Dv or D)]
    return [torch.randn(*s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(requires_grad)
            for s in shapes]


def maps(variant, abstraction, D, seed, dtype=torch.float64, requires_grad=False, **layout_args):
    """{"phi_query": ..., "phi_key": ...} for the maps the variant learns with this abstraction."""
    names = torch.ops.combiner.learned_maps(variant, layout_args.get("block", 0),
                                            layout_args.get("row_len", 0), abstraction)
    g = torch.Generator().manual_seed(seed)
    return {n: (torch.randn(D, D, generator=g, dtype=torch.float64) / D ** 0.5).to(dtype)
            .requires_grad_(requires_grad) for n in names}


def op_args(variant, abstraction, q, k, v, phi, **layout_args):
    """The positional arguments of torch.ops.combiner.attention."""
    return (q, k, v, variant, layout_args.get("block", 0), layout_args.get("row_len", 0),
            abstraction, phi.get("phi_query"), phi.get("phi_key"))
