#!/usr/bin/env bash
# Test bits/dim of two baselines on Fashion-MNIST, for comparison with a trained model:
# a uniform model (exactly 8) and a per-subpixel histogram model (each of the 784 positions its
# own 256-bin histogram, fitted on the 60,000 training images, add-one smoothed).
set -euo pipefail
dir=${1:-/usr/share/datasets/fashion-mnist}
/usr/bin/python3 - "$dir" <<'PY'
import gzip, sys
import numpy as np

def images(path):
    with gzip.open(path) as f:
        raw = f.read()
    return np.frombuffer(raw[16:], dtype=np.uint8).reshape(-1, 784)

train = images(f"{sys.argv[1]}/train-images-idx3-ubyte.gz")
test = images(f"{sys.argv[1]}/t10k-images-idx3-ubyte.gz")
counts = np.ones((784, 256))
for i in range(784):
    counts[i] += np.bincount(train[:, i], minlength=256)
p = counts / counts.sum(1, keepdims=True)
bits = -np.log2(p[np.arange(784)[None, :], test])
print(f"uniform_test_bpd: {8.0:.4f}")
print(f"histogram_test_bpd: {bits.mean(1).mean():.4f}")
PY
