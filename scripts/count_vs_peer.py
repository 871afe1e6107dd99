#!/usr/bin/env python3
"""Ours against the plain-PyTorch peer per transformer block, counted on the CPU with pip's
torch (the build of scripts/build-cuda.sh runs on the CPU): for one forward + backward, the
device operations a block launches (by the rule of src/tools/launch_count.cpp, which
scripts/peer_gpu.py --count applies to the peer) and the MiB per image its forward keeps for
backward. A block's figures are a two-layer model's less a one-layer model's (batch 1, bf16,
fused path, no recomputation); the rest is embeddings, head and loss. Ours runs
`combiner-bench train --count --memory tensors` (live tensor bytes after the forward, less
before), the peer `peer_gpu.py --count` (the storages autograd saved, once each); with `full`,
ours keeps what the peer keeps to the byte, which checks that the two ways agree.
On the CPU, SDPA's backward counts as its three zero fills (on a GPU it is one kernel), and the
fused kernels count as the GPU launches them. Writes a CSV and prints a Markdown table:
    shape,system,attention,block_launches,fused_kernels,rest_launches,block_kept_mib
Usage (the venv of scripts/setup-cuda-deps.sh):
    .cache/torch-venv/bin/python scripts/count_vs_peer.py [--bench build-cuda/combiner-bench]
        [--out docs/perf/count-vs-peer.csv] [--threads 2] [--toy]
--toy: every shape 32 wide with 2 heads (plumbing only: its numbers go nowhere but --out).
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the configs are the repository's, whatever the working directory
COLUMNS = "shape,system,attention,block_launches,fused_kernels,rest_launches,block_kept_mib"
# shape name -> (config, width, heads, MLP ratio, dropout, our attention variants)
SHAPES = {
    "cifar10-6x512": ("configs/cifar10_ablation_combiner_axial_rowmajor.yaml", 512, 8, 4, 0.0,
                      ["full", "combiner-axial-rowmajor"]),
    "cifar10-128x256": ("configs/cifar_axial.yaml", 256, 2, 2, 0.25,
                        ["full", "combiner-axial-vertical"]),
}
COUNT = re.compile(r"count of one training step: \d+ launches(?: \((\d+) fused "
                   r"kernels\))?: forward \+ backward (\d+), clipping \+ update \d+; kept for "
                   r"backward ([0-9.]+) MiB")


def run(command):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"count_vs_peer: {' '.join(command)} failed ({done.returncode}):\n"
                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    found = COUNT.search(done.stdout)
    if not found:
        sys.exit(f"count_vs_peer: no count line from {' '.join(command)}:\n{done.stdout[-2000:]}")
    fused, model, kept = found.groups()
    return int(model), int(fused or 0), float(kept)


def ours(args, config, width, heads, mlp, dropout, attention, layers):
    return run([args.bench, "train", "--config", os.path.join(ROOT, config),
                "--set", f"model.attention.type={attention}", "--set", f"model.layers={layers}", "--set", f"model.width={width}",
                "--set", f"model.heads={heads}", "--set", f"model.mlp_ratio={mlp}",
                "--set", f"model.dropout={dropout}", "--set", "train.batch_size=1",
                "--set", "train.grad_accum=1", "--set", "train.precision=bfloat16",
                "--set", "train.attention_path=fused",
                "--set", "train.activation_checkpointing=false",
                "--set", "train.recompute_mlp=false", "--steps", "1", "--warmup", "0",
                "--matmul-size", "64", "--threads", str(args.threads), "--count",
                "--memory", "tensors"])


def peer(args, width, heads, mlp, dropout, layers):
    return run([sys.executable, os.path.join(HERE, "peer_gpu.py"), "--layers", str(layers),
                "--width", str(width), "--heads", str(heads), "--mlp", str(mlp),
                "--dropout", str(dropout), "--batch", "1", "--steps", "1", "--warmup", "0",
                "--precision", "bfloat16", "--threads", str(args.threads), "--count"])


def row(shape, system, attention, one, two):
    """A block = two layers less one; the rest = one layer less a block."""
    (model1, fused1, kept1), (model2, fused2, kept2) = one, two
    block = model2 - model1
    return (f"{shape},{system},{attention},{block},{fused2 - fused1},{model1 - block},"
            f"{kept2 - kept1:.2f}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", default="build-cuda/combiner-bench")
    p.add_argument("--out", help="default docs/perf/count-vs-peer.csv (--toy needs one)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--toy", action="store_true")
    args = p.parse_args(argv)
    if not os.access(args.bench, os.X_OK):
        sys.exit(f"count_vs_peer: --bench: '{args.bench}' is not an executable "
                 "(scripts/build-cuda.sh builds it)")
    if args.toy and not args.out:
        sys.exit("count_vs_peer: --toy: pass an --out of its own (toy numbers never go to docs)")
    args.out = args.out or os.path.join(ROOT, "docs", "perf", "count-vs-peer.csv")
    rows = []
    for shape, (config, width, heads, mlp, dropout, variants) in SHAPES.items():
        if args.toy:
            width, heads = 32, 2
        counts = [peer(args, width, heads, mlp, dropout, n) for n in (1, 2)]
        rows.append(row(shape, "peer-eager", "sdpa-causal", *counts))
        for attention in variants:
            counts = [ours(args, config, width, heads, mlp, dropout, attention, n) for n in (1, 2)]
            rows.append(row(shape, "ours", attention, *counts))
        print(f"count_vs_peer: {shape} done", file=sys.stderr, flush=True)
    with open(args.out, "w") as out:
        out.write(COLUMNS + "\n" + "\n".join(rows) + "\n")
    print("| shape | system | attention | launches per block | of them fused | rest of the "
          "step | kept per block and image |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        shape, system, attention, block, fused, rest, kept = r.split(",")
        print(f"| {shape} | {system} | {attention} | {block} | {fused} | {rest} | {kept} MiB |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
