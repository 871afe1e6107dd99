#!/usr/bin/env bash
# Installs gnuplot-nox from Debian when gnuplot is missing (with sudo when not root). The plots of
# scripts/plot-bench.sh and scripts/ablation.sh need it; the build and the tests do not.
set -euo pipefail
command -v gnuplot >/dev/null 2>&1 && exit 0
echo "installing gnuplot-nox"
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends gnuplot-nox
