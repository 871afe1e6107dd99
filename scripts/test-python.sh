#!/usr/bin/env bash
# The combiner_attention package (python/): builds its wheel with pip against the torch of PYTHON's
# environment (default: the one scripts/setup-cuda-deps.sh makes, which holds scikit-build-core),
# installs it there, and runs its tests on the CPU (python/tests/run.py: opcheck, gradcheck
# against the dense reference, errors, torch.compile). With COMBINER_INSPECT, a combiner-inspect
# built against the same torch (scripts/test-cuda-build.sh passes build-cuda's), the operator's
# outputs are also compared with the trainer's. The fused CUDA kernels are left out unless
# COMBINER_PYTHON_CUDA=AUTO or ON asks for them (nothing here can run them; nvcc adds minutes).
# Prints the build's seconds and the wheel's size. Arguments go to the test runner (unittest).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${COMBINER_PYTHON:-.cache/torch-venv/bin/python}
inspect=${COMBINER_INSPECT:-}
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
start=$(date +%s)
"$python" -m pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps ./python \
  -w "$wheels" --config-settings=cmake.define.COMBINER_CUDA="${COMBINER_PYTHON_CUDA:-OFF}"
wheel=$(ls "$wheels"/*.whl)
echo "test-python: built $(basename "$wheel") in $(( $(date +%s) - start )) s," \
  "$(du -k "$wheel" | cut -f1) KiB"
"$python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
"$python" python/tests/run.py ${inspect:+--inspect "$inspect"} "$@"
