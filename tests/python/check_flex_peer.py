#!/usr/bin/env python3
"""Checks scripts/peer_flex.py (Combiner-Fixed and the Combiner-Axial variants in FlexAttention)
against a float64 dense reference written here from docs/ATTENTION.md, on the CPU, before the
peer ever runs on a GPU. Exits 1 naming the case on any mismatch.

The reference builds the effective matrix A position by position (direct set, spans, each
span's key abstraction and local query, one softmax), independent of the flex code, and checks
A's own properties (rows sum to 1, causal, full support). Against it, max |error|:
  - eager flex_attention in float64: 1e-10; in float32: 2e-5 (inputs rounded to float32);
  - outputs and gradients of q, k, v (and the DeepSets maps) in float64, with flex_attention
    replaced by a dense masked softmax over the same BlockMasks (CPU flex has no backward):
    1e-9; this checks our composition's gradients (summaries, concatenation, LSE merge), not
    the flex kernel's;
  - torch.compile(flex_attention) in float32 for combiner-fixed (the CPU compile runs inference
    only, float32, without the log-sum-exp that combiner-axial-rowmajor merges by): 2e-5.
With --inspect PATH (combiner-inspect; ctest passes it), our C++ fast path on the same float32
inputs must match the reference within 2e-5 (the C++ tests hold it to the C++ reference within
1e-5), which ties this reference to reference.cpp. (No binary writes the dense reference's
output itself: combiner-inspect writes the fast path's and draws the reference as a picture.)
The peer-flex model of scripts/peer_gpu.py takes one training step's forward and backward on the
CPU (dense stand-in); with --bench PATH (combiner-bench) its parameter count, DeepSets maps
included, must equal ours for the same configuration. Runs with pip's torch 2.11 (the GPU
machines' version).
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
import warnings

# One thread, and Inductor compiling in this process (its worker processes would not see
# inductor_cpu's LIBDIR fix): set before torch is imported.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import inductor_cpu  # noqa: E402
import peer_flex  # noqa: E402
import peer_gpu  # noqa: E402

FAILURES = []


def expect(ok, message):
    print(("ok    " if ok else "FAIL  ") + message, flush=True)
    if not ok:
        FAILURES.append(message)


# -- the spec's definition, position by position ------------------------------------------------
def plan(variant, i, layout):
    """(direct positions, [(span positions, local query position or None)]) of position i."""
    if variant == "combiner-fixed":
        s = layout
        direct = list(range(i // s * s, i + 1))
        return direct, [(list(range(b * s, (b + 1) * s)), None) for b in range(i // s)]
    W = layout
    row, col = divmod(i, W)
    direct = list(range(row * W, i + 1))
    if variant == "combiner-axial-rowmajor":
        return direct, [(list(range(r * W, (r + 1) * W)), r * W + col) for r in range(row)]
    direct += [r * W + col for r in range(row)]  # the axial support: own row and own column
    if variant == "combiner-axial-vertical":
        return direct, [([r * W + c for r in range(row)], None)
                        for c in range(W) if c != col and row > 0]
    spans = []  # combiner-axial-horizontal: each earlier row's prefix and suffix beside col
    for r in range(row):
        if col > 0:
            spans.append((list(range(r * W, r * W + col)), None))
        if col < W - 1:
            spans.append((list(range(r * W + col + 1, (r + 1) * W)), None))
    return direct, spans


def reference_matrix(variant, layout, abstraction, q, k, phi_q=None, phi_k=None):
    """A [B, H, L, L] float64 (differentiable in q, k and the maps) from q, k [B, H, L, D]."""
    B, H, L, D = q.shape
    is_max = abstraction.endswith("max")

    def pool(x, positions, w):
        x = x[positions]
        if w is not None:
            x = torch.relu(x @ w.t())
        return x.max(0).values if is_max else x.mean(0)

    rows = []
    for b in range(B):
        for h in range(H):
            qh, kh = q[b, h], k[b, h]
            for i in range(L):
                direct, spans = plan(variant, i, layout)
                scores = [kh[direct] @ qh[i]]
                for positions, _ in spans:
                    scores.append((pool(kh, positions, phi_k) @ qh[i]).reshape(1))
                w = torch.softmax(torch.cat(scores) / math.sqrt(D), 0)
                row = [torch.zeros(L, dtype=q.dtype).index_put((torch.tensor(direct),),
                                                               w[:len(direct)])]
                for r, (positions, query) in enumerate(spans):
                    local_q = qh[query] if query is not None else pool(qh, positions, phi_q)
                    local = torch.softmax(kh[positions] @ local_q / math.sqrt(D), 0)
                    row.append(torch.zeros(L, dtype=q.dtype).index_put(
                        (torch.tensor(positions),), w[len(direct) + r] * local))
                rows.append(torch.stack(row).sum(0))
    return torch.stack(rows).view(B, H, L, L)


def check_matrix(name, a):
    L = a.shape[-1]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    expect((a.sum(-1) - 1).abs().max().item() < 1e-12, f"{name}: reference rows sum to 1")
    expect(bool((a[..., ~causal] == 0).all()) and bool((a[..., causal] > 0).all()),
           f"{name}: reference A[i, j] = 0 for j > i and > 0 for j <= i")


# -- flex_attention stand-ins -------------------------------------------------------------------
def make_dense_flex():
    """flex_attention's contract as a dense masked softmax over block_mask.mask_mod, with
    autograd through it: out [B, H, Lq, Dv] and lse [B, H, Lq] (-inf, out 0, where nothing is
    allowed). The mask is evaluated per head (horizontal's depends on it)."""
    from torch.nn.attention.flex_attention import AuxOutput

    def flex(q, k, v, block_mask=None, scale=None, return_aux=None):
        H, Lq, Lk = q.shape[1], q.shape[-2], k.shape[-2]
        allowed = block_mask.mask_mod(0, torch.arange(H).view(H, 1, 1),
                                      torch.arange(Lq).view(1, Lq, 1),
                                      torch.arange(Lk).view(1, 1, Lk)).expand(H, Lq, Lk)
        scores = ((q @ k.transpose(-2, -1)) * scale).masked_fill(~allowed, float("-inf"))
        lse = torch.logsumexp(scores, -1)
        out = torch.exp(scores - lse.masked_fill(~torch.isfinite(lse), 0).unsqueeze(-1)) @ v
        return out if return_aux is None else (out, AuxOutput(lse=lse))
    return flex


# -- cases ----------------------------------------------------------------------------------------
def inputs(B, H, L, D, seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, D, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]


def make_module(variant, layout, abstraction, D, flex, seed):
    torch.manual_seed(seed)
    return peer_flex.CombinerFlex(variant, layout, abstraction, D, flex=flex).double()


def maps(module):
    return module.phi_query, module.phi_key


def forward_case(variant, L, layout, abstraction, B, flex, dtype, tol, label, seed):
    D, H = 16, 2
    module = make_module(variant, layout, abstraction, D, flex, seed)
    q, k, v = inputs(B, H, L, D, seed)
    name = f"{label} {variant} L {L} {'s' if variant == 'combiner-fixed' else 'W'} {layout} " \
        f"{abstraction} B {B}"
    with torch.no_grad():
        a = reference_matrix(variant, layout, abstraction, q, k, *[
            None if m is None else m.detach() for m in maps(module)])
        expected = a @ v
        module = module.to(dtype)
        got = module(q.to(dtype), k.to(dtype), v.to(dtype)).double()
    error = (got - expected).abs().max().item()
    expect(error <= tol, f"{name}: max |out - reference| {error:.2e} <= {tol:g}")
    return a


def gradient_case(variant, L, layout, abstraction, seed):
    D, H, B = 16, 2, 1
    module = make_module(variant, layout, abstraction, D, make_dense_flex(), seed)
    q, k, v = (t.requires_grad_() for t in inputs(B, H, L, D, seed))
    g = torch.randn(B, H, L, D, generator=torch.Generator().manual_seed(seed + 1),
                    dtype=torch.float64)
    params = [p for p in maps(module) if p is not None]
    ours = torch.autograd.grad((module(q, k, v) * g).sum(), [q, k, v] + params)
    a = reference_matrix(variant, layout, abstraction, q, k, *maps(module))
    theirs = torch.autograd.grad(((a @ v) * g).sum(), [q, k, v] + params)
    names = ["q", "k", "v"] + [f"phi_{'query' if p is module.phi_query else 'key'}" for p in params]
    error = max((x - y).abs().max().item() for x, y in zip(ours, theirs))
    expect(error <= 1e-9, f"dense-flex float64 gradients {variant} L {L} layout {layout} "
           f"{abstraction} ({', '.join(names)}): max |error| {error:.2e} <= 1e-09")


def compiled_case(L, s, seed):
    """torch.compile(flex_attention) on the CPU, float32, inference (combiner-fixed)."""
    from torch.nn.attention.flex_attention import flex_attention
    start = time.perf_counter()
    forward_case("combiner-fixed", L, s, "max", 1, torch.compile(flex_attention, dynamic=False),
                 torch.float32, 2e-5, "compiled flex float32", seed)
    print(f"      (compile and run {time.perf_counter() - start:.1f} s)")


def inspect_case(binary, variant, L, layout, abstraction, seed):
    """Our C++ fast path (combiner-inspect, float32, batch 1) against the reference."""
    H, D = 2, 16
    q, k, v = (t.float() for t in inputs(1, H, L, D, seed))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {n: os.path.join(tmp, n + ".npy") for n in ("q", "k", "v", "out")}
        for n, t in zip("qkv", (q, k, v)):
            np.save(paths[n], t[0].numpy())
        flag = "--block" if variant == "combiner-fixed" else "--row-len"
        run = subprocess.run([binary, "--variant", variant, "--q", paths["q"], "--k", paths["k"],
                              "--v", paths["v"], "--out", paths["out"], flag, str(layout),
                              "--abstraction", abstraction, "--threads", "1"],
                             capture_output=True, text=True)
        if run.returncode != 0:
            expect(False, f"{binary} {variant}: exit {run.returncode}: {run.stderr.strip()}")
            return
        ours = torch.from_numpy(np.load(paths["out"])).double()
    qd, kd, vd = q.double(), k.double(), v.double()
    expected = (reference_matrix(variant, layout, abstraction, qd, kd) @ vd)[0]
    error = (ours - expected).abs().max().item()
    expect(error <= 2e-5, f"combiner-inspect (C++ fast path, float32) {variant} L {L} layout "
           f"{layout} {abstraction}: max |out - this reference| {error:.2e} <= 2e-05")


def model_case(bench, variant, abstraction):
    """peer_gpu.py's peer-flex model, tiny: one step's loss is finite and near log2(256) = 8
    bits, every parameter (the DeepSets maps too) gets a gradient, and with `bench` its count
    equals combiner-bench's for the same configuration."""
    config = os.path.join(ROOT, "configs", f"fashion_mnist_{variant.replace('-', '_')}.yaml")
    argv = ["--system", "peer-flex", "--attention", variant, "--abstraction", abstraction,
            "--layers", "2", "--width", "16", "--heads", "2", "--mlp", "3", "--length", "784",
            "--device", "cpu"]
    args = peer_gpu.parse_args(argv)
    flex = make_dense_flex()
    torch.manual_seed(0)
    model = peer_gpu.ImageTransformer(
        args.layers, args.width, args.heads, args.mlp, peer_gpu.IMAGES[784][1:], 0.0, False,
        lambda: peer_flex.CombinerFlex(variant, args.layout, abstraction,
                                       args.width // args.heads, flex=flex))
    x = torch.randint(0, peer_gpu.VOCAB, (1, 784), dtype=torch.uint8)
    loss = peer_gpu.mean_bits(model(x), x)
    loss.backward()
    name = f"peer-flex model {variant} {abstraction} (layout {args.layout})"
    expect(abs(loss.item() - 8.0) < 0.5, f"{name}: first loss {loss.item():.3f} bits near 8")
    missing = [n for n, t in model.named_parameters() if t.grad is None]
    expect(not missing, f"{name}: every parameter has a gradient (missing: {missing})")
    count = sum(t.numel() for t in model.parameters())
    if not bench:
        return
    with tempfile.TemporaryDirectory() as tmp:
        csv_path = os.path.join(tmp, "ours.csv")
        run = subprocess.run(
            [bench, "train", "--config", config, "--steps", "1", "--warmup", "0", "--threads",
             "1", "--matmul-size", "64", "--set", "model.layers=2", "--set", "model.width=16",
             "--set", "model.heads=2", "--set", "model.mlp_ratio=3", "--set",
             f"model.attention.abstraction={abstraction}", "--set", "train.batch_size=1",
             "--set", "train.grad_accum=1", "--out", csv_path], capture_output=True, text=True)
        if run.returncode != 0:
            expect(False, f"{bench} train {config}: exit {run.returncode}: "
                   f"{run.stderr.strip()[-500:]}")
            return
        with open(csv_path) as f:
            header, row = f.read().splitlines()[:2]
        ours = int(dict(zip(header.split(","), row.split(",")))["parameters"])
    expect(count == ours, f"{name}: {count} parameters, combiner-bench {ours}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inspect", help="combiner-inspect binary: tie the reference to the C++ one")
    p.add_argument("--bench", help="combiner-bench binary: compare the model's parameter count")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile case")
    args = p.parse_args(argv)
    for flag, path in (("--inspect", args.inspect), ("--bench", args.bench)):
        if path and not os.access(path, os.X_OK):
            p.error(f"{flag}: '{path}' is not an executable file")
    torch.set_num_threads(1)
    note = inductor_cpu.use_own_inductor()
    if note:
        print(f"note: {note}")
    warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
    from torch.nn.attention.flex_attention import flex_attention
    start = time.perf_counter()
    print(f"torch {torch.__version__}; tolerances are max |error| against the float64 reference")

    # Layouts with a short last block (L = 100, s = 16; L = 200, s = 12), L not a power of two,
    # rows of 1..16; every abstraction meets every variant.
    cases = [("combiner-fixed", 48, 8, "max", 1), ("combiner-fixed", 100, 16, "mean", 2),
             ("combiner-fixed", 200, 12, "deepsets-max", 1), ("combiner-fixed", 60, 16,
                                                              "deepsets-mean", 2),
             ("combiner-axial-rowmajor", 48, 8, "max", 2),
             ("combiner-axial-rowmajor", 120, 12, "mean", 1),
             ("combiner-axial-rowmajor", 192, 16, "deepsets-max", 1),
             ("combiner-axial-rowmajor", 64, 16, "deepsets-mean", 2),
             ("combiner-axial-vertical", 48, 8, "max", 2),
             ("combiner-axial-vertical", 60, 12, "mean", 1),
             ("combiner-axial-vertical", 64, 16, "deepsets-max", 1),
             ("combiner-axial-vertical", 24, 1, "deepsets-mean", 1),
             ("combiner-axial-horizontal", 48, 8, "max", 1),
             ("combiner-axial-horizontal", 64, 16, "mean", 1),
             ("combiner-axial-horizontal", 60, 12, "deepsets-max", 2),
             ("combiner-axial-horizontal", 24, 2, "deepsets-mean", 1)]
    for n, (variant, L, layout, abstraction, B) in enumerate(cases):
        a = forward_case(variant, L, layout, abstraction, B, flex_attention, torch.float64, 1e-10,
                         "eager flex float64", n)
        check_matrix(f"{variant} L {L} layout {layout} {abstraction}", a)
        forward_case(variant, L, layout, abstraction, B, flex_attention, torch.float32, 2e-5,
                     "eager flex float32", n)
    for n, (variant, L, layout, abstraction) in enumerate([
            ("combiner-fixed", 40, 8, "deepsets-max"), ("combiner-fixed", 36, 16, "mean"),
            ("combiner-axial-rowmajor", 48, 8, "deepsets-mean"),
            ("combiner-axial-rowmajor", 32, 16, "max"),
            ("combiner-axial-vertical", 48, 8, "deepsets-mean"),
            ("combiner-axial-vertical", 36, 6, "max"),
            ("combiner-axial-horizontal", 40, 8, "deepsets-max"),
            ("combiner-axial-horizontal", 36, 6, "mean")]):
        gradient_case(variant, L, layout, abstraction, 100 + n)

    # One layer of the fixed variant fits one block (no spans); a single row (no spans).
    forward_case("combiner-fixed", 12, 16, "max", 1, flex_attention, torch.float64, 1e-10,
                 "eager flex float64 (no span)", 7)
    for variant in peer_flex.VARIANTS[1:]:
        forward_case(variant, 16, 16, "max", 1, flex_attention, torch.float64, 1e-10,
                     "eager flex float64 (one row)", 7)
        try:
            peer_flex.CombinerFlex(variant, 7, "max", 16, flex=flex_attention)(
                *inputs(1, 1, 48, 16, 0))
            expect(False, f"{variant} with W 7, L 48 is refused")
        except ValueError as e:
            expect(f"{variant}: row length W 7 must divide L 48" in str(e),
                   f"bad layout refused: {e}")

    if args.inspect:
        for variant, L, layout, abstraction in [("combiner-fixed", 100, 16, "max"),
                                                ("combiner-fixed", 96, 12, "mean"),
                                                ("combiner-axial-rowmajor", 120, 12, "max"),
                                                ("combiner-axial-rowmajor", 64, 8, "mean"),
                                                ("combiner-axial-vertical", 96, 12, "max"),
                                                ("combiner-axial-vertical", 64, 8, "mean"),
                                                ("combiner-axial-horizontal", 96, 12, "max"),
                                                ("combiner-axial-horizontal", 64, 8, "mean")]:
            inspect_case(args.inspect, variant, L, layout, abstraction, 200 + L)
    else:
        print("note: no --inspect binary; the tie to the C++ fast path is not checked")
    model_case(args.bench, "combiner-fixed", "deepsets-max")
    model_case(args.bench, "combiner-axial-rowmajor", "deepsets-mean")
    model_case(args.bench, "combiner-axial-vertical", "deepsets-max")
    model_case(args.bench, "combiner-axial-horizontal", "mean")
    if not args.bench:
        print("note: no --bench binary; the parameter counts are not compared with ours")
    if not args.no_compile:
        compiled_case(72, 16, 300)
    print(f"{len(FAILURES)} failure(s); {time.perf_counter() - start:.1f} s")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
