#!/usr/bin/env bash
# Plots a `combiner-bench attention` CSV like the paper's Figure 5: time and peak memory against
# the sequence length L, log-log, one line per variant (and per dtype / pass when the file holds
# several), in two panels. Rows whose status is not ok (oom, timeout, invalid, ...) are skipped.
#   usage: scripts/plot-bench.sh results.csv out.png
# Installs gnuplot-nox from Debian when gnuplot is missing (scripts/install-gnuplot.sh).
set -euo pipefail

if [ $# -ne 2 ]; then
  echo "usage: $0 results.csv out.png" >&2
  exit 2
fi
csv=$1
png=$2
[ -r "$csv" ] || { echo "plot-bench: cannot read $csv" >&2; exit 1; }

"$(dirname "$0")/install-gnuplot.sh"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One whitespace-separated file per series ("L ms peak_mib", sorted by L), found by column name
# so added columns do not break the script; titles.txt lists "file<TAB>title" in first-seen order.
awk -F, -v dir="$work" '
  NR == 1 {
    for (i = 1; i <= NF; ++i) col[$i] = i
    split("variant L ms peak_mib status", need, " ")
    for (k in need) if (!(need[k] in col)) { print "plot-bench: no column " need[k] > "/dev/stderr"; bad = 1; exit 1 }
    next
  }
  $col["status"] == "ok" {
    extra = ""
    if ("dtype" in col) extra = extra " " $col["dtype"]
    if ("pass" in col) extra = extra " " $col["pass"]
    variants[$col["variant"]] = 1
    extras[extra] = 1
    key = $col["variant"] SUBSEP extra
    if (!(key in file)) { file[key] = dir "/series-" (++n) ".dat"; order[n] = key }
    print $col["L"], $col["ms"], $col["peak_mib"] >> file[key]
  }
  END {
    if (bad) exit 1
    several = length(extras) > 1
    for (i = 1; i <= n; ++i) {
      split(order[i], part, SUBSEP)
      close(file[order[i]])
      print file[order[i]] "\t" part[1] (several ? part[2] : "") > (dir "/titles.txt")
    }
  }
' "$csv"

if [ ! -s "$work/titles.txt" ]; then
  echo "plot-bench: no ok rows in $csv" >&2
  exit 1
fi

terminal="png size 1400,800"
gnuplot -e "set terminal" 2>&1 | grep -q pngcairo && terminal="pngcairo size 1400,800 font 'sans,10'"

plots_for() {  # $1: the column to plot (2 = ms, 3 = peak MiB)
  local first=1 line=""
  while IFS=$'\t' read -r file title; do
    sort -n -o "$file" "$file"
    [ $first -eq 1 ] || line+=", "
    line+="'$file' using 1:(\$$1 > 0 ? \$$1 : 1/0) with linespoints title '$title'"
    first=0
  done <"$work/titles.txt"
  echo "$line"
}

title=$(basename "$csv")
gnuplot <<GNUPLOT
set terminal $terminal
set output '$png'
set multiplot layout 1,2 title "combiner-bench attention: $title"
set logscale x 2
set logscale y 10
set format x "%.0f"
set grid
set key below font ",9"
set offsets graph 0.04, graph 0.04, 0, 0
set xlabel "sequence length L"
set ylabel "time per run (ms)"
set title "time"
plot $(plots_for 2)
set ylabel "peak memory (MiB)"
set title "memory"
plot $(plots_for 3)
unset multiplot
GNUPLOT
echo "plot: $png"
