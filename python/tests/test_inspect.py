"""The operator against the trainer's own fast path as combiner-inspect runs it (the binary given
to run.py --inspect): the same float32 inputs from .npy files, and for the DeepSets abstractions
the maps CombinerAttention draws after torch.manual_seed(0), which must be the ones
combiner-inspect's module draws after torch::manual_seed(0). Both run on one thread."""
import os
import subprocess
import tempfile
import unittest

import numpy as np
import torch

import combiner_attention as ca
from cases import COMBINER, layout, qkv

INSPECT = None  # run.py --inspect


class InspectTest(unittest.TestCase):
    def test_every_variant_equals_combiner_inspect(self):
        if INSPECT is None:
            self.skipTest("no combiner-inspect binary given (run.py --inspect PATH)")
        abstractions = ca.abstractions()
        torch.set_num_threads(1)
        for n, variant in enumerate(ca.variants()):
            # Each Combiner variant meets a DeepSets abstraction; the rest cycle through all four.
            abstraction = abstractions[2 + n % 2] if variant in COMBINER else abstractions[n % 4]
            args = layout(variant, 8 if "fixed" in variant else 6)
            q, k, v = qkv(1, 3, 48, 16, seed=100 + n, dtype=torch.float32)
            torch.manual_seed(0)
            layer = ca.CombinerAttention(variant, 16, abstraction=abstraction, **args)
            with torch.no_grad():
                ours = layer(q, k, v)[0]
            theirs = self.inspect(variant, abstraction, args, q[0], k[0], v[0])
            error = (ours - theirs).abs().max().item()
            with self.subTest(variant=variant, abstraction=abstraction, **args):
                self.assertLessEqual(error, 1e-6)
                print(f"  {variant} {abstraction} {args}: max |ours - combiner-inspect| "
                      f"{error:.1e}")

    def inspect(self, variant, abstraction, args, q, k, v):
        with tempfile.TemporaryDirectory() as tmp:
            paths = {n: os.path.join(tmp, n + ".npy") for n in ("q", "k", "v", "out")}
            for n, t in zip("qkv", (q, k, v)):
                np.save(paths[n], t.numpy())
            flags = [f"--{key.replace('_', '-')}={value}" for key, value in args.items()]
            run = subprocess.run(
                [INSPECT, "--variant", variant, "--q", paths["q"], "--k", paths["k"], "--v",
                 paths["v"], "--out", paths["out"], "--abstraction", abstraction, "--threads",
                 "1", *flags], capture_output=True, text=True)
            self.assertEqual(run.returncode, 0, run.stderr)
            return torch.from_numpy(np.load(paths["out"]))


if __name__ == "__main__":
    unittest.main()
