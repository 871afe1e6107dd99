"""The operator on a CUDA device (skipped, saying so, where torch sees none): the fused kernels
run for the variants that have them, and their outputs and gradients (the fused backward) match
the dense float64 reference and the operator's float64 CPU gradients within the tolerances of
docs/ATTENTION.md (max |diff| / max(1, max |expected|): float32 1e-4 outputs, 1e-3 gradients;
bfloat16 2e-2 and 5e-2); opcheck on CUDA tensors; a compiled call."""
import unittest

import torch

import combiner_attention as ca
from cases import layout, maps, op_args, qkv

FUSED = ["combiner-fixed", "combiner-axial-rowmajor", "combiner-axial-vertical",
         "combiner-axial-horizontal", "combiner-mixture"]
TOLERANCES = {torch.float32: (1e-4, 1e-3), torch.bfloat16: (2e-2, 5e-2)}


def relative(got, expected):
    return ((got.double().cpu() - expected).abs().max() / max(1.0, expected.abs().max())).item()


@unittest.skipUnless(torch.cuda.is_available(), "torch sees no CUDA device")
class CudaTest(unittest.TestCase):
    def test_fused_variants_match_the_reference(self):
        for n, variant in enumerate(FUSED):
            for D in (32, 64):
                for dtype, (out_tol, grad_tol) in TOLERANCES.items():
                    abstraction = "deepsets-max" if n % 2 else "max"
                    args = layout(variant, 16)
                    q, k, v = qkv(2, 2, 256, D, seed=n)
                    phi = maps(variant, abstraction, D, seed=n, **args)
                    g = torch.randn(2, 2, 256, D, dtype=torch.float64,
                                    generator=torch.Generator().manual_seed(n))
                    # The kernels' inputs, rounded to dtype; the references see the same values.
                    low = [t.to(dtype) for t in (q, k, v, g)]
                    exact = [t.double().requires_grad_() for t in low[:3]]
                    exact_phi = {m: p.clone().requires_grad_() for m, p in phi.items()}
                    with torch.no_grad():
                        expected = ca.reference_attention(*exact, variant,
                                                          abstraction=abstraction, **args, **phi)
                    cpu_out = ca.attention(*exact, variant, abstraction=abstraction, **args,
                                           **exact_phi)
                    expected_grads = torch.autograd.grad(
                        cpu_out, exact + list(exact_phi.values()), low[3].double())
                    device = [t.cuda().requires_grad_() for t in low[:3]]
                    device_phi = {m: p.detach().cuda().requires_grad_() for m, p in phi.items()}
                    with self.subTest(variant=variant, D=D, dtype=dtype):
                        self.assertEqual(ca.path(device[0], device[2], variant),
                                         "fused CUDA kernels")
                        out = ca.attention(*device, variant, abstraction=abstraction, **args,
                                           **device_phi)
                        self.assertLessEqual(relative(out, expected), out_tol)
                        grads = torch.autograd.grad(out, device + list(device_phi.values()),
                                                    low[3].cuda())
                        for got, want in zip(grads, expected_grads):
                            self.assertLessEqual(relative(got, want), grad_tol)

    def test_backward_reruns_no_forward_kernel(self):
        # Eager calls keep the fused call's own saved tensors: backward launches no forward
        # kernel, and its gradients are those of the recomputing operator, attention_backward.
        for variant in FUSED:
            args = layout(variant, 32)
            q, k, v = (t.cuda().requires_grad_() for t in qkv(2, 2, 512, 64, seed=3,
                                                               dtype=torch.bfloat16))
            g = torch.randn_like(q)
            out = ca.attention(q, k, v, variant, **args)
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
                out.backward(g)
                torch.cuda.synchronize()
            kernels = [e.name for e in p.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            expected = torch.ops.combiner.attention_backward(
                g, q, k, v, variant, args.get("block", 0), args.get("row_len", 0), "max", None,
                None)
            with self.subTest(variant=variant):
                self.assertTrue(any("backward" in name for name in kernels), kernels)
                self.assertFalse(any("forward_kernel" in name for name in kernels), kernels)
                for x, want in zip((q, k, v), expected):
                    self.assertLessEqual(relative(x.grad, want.double().cpu()), 1e-2)

    def test_opcheck_on_cuda(self):
        for variant in ("combiner-fixed", "combiner-axial-vertical"):
            args = layout(variant, 8)
            q, k, v = (t.cuda().requires_grad_() for t in qkv(1, 2, 64, 32, seed=1,
                                                               dtype=torch.float32))
            phi = {m: p.cuda().requires_grad_() for m, p in
                   maps(variant, "deepsets-mean", 32, seed=1, dtype=torch.float32,
                        **args).items()}
            result = torch.library.opcheck(torch.ops.combiner.attention.default,
                                           op_args(variant, "deepsets-mean", q, k, v, phi,
                                                   **args))
            with self.subTest(variant=variant):
                self.assertEqual(set(result.values()), {"SUCCESS"}, result)

    def test_compiled_call_equals_eager(self):
        q, k, v = (t.cuda() for t in qkv(2, 4, 512, 64, seed=2, dtype=torch.bfloat16))

        def f(q, k, v):
            return ca.attention(q * 2, k, v, "combiner-axial-rowmajor", row_len=32) + 1
        compiled = torch.compile(f, fullgraph=True)
        # Inductor's fused multiply and add round once where eager rounds twice: a bfloat16 ulp.
        self.assertLessEqual((compiled(q, k, v).float() - f(q, k, v).float()).abs().max().item(),
                             1e-2)


if __name__ == "__main__":
    unittest.main()
