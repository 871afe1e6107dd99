#!/usr/bin/env python3
"""The peer: combiner's model (src/model/transformer.cpp) written in plain PyTorch, trained the
way people train it: F.scaled_dot_product_attention(is_causal=True) (flash on a GPU), bf16
autocast, fused AdamW, eager or torch.compile. Same embeddings (token + row + column + channel),
input shifted right behind a start token, pre-LN blocks (qkv, attn_out, GELU MLP), final
LayerNorm and 256-way head in fp32, GPT-2 initialisation, AdamW with decay on matrices only,
clipping of the global gradient norm, and like combiner's step one read-back of loss and norm
per step to skip a non-finite update. Times training steps on random tokens (as
`combiner-bench train` does) and prints / appends one CSV row (scripts/perf_csv.py's table):
    gpu,shape,L,batch,system,attention,precision,ms_per_step,tokens_per_s,peak_mib,status
On the CPU (Debian's torch 1.13, no SDPA, no compile) it runs in fp32 with an explicit causal
softmax: a smoke test of the model, not a measurement.
`--system peer-flex --attention combiner-fixed|combiner-axial-*` swaps SDPA for our
Combiner written in FlexAttention (scripts/peer_flex.py, torch.compile(flex_attention)), the rest
of the model unchanged; rows say system `peer-flex` and the variant. It needs a CUDA device
(flex_attention has no backward on the CPU).
"""
import argparse
import contextlib
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256  # subpixel values; the start token is VOCAB
# L -> (height, width, channels), as data::dataset_shape gives them.
IMAGES = {784: ("fashion_mnist", 28, 28, 1), 3072: ("cifar10", 32, 32, 3),
          12288: ("imagenet64", 64, 64, 3)}
COLUMNS = "gpu,shape,L,batch,system,attention,precision,ms_per_step,tokens_per_s,peak_mib,status"


def has_sdpa():
    return hasattr(F, "scaled_dot_product_attention")


def causal_attention(q, k, v):
    """q, k, v [B, H, L, D] -> [B, H, L, D], every position seeing itself and those before."""
    if has_sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    L = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    mask = torch.ones(L, L, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), -1) @ v


