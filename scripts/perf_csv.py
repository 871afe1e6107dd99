#!/usr/bin/env python3
"""Reshapes combiner-bench's CSVs into the comparison tables of docs/perf/ (stdlib only).

  perf_csv.py ours --gpu NAME [--status S --shape DATASET-LxW --attention A --L N --batch N
                   --precision P] [TRAIN_CSV ...]
      rows of gpu-vs-peer.csv (system `ours`) from `combiner-bench train --out` files; with no
      file (the run failed), one row of the given shape with empty numbers and --status.
  perf_csv.py attention --gpu NAME [--full-as sdpa-flash] ATTENTION_CSV ...
      rows of attention-vs-flash.csv from `combiner-bench attention --out` files; `full` on CUDA
      with LibTorch >= 2 is at::scaled_dot_product_attention, so --full-as names it.
  perf_csv.py header peer|attention
      the header line of either table.
Rows go to stdout without a header.
"""
import argparse
import csv
import sys

PEER_COLUMNS = ["gpu", "shape", "L", "batch", "system", "attention", "precision", "ms_per_step",
                "tokens_per_s", "peak_mib", "status"]
ATTENTION_COLUMNS = ["gpu", "L", "batch", "heads", "dim", "dtype", "variant", "ms", "peak_mib",
                     "status"]


def clean(text):
    return str(text).replace(",", " ").replace("\n", " ")


def write(columns, row):
    print(",".join(clean(row.get(c, "")) for c in columns))


def ours(args):
    if not args.files:
        write(PEER_COLUMNS, {"gpu": args.gpu, "shape": args.shape, "L": args.L,
                             "batch": args.batch, "system": "ours", "attention": args.attention,
                             "precision": args.precision, "status": args.status})
        return
    for path in args.files:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                write(PEER_COLUMNS, {
                    "gpu": args.gpu, "shape": f"{r['dataset']}-{r['layers']}x{r['width']}",
                    "L": r["L"], "batch": r["batch"], "system": "ours",
                    "attention": r["attention"], "precision": r["precision"],
                    "ms_per_step": r["ms_per_step"], "tokens_per_s": r["tokens_per_s"],
                    "peak_mib": r["peak_mib"], "status": "ok"})


def attention(args):
    for path in args.files:
        with open(path, newline="") as f:
            for r in csv.DictReader(f):
                if r["status"] == "definition":  # --count's flash row: counts, no timing
                    continue
                variant = r["variant"]
                if variant == "full" and args.full_as and r["device"].startswith("cuda"):
                    variant = args.full_as
                write(ATTENTION_COLUMNS, {
                    "gpu": args.gpu, "L": r["L"], "batch": r["batch"], "heads": r["heads"],
                    "dim": r["dim"], "dtype": r["dtype"], "variant": variant, "ms": r["ms"],
                    "peak_mib": r["peak_mib"], "status": r["status"]})


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    o = sub.add_parser("ours")
    o.add_argument("--gpu", required=True)
    for flag in ["--status", "--shape", "--attention", "--L", "--batch", "--precision"]:
        o.add_argument(flag, default="")
    o.add_argument("files", nargs="*")
    a = sub.add_parser("attention")
    a.add_argument("--gpu", required=True)
    a.add_argument("--full-as", default="")
    a.add_argument("files", nargs="+")
    h = sub.add_parser("header")
    h.add_argument("table", choices=["peer", "attention"])
    args = p.parse_args(argv)
    if args.command == "header":
        print(",".join(PEER_COLUMNS if args.table == "peer" else ATTENTION_COLUMNS))
    elif args.command == "ours":
        ours(args)
    else:
        attention(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
