#!/usr/bin/python3
"""Writes a packed dataset file of random images (data/packed.h's format), for benchmarks only:

    scripts/make_synthetic_packed.py --dataset imagenet64 --count 1281149 --out DIR/train.pack

An independent writer of the format (Python's struct and zlib.crc32), so reading its files with
combiner-data info also checks the C++ reader against the documented layout.
"""
import argparse
import os
import struct
import sys
import zlib

import numpy as np

SHAPES = {"fashion_mnist": (28, 28, 1), "cifar10": (32, 32, 3), "imagenet64": (64, 64, 3)}


def header(dataset, shape, count, payload_crc):
    head = b"CMBPACK\n" + struct.pack("<II", 1, 64) + dataset.encode().ljust(16, b"\0")
    head += struct.pack("<IIIIQI", *shape, 0, count, payload_crc)
    return head + struct.pack("<I", zlib.crc32(head))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=sorted(SHAPES), required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    shape = SHAPES[args.dataset]
    length = shape[0] * shape[1] * shape[2]
    rng = np.random.default_rng(args.seed)
    tmp = args.out + ".tmp"
    crc = 0
    with open(tmp, "wb") as f:
        f.write(bytes(64))
        left = args.count
        while left:
            n = min(left, max(1, (64 << 20) // length))
            chunk = rng.bytes(n * length)
            crc = zlib.crc32(chunk, crc)
            f.write(chunk)
            left -= n
        f.seek(0)
        f.write(header(args.dataset, shape, args.count, crc))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, args.out)
    print(f"{args.out}: {args.count} random {args.dataset} images, CRC-32 {crc:08x}", file=sys.stderr)


if __name__ == "__main__":
    main()
