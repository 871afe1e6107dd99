#!/usr/bin/env python3
"""Combiner-Fixed and the three Combiner-Axial variants as a PyTorch user writes them in 2026:
with torch.nn.attention.flex_attention (compiled), BlockMasks for the direct keys and the span
summaries appended as extra keys and values, one softmax over both (the spec's definition,
docs/ATTENTION.md); where a variant's terms do not share one key list, two flex calls over
disjoint parts of that softmax merged by their log-sum-exps. scripts/peer_gpu.py imports it for
`--system peer-flex`; run alone it times the attention by itself and writes rows of
attention-vs-flash.csv with variant `flex:<variant>`:

  peer_flex.py attention --lengths 3072,12288 --batch 8 --heads 8 --dim 64 --dtype bfloat16 \
      --variants combiner-fixed,combiner-axial-vertical --backward --repeats 5 --csv OUT.csv

Block s and row length W default to the divisor of L nearest sqrt(L), as combiner-bench
attention picks them. Written against torch 2.11 (flex_attention with AuxRequest).
"""
import argparse
import functools
import math
import os
import statistics
import sys
import time
import warnings

import torch
import torch.nn as nn

VARIANTS = ("combiner-fixed", "combiner-axial-rowmajor", "combiner-axial-vertical",
            "combiner-axial-horizontal")
ABSTRACTIONS = ("max", "mean", "deepsets-max", "deepsets-mean")
ATTENTION_COLUMNS = "gpu,L,batch,heads,dim,dtype,variant,ms,peak_mib,status"
# (mask name, s or W, heads, Q length, KV length, device) -> BlockMask: the masks depend on
# nothing else (heads None: the same for every head).
BLOCK_MASKS = {}


def flex_api():
    """(flex_attention, create_block_mask, AuxRequest), or a one-line error naming the torch."""
    try:
        from torch.nn.attention.flex_attention import AuxRequest, create_block_mask, flex_attention
    except ImportError as e:
        raise RuntimeError(f"peer-flex needs torch.nn.attention.flex_attention with AuxRequest "
                           f"(written against torch 2.11), this is torch {torch.__version__}: "
                           f"{e}") from None
    return flex_attention, create_block_mask, AuxRequest


@functools.lru_cache(maxsize=None)
def compiled_flex_attention():
    """torch.compile(flex_attention), one per process: every layer's module calls the same
    compiled function, so a model of 128 layers compiles each shape once, not once a layer."""
    return torch.compile(flex_api()[0], dynamic=False)


@functools.lru_cache(maxsize=None)
def compiled_create_block_mask():
    """torch.compile(create_block_mask): on a GPU it never holds the L x (L + n) mask in memory
    (eager create_block_mask evaluates mask_mod on the whole grid: gigabytes at L 49152), as
    FlexAttention's documentation advises. One per process."""
    return torch.compile(flex_api()[1])


def check_layout(variant, length, layout):
    """Raises ValueError naming the value when `layout` (s or W) does not fit L."""
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got '{variant}'")
    if layout < 1:
        raise ValueError(f"{variant}: block / row length must be >= 1, got {layout}")
    if variant != "combiner-fixed" and length % layout:
        raise ValueError(f"{variant}: row length W {layout} must divide L {length}")


