"""Times the operator as a Python model calls it, in the rows of docs/perf/attention-vs-flash.csv
(variant `py:<name>`), as combiner-bench attention times the trainer's modules: random q, k, v
[B, H, L, D], forward (+ backward with --backward, from the graph the eager forward kept), the
median of --repeats runs after one warm-up, and the peak memory above the inputs
(the CUDA caching allocator's peak on a GPU, VmHWM on the CPU). Each variant is first checked
against the dense float64 reference on a small input of the same dtype and device, and is not
timed when it disagrees (status `wrong`).

  python -m combiner_attention.bench --device cuda --dtype bfloat16 --lengths 3072,12288 \\
      --batch 8 --heads 8 --dim 64 --backward [--variants full,combiner-fixed,...] [--no-header]
      [--peers scripts]
Rows go to stdout, each as it is measured; which implementation each variant runs (path()) to
stderr. With --peers DIR (a clone's scripts/), the same process then times the alternatives a
PyTorch user weighs: F.scaled_dot_product_attention(is_causal=True) (flash on a GPU), row
`py:sdpa-flash`, and for each Combiner variant asked for that DIR/peer_flex.py offers, the same
Combiner in FlexAttention, row `py:flex:<variant>` (compiled on a GPU, the compile in the untimed
warm-up; eager on the CPU, forward only: flex_attention has no backward there). Each peer is
checked against the reference like the operator (the FlexAttention one on the CPU in float32,
through eager flex_attention, so that the check compiles nothing).
"""
import argparse
import math
import os
import sys
import time
import warnings

import torch
import torch.nn.functional as F

import combiner_attention as ca

COLUMNS = "gpu,L,batch,heads,dim,dtype,variant,ms,peak_mib,status"
TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 2e-2, torch.float16: 5e-3}


def default_layout(length):
    """The divisor of L nearest sqrt(L), the larger on a tie (combiner-bench's default)."""
    root, best = math.sqrt(length), 1
    for d in range(1, length + 1):
        if length % d == 0 and abs(d - root) <= abs(best - root):
            best = d
    return best


def layout(variant, length):
    if variant in ("fixed", "combiner-fixed"):
        return {"block": default_layout(length)}
    if variant == "axial" or variant == "combiner-mixture" or variant.startswith("combiner-axial"):
        return {"row_len": default_layout(length)}
    return {}


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def memory_mib(device, peak):
    if device.type == "cuda":
        read = torch.cuda.max_memory_allocated if peak else torch.cuda.memory_allocated
        return read(device) / 2**20
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmHWM" if peak else "VmRSS"].split()[0]) / 1024


def reset_peak(device):
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    else:
        with open("/proc/self/clear_refs", "w") as f:  # VmHWM back to VmRSS (Linux >= 4.0)
            f.write("5")


CHECK_LENGTH = 96  # the small input every implementation is checked on before it is timed


def ours(variant):
    """The operator as a model calls it: make(L) -> a function of q, k, v at that length."""
    return lambda length: lambda q, k, v: ca.attention(q, k, v, variant, **layout(variant, length))


def sdpa(length):
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def flex_peer(peer_flex, variant, dim, device, eager):
    """The FlexAttention Combiner of scripts/peer_flex.py: make(L) -> its module at that length,
    on `device`; eager flex_attention when `eager`, else compiled (one module per L: its block
    masks and compiled kernels are the shape's)."""
    def make(length):
        flex = peer_flex.flex_api()[0] if eager else None
        return peer_flex.CombinerFlex(variant, default_layout(length), "max", dim,
                                      flex=flex).to(device)
    return make


def disagreement(make, reference_variant, dtype, device):
    """max |call - reference| / max(1, max |reference|) on a small input, where call =
    make(CHECK_LENGTH), or None when within the dtype's tolerance."""
    L = CHECK_LENGTH
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, L, 32, generator=g, dtype=torch.float64) for _ in range(3))
    low = [t.to(dtype) for t in (q, k, v)]
    with torch.no_grad():
        got = make(L)(*(t.to(device) for t in low)).double().cpu()
    ref = ca.reference_attention(*(t.double() for t in low), reference_variant,
                                 **layout(reference_variant, L))
    error = ((got - ref).abs().max() / max(1.0, ref.abs().max().item())).item()
    return None if error <= TOLERANCE[dtype] else error


