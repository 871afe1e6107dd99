"""Tables and the validation-curve plot of scripts/ablation.sh, from its run folders and logs.

Usage: ablation_report.py RUNS OUT STEPS VARIANT...
Reads RUNS/<variant>-seed<k>.log and RUNS/<variant>-seed<k>/{metrics.jsonl,config.yaml}; writes
OUT/ablation.csv, OUT/summary.csv, OUT/summary.txt (best_combiner=...) and OUT/val-curves.png.
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys


def read_run(runs, variant, seed):
    log = open(os.path.join(runs, f"{variant}-seed{seed}.log")).read()
    folder = os.path.join(runs, f"{variant}-seed{seed}")
    config = open(os.path.join(folder, "config.yaml")).read()
    batch = int(re.search(r"batch_size: (\d+)", config).group(1))
    length = int(re.search(r"L = (\d+)", log).group(1))
    records = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    rates = [r["tokens_per_s"] for r in records if r.get("tokens_per_s")]
    return {
        "variant": variant,
        "seed": seed,
        "test_bpd": float(re.search(r"test_bpd: ([0-9.]+)", log).group(1)),
        "parameters": int(re.search(r"(\d+) parameters", log).group(1)),
        # The first steps include start-up (page faults, thread pools): the median skips them.
        "ms_per_step": 1e3 * batch * length / statistics.median(rates),
        "peak_mib": float(re.search(r"peak resident memory (\d+) MiB", log).group(1)),
        "val": [(r["step"], r["val_bpd"]) for r in records if r.get("val_bpd") is not None],
    }


def main():
    runs, out, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    variants = sys.argv[4:]
    results = {}
    for v in variants:
        seeds = sorted(int(name[len(v) + 5:-4]) for name in os.listdir(runs)
                       if re.fullmatch(re.escape(v) + r"-seed\d+\.log", name))
        results[v] = [read_run(runs, v, s) for s in seeds]

    with open(os.path.join(out, "ablation.csv"), "w") as f:
        f.write("variant,seed,steps,test_bpd,parameters,ms_per_step,peak_mib\n")
        for v in variants:
            for r in results[v]:
                f.write(f"{v},{r['seed']},{steps},{r['test_bpd']:.4f},{r['parameters']},"
                        f"{r['ms_per_step']:.1f},{r['peak_mib']:.0f}\n")

    rows = []
    for v in variants:
        bpd = [r["test_bpd"] for r in results[v]]
        rows.append({
            "variant": v, "seeds": len(bpd), "mean": statistics.mean(bpd),
            "spread": max(bpd) - min(bpd),
            "parameters": results[v][0]["parameters"],
            "ms_per_step": statistics.median(r["ms_per_step"] for r in results[v]),
            "peak_mib": max(r["peak_mib"] for r in results[v]),
        })
    with open(os.path.join(out, "summary.csv"), "w") as f:
        f.write("variant,seeds,test_bpd_mean,test_bpd_spread,parameters,ms_per_step,peak_mib\n")
        for r in rows:
            f.write(f"{r['variant']},{r['seeds']},{r['mean']:.4f},{r['spread']:.4f},"
                    f"{r['parameters']},{r['ms_per_step']:.1f},{r['peak_mib']:.0f}\n")
    combiners = [r for r in rows if r["variant"].startswith("combiner-")]
    best = min(combiners, key=lambda r: r["mean"])["variant"] if combiners else variants[0]
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(f"best_combiner={best}\n")

    # Validation curves: the mean over seeds at each evaluated step, one series per variant.
    data = os.path.join(out, "val-curves.dat")
    with open(data, "w") as f:
        for v in variants:
            by_step = {}
            for r in results[v]:
                for step, bpd in r["val"]:
                    by_step.setdefault(step, []).append(bpd)
            f.write(f'"{v}"\n')
            for step in sorted(by_step):
                f.write(f"{step} {statistics.mean(by_step[step]):.5f}\n")
            f.write("\n\n")
    script = (
        "set terminal pngcairo size 1000,650 font ',11'\n"
        f"set output '{os.path.join(out, 'val-curves.png')}'\n"
        "set title 'validation bits/dim (mean over seeds)'\n"
        "set xlabel 'step'; set ylabel 'bits/dim'; set grid; set key outside right\n"
        f"plot for [i=0:{len(variants) - 1}] '{data}' index i using 1:2 "
        "with linespoints title columnheader(1)\n")
    if shutil.which("gnuplot"):
        subprocess.run(["gnuplot"], input=script.encode(), check=True)
        os.remove(data)
    for r in rows:
        print(f"{r['variant']:27s} test {r['mean']:.4f} +- {r['spread'] / 2:.4f}  "
              f"{r['parameters']} params  {r['ms_per_step']:.0f} ms/step  {r['peak_mib']:.0f} MiB")
    print(f"best Combiner: {best}")


if __name__ == "__main__":
    main()
