"""torch.ops.combiner.attention on the CPU: outputs against the trainer's dense float64 reference
(every variant, every abstraction), gradients by torch.autograd.gradcheck (finite differences of
the operator itself, and of the reference against the operator's backward), opcheck (schema,
autograd registration, fake tensors, AOT dispatch with dynamic shapes), and the errors."""
import unittest

import torch

import combiner_attention as ca
from cases import COMBINER, layout, maps, op_args, qkv

# A layout per family with a short last block (fixed: L 10, s 4) and three rows (axial: L 9, W 3),
# so that every Combiner variant has spans; L 9 is no power of two (logsparse).
GRAD_SHAPES = {"fixed": (10, 4), "axial": (9, 3), "other": (9, 0)}


def grad_shape(variant):
    family = "fixed" if "fixed" in variant else "axial" if layout(variant, 1).get("row_len") else \
        "other"
    L, size = GRAD_SHAPES[family]
    return L, layout(variant, size)


def abstraction_for(variant, n):
    """A DeepSets abstraction for the Combiner variants (alternating max and mean), max else."""
    if variant not in COMBINER:
        return "max"
    return "deepsets-max" if n % 2 == 0 else "deepsets-mean"


class ReferenceTest(unittest.TestCase):
    def test_every_variant_and_abstraction_equals_the_dense_reference(self):
        for n, variant in enumerate(ca.variants()):
            for abstraction in ca.abstractions():
                for L, size in ((12, 4), (12, 3), (10, 4)):
                    args = layout(variant, size)
                    if args.get("row_len") and L % size:
                        continue
                    q, k, v = qkv(2, 2, L, 5, seed=n, Dv=3)
                    phi = maps(variant, abstraction, 5, seed=n, **args)
                    out = ca.attention(q, k, v, variant, abstraction=abstraction, **args, **phi)
                    ref = ca.reference_attention(q, k, v, variant, abstraction=abstraction,
                                                 **args, **phi)
                    with self.subTest(variant=variant, abstraction=abstraction, L=L, **args):
                        self.assertEqual(out.shape, (2, 2, L, 3))
                        self.assertEqual(out.dtype, torch.float64)
                        self.assertLess((out - ref).abs().max().item(), 1e-10)

    def test_lower_precisions_are_close_to_the_reference(self):
        # The composition computes scores and softmax in float32 for bfloat16 / float16 inputs and
        # rounds the output to their dtype.
        for dtype, tolerance in ((torch.float32, 1e-5), (torch.bfloat16, 2e-2),
                                 (torch.float16, 3e-3)):
            for n, variant in enumerate(ca.variants()):
                args = layout(variant, 4)
                q, k, v = qkv(1, 2, 16, 8, seed=10 + n, dtype=dtype)
                phi = maps(variant, "deepsets-mean", 8, seed=n, dtype=dtype, **args)
                out = ca.attention(q, k, v, variant, abstraction="deepsets-mean", **args, **phi)
                ref = ca.reference_attention(*(t.double() for t in (q, k, v)), variant,
                                             abstraction="deepsets-mean", **args,
                                             **{name: p.double() for name, p in phi.items()})
                with self.subTest(dtype=dtype, variant=variant):
                    self.assertEqual(out.dtype, dtype)
                    self.assertLess((out.double() - ref).abs().max().item(), tolerance)


class ReferenceWithOurBackward(torch.autograd.Function):
    """The dense reference's output with the operator's backward (of `backward_variant`, the same
    variant unless a test says otherwise): gradcheck then compares the reference's finite
    differences with the operator's analytical gradients."""

    @staticmethod
    def forward(ctx, q, k, v, variant, layout_args, abstraction, phi_query, phi_key,
                backward_variant):
        ctx.save_for_backward(q, k, v, phi_query, phi_key)
        ctx.call = (backward_variant, layout_args.get("block", 0), layout_args.get("row_len", 0),
                    abstraction)
        return ca.reference_attention(q, k, v, variant, abstraction=abstraction, **layout_args,
                                      phi_query=phi_query, phi_key=phi_key)

    @staticmethod
    def backward(ctx, grad):
        q, k, v, phi_query, phi_key = ctx.saved_tensors
        grads = list(torch.ops.combiner.attention_backward(grad, q, k, v, *ctx.call, phi_query,
                                                           phi_key))
        d = grads[:3] + [None, None, None]
        d.append(grads.pop(3) if phi_query is not None else None)
        d.append(grads.pop(3) if phi_key is not None else None)
        return tuple(d) + (None,)