def time_case(make, length, a, device, dtype):
    """(ms, peak MiB) of one case: call = make(length)."""
    shape = (a.batch, a.heads, length, a.dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=a.backward)
               for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)
    call = make(length)

    def once():
        if a.backward:
            for t in (q, k, v):
                t.grad = None
            call(q, k, v).backward(grad)
        else:
            with torch.no_grad():
                call(q, k, v)
        synchronize(device)

    once()  # warm-up: code paged in, allocator and thread pool started, a peer compiled
    for t in (q, k, v):
        t.grad = None
    synchronize(device)
    reset_peak(device)
    base = memory_mib(device, peak=False)
    times = []
    for _ in range(max(1, a.repeats)):
        start = time.perf_counter()
        once()
        times.append((time.perf_counter() - start) * 1e3)
    return sorted(times)[len(times) // 2], max(0.0, memory_mib(device, peak=True) - base)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16",
                                                           "float64"])
    p.add_argument("--lengths", default="3072,12288")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--variants", default=",".join(ca.variants()))
    p.add_argument("--backward", action="store_true", help="forward + backward (default forward)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-header", action="store_true", help="rows only (to append to a table)")
    p.add_argument("--peers", metavar="DIR",
                   help="then time SDPA and the FlexAttention peer of DIR/peer_flex.py (a "
                        "clone's scripts/) in this process too")
    a = p.parse_args(argv)
    device, dtype = torch.device(a.device), getattr(torch, a.dtype)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    variants = a.variants.split(",")
    for variant in variants:
        if variant not in ca.variants():
            p.error(f"--variants: unknown variant '{variant}', expected some of: "
                    f"{', '.join(ca.variants())}")
    try:
        lengths = [int(x) for x in a.lengths.split(",")]
    except ValueError:
        p.error(f"--lengths: expected comma-separated integers, got '{a.lengths}'")
    peer_flex = None
    if a.peers:
        if not os.path.isfile(os.path.join(a.peers, "peer_flex.py")):
            p.error(f"--peers: no peer_flex.py in '{a.peers}' (expected a clone's scripts/)")
        sys.path.insert(0, os.path.abspath(a.peers))
        import peer_flex
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile")
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if not a.no_header:
        print(COLUMNS, flush=True)
    # (row name, make(L) -> call, the reference's variant, why it is not timed or None)
    cases = []
    for variant in variants:
        probe = torch.empty(1, 1, 1, a.dim, device=device, dtype=dtype)
        print(f"py:{variant}: {ca.path(probe, probe, variant)}", file=sys.stderr, flush=True)
        cases.append((variant, ours(variant), variant, None))
    if peer_flex is not None:
        cases.append(("sdpa-flash", sdpa, "full", None))
        no_backward = ("skipped: flex_attention has no backward on the CPU"
                       if a.backward and device.type == "cpu" else None)
        for variant in (v for v in variants if v in peer_flex.VARIANTS):
            cases.append((f"flex:{variant}",
                          flex_peer(peer_flex, variant, a.dim, device, device.type == "cpu"),
                          variant, no_backward))
    for name, make, reference, skipped in cases:
        wrong = None
        if skipped is None and name.startswith("flex:"):
            # The composition around flex_attention, checked on the CPU in float32 (eager there:
            # nothing is compiled for it); the kernels are PyTorch's.
            cpu = torch.device("cpu")
            wrong = disagreement(flex_peer(peer_flex, reference, 32, cpu, True), reference,
                                 torch.float32, cpu)
        elif skipped is None:
            wrong = disagreement(make, reference, dtype, device)
        for length in lengths:
            ms = peak = ""
            if skipped is not None:
                status = skipped
            elif wrong is not None:
                status = f"wrong (error {wrong:.1e} on a check at L {CHECK_LENGTH})"
            else:
                try:
                    ms, peak = time_case(make, length, a, device, dtype)
                    ms, peak = f"{ms:.3f}", f"{peak:.1f}"
                    status = "ok"
                except torch.cuda.OutOfMemoryError:
                    status = "oom"
                except (RuntimeError, ValueError) as e:
                    status = "error: " + str(e).splitlines()[0].replace(",", ";")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            row = (f"{gpu},{length},{a.batch},{a.heads},{a.dim},{a.dtype},py:{name},{ms},"
                   f"{peak},{status}")
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
