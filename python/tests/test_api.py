"""The Python side: one-line errors naming the bad value, CombinerAttention's maps (initialised as
the trainer's SpanSummary initialises them), the caller's random stream left alone, empty
batches, path()."""
import math
import unittest

import torch

import combiner_attention as ca
from cases import qkv


class ErrorTest(unittest.TestCase):
    def assertOneLine(self, kind, needle, call):
        with self.assertRaises(kind) as caught:
            call()
        message = str(caught.exception)
        self.assertIn(needle, message)
        self.assertNotIn("\n", message)

    def test_bad_options(self):
        q, k, v = qkv(1, 2, 12, 4, seed=0, dtype=torch.float32)
        self.assertOneLine(ValueError, "variant: unknown variant 'nope', expected one of: full,",
                           lambda: ca.attention(q, k, v, "nope"))
        self.assertOneLine(ValueError, "abstraction: unknown abstraction 'min'",
                           lambda: ca.attention(q, k, v, "combiner-fixed", block=4,
                                                abstraction="min"))
        self.assertOneLine(ValueError, "block: must be > 0 for 'fixed', got 0",
                           lambda: ca.attention(q, k, v, "fixed"))
        self.assertOneLine(ValueError, "block: must be > 0 for 'combiner-fixed', got -2",
                           lambda: ca.attention(q, k, v, "combiner-fixed", block=-2))
        self.assertOneLine(ValueError, "row_len: must be > 0 and divide the sequence length 12 "
                           "for 'axial', got 5", lambda: ca.attention(q, k, v, "axial", row_len=5))
        self.assertOneLine(ValueError, "block: 'full' reads no block",
                           lambda: ca.attention(q, k, v, "full", block=4))
        self.assertOneLine(ValueError, "row_len: 'combiner-fixed' reads no row_len",
                           lambda: ca.attention(q, k, v, "combiner-fixed", block=4, row_len=4))
        self.assertOneLine(TypeError, "block: expected an int or None, got float 4.0",
                           lambda: ca.attention(q, k, v, "fixed", block=4.0))
        self.assertOneLine(TypeError, "variant: expected a str, got int 3",
                           lambda: ca.attention(q, k, v, 3))

    def test_bad_tensors(self):
        q, k, v = qkv(1, 2, 12, 4, seed=0, dtype=torch.float32)
        self.assertOneLine(ValueError, "q: expected [B, H, L, D] (4 dims), got [2, 12, 4]",
                           lambda: ca.attention(q[0], k, v, "full"))
        self.assertOneLine(ValueError, "k: expected q's shape [1, 2, 12, 4], got [1, 1, 12, 4]",
                           lambda: ca.attention(q, k[:, :1], v, "full"))
        self.assertOneLine(ValueError, "v: expected [B, H, L, Dv] with q's B, H, L [1, 2, 12], "
                           "got [1, 2, 3, 4]", lambda: ca.attention(q, k, v[:, :, :3], "full"))
        self.assertOneLine(ValueError, "sequence length must be > 0, got 0",
                           lambda: ca.attention(q[:, :, :0], k[:, :, :0], v[:, :, :0], "full"))
        self.assertOneLine(ValueError, "q: expected D > 0",
                           lambda: ca.attention(q[..., :0], k[..., :0], v, "full"))
        self.assertOneLine(TypeError, "q: expected a floating-point dtype (float32, float64, "
                           "bfloat16, float16), got Long",
                           lambda: ca.attention(q.long(), k.long(), v.long(), "full"))
        self.assertOneLine(TypeError, "k, v: expected q's dtype Float, got Double and Float",
                           lambda: ca.attention(q, k.double(), v, "full"))
        self.assertOneLine(ValueError, "k, v: expected q's device cpu, got meta and cpu",
                           lambda: ca.attention(q, k.to("meta"), v, "full"))
        self.assertOneLine(TypeError, "q: expected a torch.Tensor, got list",
                           lambda: ca.attention([1.0], k, v, "full"))

    def test_bad_maps(self):
        q, k, v = qkv(1, 2, 12, 4, seed=0, dtype=torch.float32)
        phi = torch.randn(4, 4)
        self.assertOneLine(ValueError, "phi_query: 'combiner-fixed' with abstraction "
                           "'deepsets-max' learns phi_query: pass a [D, D] = [4, 4] tensor",
                           lambda: ca.attention(q, k, v, "combiner-fixed", block=4,
                                                abstraction="deepsets-max", phi_key=phi))
        self.assertOneLine(ValueError, "phi_query: 'combiner-axial-rowmajor' with abstraction "
                           "'deepsets-max' learns no phi_query",
                           lambda: ca.attention(q, k, v, "combiner-axial-rowmajor", row_len=4,
                                                abstraction="deepsets-max", phi_query=phi,
                                                phi_key=phi))
        self.assertOneLine(ValueError, "phi_key: 'combiner-fixed' with abstraction 'max' learns "
                           "no phi_key", lambda: ca.attention(q, k, v, "combiner-fixed", block=4,
                                                              phi_key=phi))
        self.assertOneLine(ValueError, "phi_key: expected [D, D] = [4, 4], got [3, 4]",
                           lambda: ca.attention(q, k, v, "combiner-axial-rowmajor", row_len=4,
                                                abstraction="deepsets-mean", phi_key=phi[:3]))
        self.assertOneLine(TypeError, "phi_key: expected a floating-point dtype, got Long",
                           lambda: ca.attention(q, k, v, "combiner-axial-rowmajor", row_len=4,
                                                abstraction="deepsets-mean", phi_key=phi.long()))

    def test_bad_module_options(self):
        self.assertOneLine(ValueError, "variant: unknown variant 'axial-rowmajor'",
                           lambda: ca.CombinerAttention("axial-rowmajor", 8, row_len=4))
        self.assertOneLine(ValueError, "row_len: must be > 0 for 'combiner-axial-rowmajor', got 0",
                           lambda: ca.CombinerAttention("combiner-axial-rowmajor", 8))
        self.assertOneLine(ValueError, "head_dim: expected > 0, got 0",
                           lambda: ca.CombinerAttention("full", 0))
        layer = ca.CombinerAttention("combiner-axial-rowmajor", 4, row_len=5)
        q, k, v = qkv(1, 2, 12, 4, seed=0, dtype=torch.float32)
        self.assertOneLine(ValueError, "row_len: must be > 0 and divide the sequence length 12",
                           lambda: layer(q, k, v))