class CombinerFlex(nn.Module):
    """One layer's Combiner attention: forward(q, k, v) with [B, H, L, D] -> [B, H, L, D].

    `flex` is the flex_attention to call (compiled_flex_attention() by default; tests pass
    the eager one, or a dense stand-in with the same signature to check gradients on the CPU).
    DeepSets abstractions hold phi_key (and phi_query where the spans' local queries are pooled:
    all but rowmajor) as [D, D] parameters, initialised as combiner's SpanSummary does
    (N(0, 1) / sqrt(D)).
    """

    def __init__(self, variant, layout, abstraction="max", head_dim=64, flex=None):
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got '{variant}'")
        if abstraction not in ABSTRACTIONS:
            raise ValueError(f"abstraction must be one of {', '.join(ABSTRACTIONS)}, "
                             f"got '{abstraction}'")
        if layout < 1:
            raise ValueError(f"{variant}: block / row length must be >= 1, got {layout}")
        _, self._create_block_mask, self._aux = flex_api()
        self.variant, self.layout, self.max = variant, layout, abstraction.endswith("max")
        self.flex = flex if flex is not None else compiled_flex_attention()
        self.phi_query = self.phi_key = None
        if abstraction.startswith("deepsets-"):
            scale = 1.0 / math.sqrt(head_dim)
            if variant != "combiner-axial-rowmajor":
                self.phi_query = nn.Parameter(torch.randn(head_dim, head_dim) * scale)
            self.phi_key = nn.Parameter(torch.randn(head_dim, head_dim) * scale)

    def forward(self, q, k, v):
        check_layout(self.variant, q.shape[-2], self.layout)
        if self.variant == "combiner-fixed":
            return self._fixed(q, k, v)
        if self.variant == "combiner-axial-rowmajor":
            return self._rowmajor(q, k, v)
        if self.variant == "combiner-axial-vertical":
            return self._vertical(q, k, v)
        return self._horizontal(q, k, v)

    # -- span summaries ------------------------------------------------------------------------
    def _pool(self, x, w, dim):
        """phi(x) = relu(x W^T) (identity without W), then max or mean over `dim`."""
        if w is not None:
            x = torch.relu(x @ w.to(x.dtype).t())
        return x.amax(dim) if self.max else x.mean(dim)

    def _running_pool(self, x, w, dim, reverse=False):
        """phi(x), then at each index the max or mean of it over indices <= it along `dim`
        (>= it when `reverse`): the pools of every prefix (suffix) at once."""
        if w is not None:
            x = torch.relu(x @ w.to(x.dtype).t())
        if reverse:
            return self._running_pool(x.flip(dim), None, dim).flip(dim)
        if self.max:
            return torch.cummax(x, dim).values
        shape = [1] * x.dim()
        shape[dim] = x.shape[dim]
        count = torch.arange(1, x.shape[dim] + 1, device=x.device).view(shape)
        return x.cumsum(dim) / count.to(x.dtype)

    def _mask(self, name, mask_mod, q_len, kv_len, device, heads=None):
        """The BlockMask of `mask_mod`, built once per shape and shared by every layer (`heads`:
        a mask that depends on the head index, for that many)."""
        key = (name, self.layout, heads, q_len, kv_len, str(device))
        if key not in BLOCK_MASKS:
            make = compiled_create_block_mask() if device.type == "cuda" else \
                self._create_block_mask
            BLOCK_MASKS[key] = make(mask_mod, None, heads, q_len, kv_len, device=device)
        return BLOCK_MASKS[key]

    # -- combiner-fixed ------------------------------------------------------------------------
    def _fixed(self, q, k, v):
        """Keys [k_0 .. k_{L-1}, ks_0 .. ks_{n-1}] and values [v; u]: query i sees k_j for j <= i
        in its own block and the summary of every whole block before its own; one flex call,
        so one softmax over direct and span scores. u_b (the pooled query's unmasked attention
        over block b) is O(L D) of plain tensor ops."""
        B, H, L, D = q.shape
        s = self.layout
        n = (L - 1) // s  # the blocks any query summarises: all whole
        if n == 0:
            mask = self._mask("fixed", lambda b, h, i, j: (j <= i) & (j // s == i // s), L, L,
                              q.device)
            return self.flex(q, k, v, block_mask=mask, scale=1.0 / math.sqrt(D))
        qb = q[:, :, :n * s].unflatten(2, (n, s))  # [B, H, n, s, D]
        kb = k[:, :, :n * s].unflatten(2, (n, s))
        vb = v[:, :, :n * s].unflatten(2, (n, s))
        ks = self._pool(kb, self.phi_key, 3)  # [B, H, n, D]
        qs = self._pool(qb, self.phi_query, 3)  # [B, H, n, D]
        t = torch.promote_types(q.dtype, torch.float32)  # the local softmax in fp32 at least
        local = torch.softmax((kb @ qs.unsqueeze(-1)).squeeze(-1).to(t) / math.sqrt(D), -1)
        u = (local.unsqueeze(-2).to(vb.dtype) @ vb).squeeze(-2).to(v.dtype)  # [B, H, n, Dv]

        def fixed_mask(b, h, i, j):
            direct = (j < L) & (j <= i) & (j // s == i // s)
            return direct | ((j >= L) & (j - L < i // s))

        mask = self._mask("fixed", fixed_mask, L, L + n, q.device)
        return self.flex(q, torch.cat([k, ks.to(k.dtype)], 2), torch.cat([v, u], 2),
                         block_mask=mask, scale=1.0 / math.sqrt(D))

    # -- combiner-axial-rowmajor ---------------------------------------------------------------
    def _rowmajor(self, q, k, v):
        """The span value of row r seen from (R, c) is u[r, c], q_(r, c)'s unmasked softmax over
        row r: it depends on the query's column, which a key/value list shared by all queries
        cannot express. So the one softmax over [direct scores ++ span scores] is computed in
        two flex calls over disjoint parts of it, each returning its log-sum-exp, and merged:
          o = (e^lse1 o1 + e^lse2 o2) / (e^lse1 + e^lse2) = o2 + (o1 - o2) sigmoid(lse1 - lse2),
        which is exactly the softmax over the union (a row with no span has lse2 = -inf: o = o1).
          1. direct: queries in raster order, keys of the own row up to i (a BlockMask);
          2. spans: the column folded into the head dim ([B, H * W, n, D]: column c's n queries),
             keys ks_0..ks_{n-1} (the pooled row keys, the same for every column) with values
             u[0..n-1, c], query row R seeing rows r < R.
        u itself is a flex call too (the own row, no causal mask), so no [W x W] scores per row
        reach memory."""
        B, H, L, D = q.shape
        W = self.layout
        n = L // W
        scale = 1.0 / math.sqrt(D)
        direct_mask = self._row_causal(L, q.device)
        if n == 1:
            return self.flex(q, k, v, block_mask=direct_mask, scale=scale)
        o1, aux1 = self.flex(q, k, v, block_mask=direct_mask, scale=scale,
                             return_aux=self._aux(lse=True))
        row_mask = self._mask("row", lambda b, h, i, j: j // W == i // W, L, L, q.device)
        u = self.flex(q, k, v, block_mask=row_mask, scale=scale)  # [B, H, L, Dv]

        ks = self._pool(k.unflatten(2, (n, W)), self.phi_key, 3).to(k.dtype)  # [B, H, n, D]
        ks = ks.unsqueeze(2).expand(B, H, W, n, D).flatten(1, 2)
        span_mask = self._mask("rows-before", lambda b, h, i, j: j < i, n, n, q.device)
        o2, aux2 = self.flex(by_column(q, W), ks, by_column(u, W), block_mask=span_mask,
                             scale=scale, return_aux=self._aux(lse=True))
        return merge(o1, aux1.lse, from_column(o2, H, W), from_column(aux2.lse, H, W))

    # -- combiner-axial-vertical ---------------------------------------------------------------
    def _vertical(self, q, k, v):
        """Query (R, C) sees its row up to C and its column above R directly, and for every
        other column c the span of rows r < R through one summary: the running pools of keys
        and queries down column c at row R - 1, and u[R - 1, c], the pooled query's softmax over
        that column's rows 0..R-1. Those summaries are the same for every query of row R, so
        they share one key list with the row's own keys; the column above R does not fit a
        BlockMask in raster order (it touches every earlier block), so it is a second flex call
        in column order, merged as in rowmajor:
          1. raster order, keys [k; ks], values [v; u]: the own row up to i, and the summaries
             of row R - 1 but the own column's;
          2. the column folded into the head dim ([B, H * W, n, D]), keys of the rows r < R.
        u is a flex call in column order too (rows 0..r of the column)."""
        B, H, L, D = q.shape
        W = self.layout
        n = L // W
        scale = 1.0 / math.sqrt(D)
        if n == 1:
            return self.flex(q, k, v, block_mask=self._row_causal(L, q.device), scale=scale)
        ks = self._running_pool(k.unflatten(2, (n, W)), self.phi_key, 2)  # [B, H, n, W, D]
        qs = self._running_pool(q.unflatten(2, (n, W)), self.phi_query, 2)
        ks, qs = ks.flatten(2, 3).to(k.dtype), qs.flatten(2, 3).to(q.dtype)  # [B, H, L, D]
        rows_through = self._mask("rows-through", lambda b, h, i, j: j <= i, n, n, q.device)
        u = from_column(self.flex(by_column(qs, W), by_column(k, W), by_column(v, W),
                                  block_mask=rows_through, scale=scale), H, W)
        m = L - W  # the last row's summaries are read by no query

        def row_and_spans(b, h, i, j):
            direct = (j < L) & (j <= i) & (j // W == i // W)
            span = (j >= L) & ((j - L) // W == i // W - 1) & ((j - L) % W != i % W)
            return direct | span

        mask = self._mask("vertical", row_and_spans, L, L + m, q.device)
        o1, aux1 = self.flex(q, torch.cat([k, ks[:, :, :m]], 2), torch.cat([v, u[:, :, :m]], 2),
                             block_mask=mask, scale=scale, return_aux=self._aux(lse=True))
        rows_before = self._mask("rows-before", lambda b, h, i, j: j < i, n, n, q.device)
        o2, aux2 = self.flex(by_column(q, W), by_column(k, W), by_column(v, W),
                             block_mask=rows_before, scale=scale, return_aux=self._aux(lse=True))
        return merge(o1, aux1.lse, from_column(o2, H, W), from_column(aux2.lse, H, W))

    # -- combiner-axial-horizontal -------------------------------------------------------------
    def _horizontal(self, q, k, v):
        """Query (R, C) sees its row up to C and its column above R directly, and for every
        row r < R two spans through one summary each: the prefix (r, 0..C-1) and the suffix
        (r, C+1..W-1), their summaries the running pools along row r at C - 1 and C + 1 (and
        their local expectations, the pooled queries' softmaxes over those columns). All of a
        query's spans sit in the columns beside its own, rows r < R, as its column's keys do:
        so the second flex call runs in column order over [own column; prefix tables shifted
        one column right; suffix tables shifted one left], and the first is the own row:
          1. raster order, the own row up to i;
          2. the column folded into the head dim ([B, H * W, n, D]), rows r < R of the three
             (the head index gives the column: no prefix at C = 0, no suffix at C = W - 1).
        The local expectations are flex calls in raster order (the row up to c, from c on)."""
        B, H, L, D = q.shape
        W = self.layout
        n = L // W
        scale = 1.0 / math.sqrt(D)
        row_causal = self._row_causal(L, q.device)
        if n == 1:
            return self.flex(q, k, v, block_mask=row_causal, scale=scale)
        o1, aux1 = self.flex(q, k, v, block_mask=row_causal, scale=scale,
                             return_aux=self._aux(lse=True))
        kx, qx = k.unflatten(2, (n, W)), q.unflatten(2, (n, W))
        row_from = self._mask("row-from", lambda b, h, i, j: (j >= i) & (j // W == i // W), L, L,
                              q.device)
        tables = []  # keys and values of column c's sequence, each [B, H * W, n, E]
        for reverse, mask, shift in ((False, row_causal, 1), (True, row_from, -1)):
            ks = self._running_pool(kx, self.phi_key, 3, reverse).flatten(2, 3).to(k.dtype)
            qs = self._running_pool(qx, self.phi_query, 3, reverse).flatten(2, 3).to(q.dtype)
            u = self.flex(qs, k, v, block_mask=mask, scale=scale)  # [B, H, L, Dv]
            # Column c reads the prefix summaries of column c - 1 (the suffix ones of c + 1):
            # rolled, so the wrapped-around column is the one the mask leaves out.
            tables += [by_column(x.unflatten(2, (n, W)).roll(shift, 3).flatten(2, 3), W)
                       for x in (ks, u)]

        def column_and_spans(b, h, i, j):
            c = h % W
            return (j % n < i) & ((j < n) | ((j < 2 * n) & (c > 0)) | ((j >= 2 * n) & (c < W - 1)))

        mask = self._mask("horizontal", column_and_spans, n, 3 * n, q.device, heads=H * W)
        keys = torch.cat([by_column(k, W), tables[0], tables[2]], 2)
        values = torch.cat([by_column(v, W), tables[1], tables[3]], 2)
        o2, aux2 = self.flex(by_column(q, W), keys, values, block_mask=mask, scale=scale,
                             return_aux=self._aux(lse=True))
        return merge(o1, aux1.lse, from_column(o2, H, W), from_column(aux2.lse, H, W))

    def _row_causal(self, length, device):
        W = self.layout
        return self._mask("row-causal", lambda b, h, i, j: (j <= i) & (j // W == i // W), length,
                          length, device)


def by_column(x, W):
    """[B, H, n * W, E] -> [B, H * W, n, E]: column c's rows in order, as a sequence of its own
    (also the log-sum-exps, [B, H, n * W] -> [B, H * W, n])."""
    n = x.shape[2] // W
    return x.unflatten(2, (n, W)).transpose(2, 3).flatten(1, 2)


def from_column(x, H, W):
    """by_column's inverse: [B, H * W, n, ...] -> [B, H, n * W, ...]."""
    return x.unflatten(1, (H, W)).transpose(2, 3).flatten(2, 3)


def merge(o1, lse1, o2, lse2):
    """The softmax over two disjoint sets of terms from each one's output and log-sum-exp:
      o = (e^lse1 o1 + e^lse2 o2) / (e^lse1 + e^lse2) = o2 + (o1 - o2) sigmoid(lse1 - lse2),
    exact for the union (a query with no term in the second set has lse2 = -inf: o = o1).
    bf16 outputs merge in fp32."""
    t = torch.promote_types(o1.dtype, torch.float32)
    weight = torch.sigmoid(lse1.to(t) - lse2.to(t)).unsqueeze(-1)
    return (o2.to(t) + (o1.to(t) - o2.to(t)) * weight).to(o1.dtype)


# -- attention alone: rows of attention-vs-flash.csv -------------------------------------------
def default_layout(length):
    """The divisor of L nearest sqrt(L), the larger on a tie (combiner-bench attention's rule)."""
    root, best = math.sqrt(length), 1
    for d in range(1, length + 1):
        if length % d == 0 and abs(d - root) <= abs(best - root):
            best = d
    return best


def time_case(variant, length, args, device):
    """(ms, peak_mib): median forward (+ backward) time and the CUDA allocator's peak above what
    the inputs hold (0 on the CPU), after one untimed run that compiles and builds the masks."""
    dtype = getattr(torch, args.dtype)
    flex = None  # torch.compile(flex_attention)
    if args.eager:
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
        flex = flex_api()[0]
    module = CombinerFlex(variant, args.layout or default_layout(length), "max", args.dim, flex)
    module.to(device)
    shape = (args.batch, args.heads, length, args.dim)
    q, k, v = (torch.randn(shape, dtype=dtype, device=device, requires_grad=args.backward)
               for _ in range(3))
    grad_out = torch.randn(shape, dtype=dtype, device=device)

    def once():
        if args.backward:
            for t in (q, k, v):
                t.grad = None
            module(q, k, v).backward(grad_out)
        else:
            with torch.no_grad():
                module(q, k, v)
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    started = time.perf_counter()
    once()  # compile and block masks, not timed
    print(f"peer-flex {variant} L {length}: compile and block masks "
          f"{time.perf_counter() - started:.1f} s (untimed)", file=sys.stderr, flush=True)
    for t in (q, k, v):
        t.grad = None
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) / 2**20
    once()
    times = []
    for _ in range(max(1, args.repeats)):
        start = time.perf_counter()
        once()
        times.append(1e3 * (time.perf_counter() - start))
    peak = torch.cuda.max_memory_allocated(device) / 2**20 - base if cuda else 0.0
    return statistics.median(times), max(0.0, peak)


def attention_main(argv):
    p = argparse.ArgumentParser(prog="peer_flex.py attention",
                                description="time the FlexAttention Combiners alone")
    p.add_argument("--lengths", default="3072", help="comma-separated L")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--dtype", choices=["bfloat16", "float16", "float32"], default="bfloat16")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--layout", type=int, default=0, help="s / W; 0 = divisor of L nearest sqrt L")
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--eager", action="store_true",
                   help="flex_attention without torch.compile (a CPU smoke test, not a timing)")
    p.add_argument("--csv", help="append each row here as it is measured (header if new)")
    args = p.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        p.error(f"--lengths must be comma-separated integers, got '{args.lengths}'")
    variants = args.variants.split(",")
    for v in variants:
        if v not in VARIANTS:
            p.error(f"--variants: '{v}' is not one of {', '.join(VARIANTS)}")
    device = torch.device(args.device)
    if device.type == "cpu" and args.backward:
        p.error("--backward needs a CUDA device: flex_attention has no backward on the CPU")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    rows = []

    def keep(row):  # each row as soon as it is measured: a later case that hangs loses no other
        print(row, flush=True)
        rows.append(row)
        if args.csv:
            new = not os.path.exists(args.csv) or os.path.getsize(args.csv) == 0
            with open(args.csv, "a") as out:
                out.write((ATTENTION_COLUMNS + "\n" if new else "") + row + "\n")

    for length in lengths:
        for variant in variants:
            status, ms, peak = "ok", "", ""
            try:
                t, m = time_case(variant, length, args, device)
                ms, peak = f"{t:.3f}", (f"{m:.1f}" if device.type == "cuda" else "")
            except Exception as e:  # a failed case is a row, not the end of the table
                status = "oom" if "out of memory" in str(e).lower() else "failed"
                print(f"peer-flex {variant} L {length}: {type(e).__name__}: "
                      f"{str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            keep(f"{gpu.replace(',', ' ')},{length},{args.batch},{args.heads},{args.dim},"
                 f"{args.dtype},flex:{variant},{ms},{peak},{status}")
    return 0 if all(r.endswith(",ok") for r in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "attention":
        sys.exit("usage: peer_flex.py attention [--help]   "
                 "(training steps: peer_gpu.py --system peer-flex)")
    sys.exit(attention_main(sys.argv[2:]))