def reference_with_our_backward(variant, args, abstraction, backward_variant=None):
    def f(q, k, v, phi_query=None, phi_key=None):
        return ReferenceWithOurBackward.apply(q, k, v, variant, args, abstraction, phi_query,
                                              phi_key, backward_variant or variant)
    return f


class GradientTest(unittest.TestCase):
    # The operator's own gradcheck builds the full Jacobians; the sweep against the reference
    # (28 cases) checks a random projection of them (fast_mode), which a wrong gradient fails too.
    def test_gradcheck_every_variant(self):
        for n, variant in enumerate(ca.variants()):
            abstraction = abstraction_for(variant, n)
            L, args = grad_shape(variant)
            q, k, v = qkv(1, 2, L, 3, seed=20 + n, requires_grad=True)
            phi = maps(variant, abstraction, 3, seed=n, requires_grad=True, **args)
            names = sorted(phi)

            def f(q, k, v, *ps):
                return ca.attention(q, k, v, variant, abstraction=abstraction, **args,
                                    **dict(zip(names, ps)))
            with self.subTest(variant=variant, abstraction=abstraction):
                self.assertTrue(torch.autograd.gradcheck(f, (q, k, v, *[phi[m] for m in names])))

    def test_backward_against_the_reference_every_variant_and_abstraction(self):
        for n, variant in enumerate(ca.variants()):
            for abstraction in ca.abstractions() if variant in COMBINER else ["max"]:
                L, args = grad_shape(variant)
                q, k, v = qkv(1, 2, L, 3, seed=40 + n, requires_grad=True)
                phi = maps(variant, abstraction, 3, seed=n, requires_grad=True, **args)

                f = reference_with_our_backward(variant, args, abstraction)
                with self.subTest(variant=variant, abstraction=abstraction):
                    self.assertTrue(torch.autograd.gradcheck(
                        f, (q, k, v, phi.get("phi_query"), phi.get("phi_key")), fast_mode=True))

    def test_a_wrong_backward_fails_the_reference_gradcheck(self):
        # The comparison above can fail: vertical's reference against horizontal's backward.
        L, args = grad_shape("combiner-axial-vertical")
        q, k, v = qkv(1, 1, L, 3, seed=5, requires_grad=True)
        self.assertTrue(torch.autograd.gradcheck(
            reference_with_our_backward("combiner-axial-vertical", args, "max"), (q, k, v),
            fast_mode=True))
        self.assertFalse(torch.autograd.gradcheck(
            reference_with_our_backward("combiner-axial-vertical", args, "max",
                                        "combiner-axial-horizontal"),
            (q, k, v), fast_mode=True, raise_exception=False))

    def test_maps_get_gradients_and_unused_maps_get_zeros(self):
        q, k, v = qkv(1, 2, 12, 4, seed=3, requires_grad=True)
        phi = maps("combiner-fixed", "deepsets-max", 4, seed=3, requires_grad=True, block=4)
        ca.attention(q, k, v, "combiner-fixed", block=4, abstraction="deepsets-max",
                     **phi).sum().backward()
        for name, p in phi.items():
            self.assertGreater(p.grad.abs().sum().item(), 0, name)
        # One block: no spans, so no summary reads the maps.
        q, k, v = qkv(1, 2, 4, 4, seed=3, requires_grad=True)
        phi = maps("combiner-fixed", "deepsets-max", 4, seed=3, requires_grad=True, block=4)
        ca.attention(q, k, v, "combiner-fixed", block=4, abstraction="deepsets-max",
                     **phi).sum().backward()
        for name, p in phi.items():
            self.assertTrue(torch.equal(p.grad, torch.zeros(4, 4, dtype=torch.float64)), name)


    def test_backward_differentiates_the_kept_forward(self):
        # Eager calls keep the forward's graph: backward runs no forward op again (the recomputing
        # operator, attention_backward, does: the control), and gives that operator's gradients
        # bit for bit.
        def ops(fn):
            with torch.profiler.profile() as prof:
                fn()
            return {e.name for e in prof.events()}
        for n, variant in enumerate(ca.variants()):
            abstraction = abstraction_for(variant, n)
            L, args = grad_shape(variant)
            q, k, v = qkv(1, 2, L, 3, seed=80 + n, requires_grad=True)
            phi = maps(variant, abstraction, 3, seed=n, requires_grad=True, **args)
            g = torch.randn(1, 2, L, 3, dtype=torch.float64)
            inputs = [q, k, v] + [phi[m] for m in ("phi_query", "phi_key") if m in phi]
            def recomputing_backward():
                return torch.ops.combiner.attention_backward(
                    g, q, k, v, variant, args.get("block", 0), args.get("row_len", 0),
                    abstraction, phi.get("phi_query"), phi.get("phi_key"))
            out = ca.attention(q, k, v, variant, abstraction=abstraction, **args, **phi)
            backward_ops = ops(lambda: out.backward(g))
            expected = recomputing_backward()
            recompute_ops = ops(recomputing_backward)
            with self.subTest(variant=variant, abstraction=abstraction):
                self.assertIn("aten::_softmax", recompute_ops)
                self.assertNotIn("aten::_softmax", backward_ops)
                for x, want in zip(inputs, expected):
                    self.assertTrue(torch.equal(x.grad, want))

    def test_output_changed_in_place_keeps_its_gradients(self):
        # The output is the caller's own tensor: changing it in place (a residual added, say)
        # leaves the kept graph alone.
        q, k, v = qkv(1, 2, 12, 4, seed=8, requires_grad=True)
        for variant, args in (("combiner-fixed", {"block": 4}), ("full", {})):
            expected = torch.autograd.grad(
                (2 * ca.attention(q, k, v, variant, **args)).sum(), (q, k, v))
            out = ca.attention(q, k, v, variant, **args)
            out.mul_(2)
            with self.subTest(variant=variant):
                for got, want in zip(torch.autograd.grad(out.sum(), (q, k, v)), expected):
                    self.assertTrue(torch.allclose(got, want, rtol=0, atol=1e-12))

    def test_kept_graph_allows_a_retained_second_backward(self):
        q, k, v = qkv(1, 2, 12, 4, seed=6, requires_grad=True)
        out = ca.attention(q, k, v, "combiner-axial-vertical", row_len=4)
        out.sum().backward(retain_graph=True)
        first = q.grad.clone()
        out.sum().backward()
        self.assertTrue(torch.equal(q.grad, 2 * first))

    def test_no_second_derivative(self):
        q, k, v = qkv(1, 1, 8, 4, seed=4, requires_grad=True)
        out = ca.attention(q, k, v, "combiner-fixed", block=4)
        dq, = torch.autograd.grad(out.sum(), q, create_graph=True)
        with self.assertRaisesRegex(RuntimeError, "derivative for combiner::attention_backward "
                                    "is not implemented"):
            torch.autograd.grad(dq.sum(), k)


class OpCheckTest(unittest.TestCase):
    def test_opcheck_every_variant(self):
        for n, variant in enumerate(ca.variants()):
            abstraction = abstraction_for(variant, n)
            L, args = grad_shape(variant)
            for dtype in (torch.float64, torch.float32):
                q, k, v = qkv(2, 2, L, 4, seed=60 + n, dtype=dtype, requires_grad=True)
                phi = maps(variant, abstraction, 4, seed=n, dtype=dtype, requires_grad=True,
                           **args)
                result = torch.library.opcheck(torch.ops.combiner.attention.default,
                                               op_args(variant, abstraction, q, k, v, phi, **args))
                with self.subTest(variant=variant, abstraction=abstraction, dtype=dtype):
                    self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_opcheck_without_gradients_and_plain_abstraction(self):
        q, k, v = qkv(1, 2, 12, 4, seed=7)
        result = torch.library.opcheck(torch.ops.combiner.attention.default,
                                       op_args("combiner-mixture", "mean", q, k, v, {},
                                               row_len=4))
        self.assertEqual(set(result.values()), {"SUCCESS"}, result)


if __name__ == "__main__":
    unittest.main()
