"""A two-layer model on CombinerAttention (combiner-axial-rowmajor with deepsets-max, then
combiner-fixed with deepsets-mean) under torch.compile(fullgraph=True), Inductor on the CPU: it
compiles with no graph break, each layer's attention is one combiner::attention node of the
traced graph, and four AdamW steps on one batch give eager's (falling) losses and parameters."""
import unittest

import torch
from torch import nn

import combiner_attention as ca

VOCAB, WIDTH, HEADS, L = 16, 32, 2, 64


class Block(nn.Module):
    def __init__(self, variant, **options):
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH)
        self.proj = nn.Linear(WIDTH, WIDTH)
        self.attention = ca.CombinerAttention(variant, WIDTH // HEADS, **options)
        self.mlp = nn.Sequential(nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 2 * WIDTH), nn.GELU(),
                                 nn.Linear(2 * WIDTH, WIDTH))

    def forward(self, x):
        B = x.shape[0]
        q, k, v = self.qkv(self.norm(x)).view(B, L, 3, HEADS, -1).permute(2, 0, 3, 1, 4)
        x = x + self.proj(self.attention(q, k, v).transpose(1, 2).reshape(B, L, WIDTH))
        return x + self.mlp(x)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.Sequential(
            Block("combiner-axial-rowmajor", row_len=8, abstraction="deepsets-max"),
            Block("combiner-fixed", block=8, abstraction="deepsets-mean"))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def train(compile_backend=None, steps=4):
    torch.manual_seed(0)
    model = Model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    step = model if compile_backend is None else torch.compile(model, fullgraph=True,
                                                               backend=compile_backend)
    x = torch.randint(0, VOCAB, (2, L), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(steps):  # one batch, learnt by heart
        logits = step(x)[:, :-1]
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, model


class CompileTest(unittest.TestCase):
    def test_compiled_model_trains_as_eager(self):
        torch._dynamo.reset()
        graphs = []

        def inductor_recording_graphs(gm, example_inputs):
            graphs.append(gm)
            from torch._inductor.compile_fx import compile_fx
            return compile_fx(gm, example_inputs)

        eager_losses, eager = train()
        compiled_losses, compiled = train(inductor_recording_graphs)
        self.assertEqual(len(graphs), 1)  # one graph: fullgraph, and no recompilation
        targets = [node.target for node in graphs[0].graph.nodes if node.op == "call_function"]
        attention_nodes = [t for t in targets if "combiner.attention" in str(t)]
        self.assertEqual(len(attention_nodes), 2, targets)
        print(f"  eager losses {eager_losses}\n  compiled     {compiled_losses}")
        for e, c in zip(eager_losses, compiled_losses):
            self.assertAlmostEqual(e, c, delta=1e-5)
        for (name, p), q in zip(eager.named_parameters(), compiled.parameters()):
            self.assertLess((p - q).abs().max().item(), 1e-5, name)
        self.assertGreater(eager_losses[0] - eager_losses[-1], 0.01)  # it does train


if __name__ == "__main__":
    unittest.main()
