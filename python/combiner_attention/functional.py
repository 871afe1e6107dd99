"""The operator with named arguments. Python checks only what the C++ side cannot see (argument
types, a device it has no kernel for); the operator checks the rest (variant, abstraction,
layout, shapes, dtypes, devices, the DeepSets maps) with the trainer's own validation."""
import torch

__all__ = ["attention", "reference_attention", "path", "variants", "abstractions"]


def variants():
    """Every variant name, as the trainer's model.attention.type takes them."""
    return list(torch.ops.combiner.variants())


def abstractions():
    """Every span abstraction: max, mean, deepsets-max, deepsets-mean."""
    return list(torch.ops.combiner.abstractions())


def _layout(name, value):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"combiner_attention: {name}: expected an int or None, "
                        f"got {type(value).__name__} {value!r}")
    return value


def _arguments(function, q, k, v, variant, block, row_len, abstraction, phi_query, phi_key):
    for name, t in (("q", q), ("k", k), ("v", v), ("phi_query", phi_query), ("phi_key", phi_key)):
        if t is None and name.startswith("phi"):
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"combiner_attention.{function}: {name}: expected a torch.Tensor, "
                            f"got {type(t).__name__}")
        if t.device.type not in ("cpu", "cuda", "meta"):
            raise ValueError(f"combiner_attention.{function}: {name}: expected a CPU or CUDA "
                             f"tensor, got device {t.device}")
    for name, text in (("variant", variant), ("abstraction", abstraction)):
        if not isinstance(text, str):
            raise TypeError(f"combiner_attention.{function}: {name}: expected a str, "
                            f"got {type(text).__name__} {text!r}")
    return (q, k, v, variant, _layout("block", block), _layout("row_len", row_len), abstraction,
            phi_query, phi_key)


def attention(q, k, v, variant, *, block=None, row_len=None, abstraction="max", phi_query=None,
              phi_key=None):
    """Causal Combiner attention (or one of its sparse bases, or `full`): out[b, h, i] attends to
    positions 0..i of k, v as the variant defines (docs/ATTENTION.md).

    q, k: [B, H, L, D]; v: [B, H, L, Dv]; one floating dtype, one device. Returns [B, H, L, Dv].
    variant: one of variants(). block: the block size of fixed and combiner-fixed; row_len: the
    row length W of axial, combiner-axial-* and combiner-mixture (it must divide L); neither for
    the others. abstraction: the span summary of the Combiner variants (abstractions()); the
    deepsets ones take the learned [D, D] maps phi_query (every Combiner variant but
    combiner-axial-rowmajor) and phi_key (CombinerAttention holds them). Differentiable in q, k,
    v and the maps."""
    return torch.ops.combiner.attention(*_arguments("attention", q, k, v, variant, block, row_len,
                                                    abstraction, phi_query, phi_key))


def reference_attention(q, k, v, variant, *, block=None, row_len=None, abstraction="max",
                        phi_query=None, phi_key=None):
    """The trainer's dense reference: the effective attention matrix built position by position in
    float64 (src/attention/reference.cpp), times v. CPU only; returns float64; not
    differentiable; O(L^2) memory: for checking attention() on small inputs."""
    return torch.ops.combiner.reference_attention(*_arguments(
        "reference_attention", q, k, v, variant, block, row_len, abstraction, phi_query, phi_key))


def path(q, v, variant):
    """Which implementation attention() runs for these q, v: 'fused CUDA kernels', or
    'LibTorch path' with the reason the kernels do not apply."""
    return torch.ops.combiner.path(q, v, variant)