class Block(nn.Module):
    """Pre-LayerNorm: x + attn_out(Attn(LN(x))), then h + mlp_out(GELU(mlp_in(LN(h)))).
    `attention` maps q, k, v [B, H, L, D] to [B, H, L, D]: causal SDPA unless given (a
    peer_flex.CombinerFlex, whose DeepSets maps, if any, are this block's parameters)."""

    def __init__(self, width, heads, mlp, dropout, attention=None):
        super().__init__()
        self.heads = heads
        self.attention = attention
        self.ln_attn = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.attn_out = nn.Linear(width, width)
        self.ln_mlp = nn.LayerNorm(width)
        self.mlp_in = nn.Linear(width, mlp * width)
        self.mlp_out = nn.Linear(mlp * width, width)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        B, L, W = x.shape
        # [B, L, 3W] -> three [B, H, L, W/H], the split combiner's BlockImpl uses.
        qkv = self.qkv(self.ln_attn(x)).view(B, L, 3, self.heads, W // self.heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        attend = self.attention if self.attention is not None else causal_attention
        merged = attend(q, k, v).transpose(1, 2).reshape(B, L, W)
        h = x + self.dropout(self.attn_out(merged))
        return h + self.dropout(self.mlp_out(F.gelu(self.mlp_in(self.ln_mlp(h)))))


class ImageTransformer(nn.Module):
    """`make_attention()`, when given, builds each block's attention module (peer-flex)."""

    def __init__(self, layers, width, heads, mlp, image, dropout, bf16, make_attention=None):
        super().__init__()
        height, row, channels = image
        self.bf16 = bf16
        self.token_embed = nn.Embedding(VOCAB + 1, width)
        self.row_embed = nn.Embedding(height, width)
        self.col_embed = nn.Embedding(row, width)
        self.channel_embed = nn.Embedding(channels, width)
        self.embed_dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(
            Block(width, heads, mlp, dropout, make_attention() if make_attention else None)
            for _ in range(layers))
        self.ln_final = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB)
        p = torch.arange(height * row * channels)  # raster order, channels innermost
        self.register_buffer("rows", p // (row * channels), persistent=False)
        self.register_buffer("cols", (p // channels) % row, persistent=False)
        self.register_buffer("chans", p % channels, persistent=False)
        # GPT-2 initialisation, as combiner's: N(0, 0.02), zero biases, residual projections
        # N(0, 0.02 / sqrt(2 layers)), LayerNorm ones and zeros.
        with torch.no_grad():
            for name, t in self.named_parameters():
                if "ln_" in name or ".phi_" in name:  # DeepSets maps keep their own init
                    continue
                if name.endswith("bias"):
                    t.zero_()
                elif "attn_out.weight" in name or "mlp_out.weight" in name:
                    t.normal_(0.0, 0.02 / math.sqrt(2.0 * layers))
                else:
                    t.normal_(0.0, 0.02)

    def forward(self, x):
        """x [B, L] subpixels -> logits [B, L, 256] in fp32; position i predicts x_i."""
        B, L = x.shape
        start = torch.full((B, 1), VOCAB, dtype=torch.long, device=x.device)
        tokens = torch.cat([start, x[:, :-1].long()], 1)
        pos = self.row_embed(self.rows[:L]) + self.col_embed(self.cols[:L]) + \
            self.channel_embed(self.chans[:L])
        h = self.embed_dropout(self.token_embed(tokens) + pos)
        with torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            for block in self.blocks:
                h = block(h)
        return self.head(self.ln_final(h.float())).float()


def mean_bits(logits, x):
    return F.cross_entropy(logits.reshape(-1, VOCAB), x.reshape(-1).long()) / math.log(2.0)


def make_optimizer(model, args, cuda):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if cuda else {}
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=1e-8,
                             **extra)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--mlp", type=int, default=4, help="MLP ratio")
    p.add_argument("--length", type=int, default=3072, help="L: 784, 3072 or 12288")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=10, help="timed steps (median)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compile happens here)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--system", choices=["peer", "peer-flex"], default="peer",
                   help="peer: causal SDPA; peer-flex: our Combiner in FlexAttention")
    p.add_argument("--attention", choices=["combiner-fixed", "combiner-axial-rowmajor",
                                           "combiner-axial-vertical", "combiner-axial-horizontal"],
                   help="peer-flex's variant (required with it)")
    p.add_argument("--layout", type=int, default=0,
                   help="peer-flex's block s / row length W; 0 = one image row in subpixels, "
                        "as configs/*_ablation_combiner_*.yaml")
    p.add_argument("--abstraction", default="max",
                   choices=["max", "mean", "deepsets-max", "deepsets-mean"])
    p.add_argument("--csv", help="append the row to this file (header if new)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--precision", choices=["bfloat16", "float32"],
                   help="default: bfloat16 on CUDA, float32 on the CPU")
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--grad-clip", type=float, default=1.0, help="0 = no clipping")
    p.add_argument("--threads", type=int, default=0, help="CPU threads; 0 = torch's default")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--count", action="store_true",
                   help="count one more step: its launches by combiner's rule and the MiB its "
                        "forward saved for backward (as combiner-bench train --count)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the timed steps, one more under torch.profiler: its N largest "
                        "GPU kernels (or CPU ops) and its kernel launches")
    args = p.parse_args(argv)
    if args.length not in IMAGES:
        p.error(f"--length must be one of {sorted(IMAGES)}, got {args.length}")
    if args.width % args.heads:
        p.error(f"--width {args.width} must divide by --heads {args.heads}")
    if args.steps < 1 or args.warmup < 0 or args.batch < 1:
        p.error("--steps >= 1, --warmup >= 0 and --batch >= 1 required")
    if args.compile and not hasattr(torch, "compile"):
        p.error(f"--compile needs torch >= 2.0, this is {torch.__version__}")
    if args.system == "peer-flex":
        if not args.attention:
            p.error("--system peer-flex needs --attention combiner-fixed or an axial Combiner")
        if args.compile:
            p.error("--compile is the SDPA peer's; peer-flex compiles flex_attention itself")
        if args.layout < 0:
            p.error(f"--layout must be >= 0, got {args.layout}")
        _, height, row, channels = IMAGES[args.length]
        args.layout = args.layout or row * channels
        if args.attention != "combiner-fixed" and args.length % args.layout:
            p.error(f"--layout {args.layout} must divide --length {args.length} "
                    f"for {args.attention}")
    elif args.attention:
        p.error(f"--attention {args.attention} needs --system peer-flex")
    return args


