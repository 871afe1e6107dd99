#!/usr/bin/env bash
# Installs pip's torch (the CUDA 13.0 build PyPI serves as torch==2.11.0, i.e. 2.11.0+cu130, the
# GPU machines' version), the real clients the tests read our files with (tensorboard,
# safetensors, numpy) and the build backend of the combiner_attention package (scikit-build-core,
# python/pyproject.toml) into a virtual environment in .cache/torch-venv (ignored by git). Debian's
# python3 and its torch 1.13 stay as they are for the CPU build's reference checks.
# Idempotent: a second run checks the versions and installs nothing.
# Prints the environment's python on its last line, for `scripts/build-cuda.sh` (COMBINER_PYTHON).
#   COMBINER_VENV=DIR     another place for the environment
#   COMBINER_TORCH=VER    another torch version (default 2.11.0)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${COMBINER_VENV:-.cache/torch-venv}
torch_version=${COMBINER_TORCH:-2.11.0}
packages=("torch==$torch_version" "tensorboard" "safetensors" "numpy" "scikit-build-core")

if [ -x "$venv/bin/python" ] &&
  "$venv/bin/python" - "$torch_version" <<'PY' 2>/dev/null; then
import sys, torch, tensorboard, safetensors, numpy, scikit_build_core
sys.exit(torch.__version__.split("+")[0] != sys.argv[1])
PY
  echo "setup-cuda-deps: $venv has torch $("$venv/bin/python" -c 'import torch; print(torch.__version__)')"
  echo "$venv/bin/python"
  exit 0
fi

# The environment takes about 5 GiB (torch 1.2, its CUDA libraries 2.7, triton 0.6); pip also
# unpacks each wheel in its temporary folder on the way. Refuse in one line, before pip starts,
# where the disk cannot hold it: a half-installed environment helps no one.
need_gib=${COMBINER_VENV_NEED_GIB:-7}
mkdir -p "$(dirname "$venv")"
for dir in "$(dirname "$venv")" "${TMPDIR:-/tmp}"; do
  free_gib=$(( $(df -Pk "$dir" | awk 'NR == 2 { print $4 }') / 1048576 ))
  if [ "$free_gib" -lt "$need_gib" ]; then
    echo "setup-cuda-deps: $dir has $free_gib GiB free; pip's torch $torch_version with its" \
      "CUDA libraries needs about $need_gib GiB (set COMBINER_VENV_NEED_GIB to override)" >&2
    exit 1
  fi
done

# Debian's python3 with its venv module (a system without python3-venv cannot make one).
if ! /usr/bin/python3 -c 'import ensurepip' 2>/dev/null; then
  echo "setup-cuda-deps: installing python3-venv"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends python3-venv
fi

echo "setup-cuda-deps: installing ${packages[*]} into $venv"
start=$(date +%s)
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
# --no-cache-dir: the wheels are not kept a second time in ~/.cache/pip (another 3.5 GiB).
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-input --no-cache-dir \
  "${packages[@]}"
"$venv/bin/python" -c 'import torch; print("setup-cuda-deps: torch", torch.__version__, "CUDA", torch.version.cuda)'
echo "setup-cuda-deps: done in $(( $(date +%s) - start )) s, $(du -sh "$venv" | cut -f1) on disk"
echo "$venv/bin/python"