class ModuleTest(unittest.TestCase):
    def test_maps_are_drawn_as_the_trainer_draws_them(self):
        torch.manual_seed(3)
        layer = ca.CombinerAttention("combiner-fixed", 4, block=2, abstraction="deepsets-max")
        torch.manual_seed(3)
        query, key = torch.randn(4, 4) / math.sqrt(4), torch.randn(4, 4) / math.sqrt(4)
        self.assertEqual([n for n, _ in layer.named_parameters()], ["phi_query", "phi_key"])
        self.assertTrue(torch.equal(layer.phi_query, query))
        self.assertTrue(torch.equal(layer.phi_key, key))

    def test_which_variants_learn_which_maps(self):
        for variant in ca.variants():
            args = {"block": 4} if "fixed" in variant else {"row_len": 4} if (
                variant == "axial" or variant == "combiner-mixture" or "axial-" in variant) else {}
            for abstraction in ca.abstractions():
                names = [n for n, _ in ca.CombinerAttention(variant, 4, abstraction=abstraction,
                                                            **args).named_parameters()]
                if not (variant.startswith("combiner-") and abstraction.startswith("deepsets")):
                    expected = []
                elif variant == "combiner-axial-rowmajor":
                    expected = ["phi_key"]  # its local query is q itself
                else:
                    expected = ["phi_query", "phi_key"]
                with self.subTest(variant=variant, abstraction=abstraction):
                    self.assertEqual(names, expected)

    def test_module_trains_its_maps(self):
        layer = ca.CombinerAttention("combiner-axial-vertical", 4, row_len=4,
                                     abstraction="deepsets-mean").double()
        q, k, v = qkv(2, 2, 16, 4, seed=1, requires_grad=True)
        expected = ca.attention(q, k, v, "combiner-axial-vertical", row_len=4,
                                abstraction="deepsets-mean", phi_query=layer.phi_query,
                                phi_key=layer.phi_key)
        out = layer(q, k, v)
        self.assertTrue(torch.equal(out, expected))
        out.square().sum().backward()
        for name, p in layer.named_parameters():
            self.assertGreater(p.grad.abs().sum().item(), 0, name)


class BehaviourTest(unittest.TestCase):
    def test_calls_leave_the_random_stream_alone(self):
        q, k, v = qkv(1, 2, 12, 4, seed=0, requires_grad=True)
        phi = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
        torch.manual_seed(11)
        expected = torch.rand(5)
        torch.manual_seed(11)
        ca.attention(q, k, v, "combiner-logsparse", abstraction="deepsets-max", phi_query=phi,
                     phi_key=phi).sum().backward()
        self.assertTrue(torch.equal(torch.rand(5), expected))

    def test_empty_batch_and_heads(self):
        for shape in ((0, 2, 12, 4), (2, 0, 12, 4)):
            q, k, v = (torch.randn(*shape, requires_grad=True) for _ in range(3))
            out = ca.attention(q, k, v, "combiner-axial-horizontal", row_len=4)
            self.assertEqual(out.shape, shape)
            out.sum().backward()
            self.assertEqual(q.grad.shape, shape)

    def test_path(self):
        q, k, v = qkv(1, 2, 12, 64, seed=0, dtype=torch.float32)
        self.assertEqual(ca.path(q, v, "full"), "LibTorch path")
        self.assertEqual(ca.path(q, v, "combiner-fixed"), "LibTorch path (CPU tensors)")
        with self.assertRaises(ValueError):
            ca.path(q, v, "nope")


if __name__ == "__main__":
    unittest.main()