def attention_factory(args):
    """None for the SDPA peer; for peer-flex, a function making one layer's CombinerFlex."""
    if args.system != "peer-flex":
        return None
    import peer_flex  # beside this file; needs flex_attention (torch 2.11)
    head_dim = args.width // args.heads
    return lambda: peer_flex.CombinerFlex(args.attention, args.layout, args.abstraction,
                                          head_dim)


def profile_step(step_once, top, cuda):
    """One step under torch.profiler: its `top` largest GPU kernels (CPU ops without a GPU) by
    total time, and how many kernels it launched (what combiner-bench train --profile prints)."""
    from torch.profiler import ProfilerActivity, profile
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step_once()
        if cuda:
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=top), flush=True)
    if cuda:
        kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        busy = sum(getattr(e, "device_time", 0.0) for e in kernels) / 1e3
        print(f"peer: profiled step: {len(kernels)} GPU kernels, {busy:.2f} ms of kernel time",
              flush=True)


# combiner's rule for counting device launches on any device (src/tools/launch_count.cpp), so the
# peer's count compares with `combiner-bench train --count`: an ATen op launches work unless it is
# a view, a reshape, metadata or an allocation left uninitialised, and it counts once, at the
# innermost op that does (aten::matmul is its aten::mm). LaunchCount.ThePeersRuleIsOurs
# (tests/tools/launch_count_test.cpp) holds this list to the C++ one.
NO_WORK = {
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::view",
    "aten::_reshape_alias", "aten::reshape", "aten::as_strided", "aten::t", "aten::transpose",
    "aten::permute", "aten::unsqueeze", "aten::squeeze", "aten::select", "aten::slice",
    "aten::narrow", "aten::expand", "aten::expand_as", "aten::detach", "aten::alias",
    "aten::resize_", "aten::set_", "aten::unflatten", "aten::flatten", "aten::view_as",
    "aten::contiguous", "aten::to", "aten::lift_fresh", "aten::result_type", "aten::size",
    "aten::stride", "aten::is_nonzero", "aten::unbind", "aten::split", "aten::chunk",
    "aten::detach_", "aten::_unsafe_view", "aten::unfold", "aten::movedim", "aten::numpy_T",
    "aten::split_with_sizes", "aten::_has_compatible_shallow_copy_type", "aten::requires_grad_",
    "aten::as_strided_", "aten::squeeze_", "aten::unsqueeze_", "aten::t_", "aten::transpose_",
    "aten::conj", "aten::resolve_conj", "aten::resolve_neg",
}


def launches_work(name):
    return name.startswith("aten::") and name not in NO_WORK


def count_launches(work):
    """Runs work() under torch.profiler (CPU ops) and returns {op name: launches} by the rule
    above."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        work()
    counts = {}

    def visit(event):  # whether the event, or an op inside it, launched work
        inside = False
        for child in event.cpu_children:
            inside = visit(child) or inside
        if inside or not launches_work(event.name):
            return inside
        counts[event.name] = counts.get(event.name, 0) + 1
        return True

    for event in prof.events():
        if event.cpu_parent is None:
            visit(event)
    return counts


class SavedBytes:
    """While open, the bytes of the storages autograd saves for backward, each counted once,
    the parameters' own left out (a context manager around a forward)."""

    def __init__(self, params):
        self.skip = {self.storage(p).data_ptr() for p in params}
        self.storages = {}
        self.hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)

    @staticmethod
    def storage(t):  # torch 1.13 has no untyped_storage()
        return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()

    def pack(self, t):
        storage = self.storage(t)
        if storage.data_ptr() not in self.skip:
            self.storages[storage.data_ptr()] = storage.nbytes()
        return t

    def __enter__(self):
        self.hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self.hooks.__exit__(*exc)

    def mib(self):
        return sum(self.storages.values()) / 2**20


