#!/usr/bin/python3
"""Packs Fashion-MNIST test images written as PNG files and counts the subpixels that changed.

    scripts/check-pack-exact.py --count 1000 --kind grey     # also rgb, rgba, palette, grey3, box2

Writes the first --count images of the installed Fashion-MNIST test set as 28 x 28 PNG files
(this script's own zlib writer, not the project's), runs `combiner-data pack --from` on them and
compares every packed image with its source, in any order (the packer shuffles):
  grey     grey PNGs, --channels 1                     rgb      (v, 255 - v, v / 2) as RGB PNGs
  grey3    grey PNGs, --channels 3: (v, v, v)          rgba     the same with alpha 7 (dropped)
  palette  the RGB colours through a 256-entry palette
  box2     each pixel as a 2 x 2 block of a 56 x 56 grey PNG, packed with --filter box
Needs /usr/bin/python3 with numpy (Debian's). Exits 1 when any subpixel changed.
"""
import argparse
import gzip
import os
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"


def png(w, h, colour_type, rows, palette=b""):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    head = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour_type, 0, 0, 0))
    body = zlib.compress(b"".join(b"\0" + bytes(r) for r in rows))
    return (b"\x89PNG\r\n\x1a\n" + head + (chunk(b"PLTE", palette) if palette else b"") +
            chunk(b"IDAT", body) + chunk(b"IEND", b""))


def colours(grey):  # [..., 3]: distinct channels, so a swapped order shows
    g = grey.astype(np.int32)
    return np.stack([g, 255 - g, g // 2], axis=-1).astype(np.uint8)


def write_sources(images, kind, folder):
    """Writes the PNG files; returns the images the pack must hold, [N, H, W, C]."""
    palette = colours(np.arange(256, dtype=np.uint8)).tobytes()
    for i, g in enumerate(images):
        if kind in ("grey", "grey3"):
            data = png(28, 28, 0, g)
        elif kind == "rgb":
            data = png(28, 28, 2, colours(g).reshape(28, 84))
        elif kind == "rgba":
            rgba = np.concatenate([colours(g), np.full((28, 28, 1), 7, np.uint8)], axis=-1)
            data = png(28, 28, 6, rgba.reshape(28, 112))
        elif kind == "palette":
            data = png(28, 28, 3, g, palette)
        else:  # box2
            data = png(56, 56, 0, g.repeat(2, axis=0).repeat(2, axis=1))
        with open(os.path.join(folder, f"{i:05d}.png"), "wb") as f:
            f.write(data)
    if kind in ("grey", "box2"):
        return images[..., None]
    if kind == "grey3":
        return np.repeat(images[..., None], 3, axis=-1)
    return colours(images)


def read_pack(path):
    data = open(path, "rb").read()
    header_bytes = struct.unpack("<I", data[12:16])[0]
    h, w, c = struct.unpack("<III", data[32:44])
    count = struct.unpack("<Q", data[48:56])[0]
    return np.frombuffer(data, np.uint8, offset=header_bytes).reshape(count, h, w, c)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--kind", default="grey",
                        choices=["grey", "grey3", "rgb", "rgba", "palette", "box2"])
    parser.add_argument("--binary", default="build/combiner-data")
    args = parser.parse_args()
    raw = gzip.open(FASHION).read()
    if struct.unpack(">I", raw[:4])[0] != 2051:
        sys.exit(f"{FASHION}: not an idx3 image file")
    images = np.frombuffer(raw, np.uint8, offset=16)[: args.count * 784].reshape(-1, 28, 28)
    with tempfile.TemporaryDirectory() as tmp:
        src, out = os.path.join(tmp, "png"), os.path.join(tmp, "packed")
        os.mkdir(src)
        want = write_sources(images, args.kind, src)
        command = [args.binary, "pack", "--from", src, "--size", "28", "--out", out,
                   "--channels", "3" if want.shape[-1] == 3 else "1"]
        if args.kind == "box2":
            command += ["--filter", "box"]
        run = subprocess.run(command, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(run.stderr.strip() or run.stdout.strip())
        print(run.stdout.strip().splitlines()[-1])
        got = np.concatenate([read_pack(os.path.join(out, f"{s}.pack")) for s in ("train", "test")])
    # Each packed image against its nearest source (the sum of absolute differences).
    flat_want = want.reshape(len(want), -1).astype(np.int32)
    changed = largest = differ = 0
    for image in got.reshape(len(got), -1).astype(np.int32):
        source = flat_want[np.abs(flat_want - image).sum(axis=1).argmin()]
        delta = np.abs(source - image)
        changed += int((delta > 0).sum())
        largest = max(largest, int(delta.max()))
        differ += int(delta.max() > 0)
    same = sorted(map(bytes, got)) == sorted(map(bytes, want))
    print(f"{args.kind}: {len(got)} packed of {len(want)} sources, the same images: "
          f"{'yes' if same else 'no'}; {differ} differ from their nearest source, {changed} "
          f"subpixels changed, largest change {largest}")
    return 0 if same and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
