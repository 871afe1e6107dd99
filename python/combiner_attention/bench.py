"""Times the operator as a Python model calls it, in the rows of docs/perf/attention-vs-flash.csv
(variant `py:<name>`), as combiner-bench attention times the trainer's modules: random q, k, v
[B, H, L, D], forward (+ backward with --backward, from the graph the eager forward kept), the
median of --repeats runs after one warm-up, and the peak memory above the inputs
(the CUDA caching allocator's peak on a GPU, VmHWM on the CPU). Each variant is first checked
against the dense float64 reference on a small input of the same dtype and device, and is not
timed when it disagrees (status `wrong`).

  python -m combiner_attention.bench --device cuda --dtype bfloat16 --lengths 3072,12288 \\
      --batch 8 --heads 8 --dim 64 --backward [--variants full,combiner-fixed,...] [--no-header]
Rows go to stdout; which implementation each variant runs (path()) to stderr.
"""
import argparse
import math
import sys
import time

import torch

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


def disagreement(variant, dtype, device):
    """max |op - reference| / max(1, max |reference|) on a small input, or None when within the
    dtype's tolerance."""
    L = 96
    args = layout(variant, L)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, L, 32, generator=g, dtype=torch.float64) for _ in range(3))
    low = [t.to(dtype) for t in (q, k, v)]
    with torch.no_grad():
        ours = ca.attention(*(t.to(device) for t in low), variant, **args).double().cpu()
    ref = ca.reference_attention(*(t.double() for t in low), variant, **args)
    error = ((ours - ref).abs().max() / max(1.0, ref.abs().max().item())).item()
    return None if error <= TOLERANCE[dtype] else error


def time_case(variant, length, a, device, dtype):
    """(ms, peak MiB) of one case."""
    shape = (a.batch, a.heads, length, a.dim)
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=a.backward)
               for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)
    args = layout(variant, length)

    def once():
        if a.backward:
            for t in (q, k, v):
                t.grad = None
            ca.attention(q, k, v, variant, **args).backward(grad)
        else:
            with torch.no_grad():
                ca.attention(q, k, v, variant, **args)
        synchronize(device)

    once()  # warm-up: code paged in, allocator and thread pool started
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
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    if not a.no_header:
        print(COLUMNS, flush=True)
    for variant in variants:
        wrong = disagreement(variant, dtype, device)
        probe = torch.empty(1, 1, 1, a.dim, device=device, dtype=dtype)
        print(f"py:{variant}: {ca.path(probe, probe, variant)}", file=sys.stderr, flush=True)
        for length in lengths:
            ms = peak = ""
            if wrong is not None:
                status = f"wrong (error {wrong:.1e} on a check at L 96)"
            else:
                try:
                    ms, peak = time_case(variant, length, a, device, dtype)
                    ms, peak = f"{ms:.3f}", f"{peak:.1f}"
                    status = "ok"
                except torch.cuda.OutOfMemoryError:
                    status = "oom"
                except (RuntimeError, ValueError) as e:
                    status = "error: " + str(e).splitlines()[0].replace(",", ";")
                if device.type == "cuda":
                    torch.cuda.empty_cache()
            row = (f"{gpu},{length},{a.batch},{a.heads},{a.dim},{a.dtype},py:{variant},{ms},"
                   f"{peak},{status}")
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