def count_step(forward_backward, update, params):
    """One more step, counted: launches (forward + backward, then clipping + update) and the
    MiB its forward saved for backward; printed as combiner-bench train --count prints ours."""
    saved, loss = SavedBytes(params), []
    model_ops = count_launches(lambda: loss.append(forward_backward(saved)))
    update_ops = count_launches(lambda: update(loss[0]))
    ops = dict(model_ops)
    for name, calls in update_ops.items():
        ops[name] = ops.get(name, 0) + calls
    def most_called(counts, top=None):
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
        return ", ".join(f"{name} x{calls}" for name, calls in ranked)

    model, rest = sum(model_ops.values()), sum(update_ops.values())
    print(f"peer: count of one training step: {model + rest} launches: forward + backward "
          f"{model}, clipping + update {rest}; kept for backward {saved.mib():.2f} MiB; "
          f"most called: {most_called(ops, 12)}", flush=True)
    print(f"peer: forward + backward ops: {most_called(model_ops)}", flush=True)


def main(argv):
    args = parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    precision = args.precision or ("bfloat16" if cuda else "float32")
    if args.system == "peer-flex" and not cuda:
        print("peer_gpu.py: --system peer-flex needs a CUDA device (flex_attention has no "
              f"backward on the CPU), got --device {args.device}", file=sys.stderr)
        return 2
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dataset, *image = IMAGES[args.length]
    model = ImageTransformer(args.layers, args.width, args.heads, args.mlp, image, args.dropout,
                             precision == "bfloat16", attention_factory(args)).to(device)
    model.train()
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = make_optimizer(model, args, cuda)
    forward = torch.compile(model) if args.compile else model
    params = list(model.parameters())
    max_norm = args.grad_clip if args.grad_clip > 0 else float("inf")
    x = torch.randint(0, VOCAB, (args.batch, args.length), dtype=torch.uint8, device=device)
    attention = "sdpa-causal" if has_sdpa() else "explicit-softmax"
    system = "peer-compile" if args.compile else "peer-eager"
    if args.system == "peer-flex":
        attention, system = args.attention, "peer-flex"
    print(f"peer: torch {torch.__version__}, {device}, {precision}, {system}, {attention}, "
          f"{parameters} parameters", flush=True)

    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    def forward_backward(saved=contextlib.nullcontext()):
        optimizer.zero_grad(set_to_none=True)
        with saved:
            loss = mean_bits(forward(x), x)
        loss.backward()
        return loss

    def update(loss):
        """(bits, skipped) with skipped 1 for a non-finite update."""
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        bits, grad_norm = torch.stack([loss.detach().double(), norm.double()]).tolist()
        if math.isfinite(bits) and math.isfinite(grad_norm):
            optimizer.step()
            return bits, 0
        return bits, 1

    def step_once():
        """One training step; (bits, skipped) as update() gives them."""
        return update(forward_backward())

    times, bits, skipped = [], float("nan"), 0
    for step in range(args.warmup + args.steps):
        start = time.perf_counter()
        bits, bad = step_once()
        skipped += bad
        if cuda:
            torch.cuda.synchronize(device)
        if step >= args.warmup:
            times.append(1e3 * (time.perf_counter() - start))
        if step == 0:
            print(f"peer: first step {1e3 * (time.perf_counter() - start):.0f} ms "
                  "(compile included when --compile)", flush=True)

    if args.count:
        count_step(forward_backward, update, params)
    if args.profile > 0:
        profile_step(step_once, args.profile, cuda)
    ms = statistics.median(times)
    tokens_per_s = args.batch * args.length / (ms / 1e3)
    if cuda:
        peak_mib = torch.cuda.max_memory_allocated(device) / 2**20
        gpu = torch.cuda.get_device_name(device)
    else:  # the process's peak resident set, as combiner-bench reports on the CPU
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        gpu = "cpu"
    shape = f"{dataset}-{args.layers}x{args.width}"
    row = (f"{gpu.replace(',', ' ')},{shape},{args.length},{args.batch},{system},{attention},"
           f"{precision},{ms:.3f},{tokens_per_s:.1f},{peak_mib:.1f},ok")
    print(f"peer: loss {bits:.6f} bits/dim, {skipped} skipped, {ms:.1f} ms/step "
          f"(median of {args.steps}), {tokens_per_s:.0f} tokens/s, peak {peak_mib:.0f} MiB")
    print(COLUMNS)
    print(row, flush=True)
    if args.csv:
        new = not os.path.exists(args.csv) or os.path.getsize(args.csv) == 0
        with open(args.csv, "a") as out:
            out.write((COLUMNS + "\n" if new else "") + row + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
