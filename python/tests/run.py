#!/usr/bin/env python3
"""Runs the combiner_attention package's tests (test_*.py here) against the installed package:
  python python/tests/run.py [--inspect build-cuda/combiner-inspect] [unittest arguments]
--inspect: a combiner-inspect built against the same torch, for test_inspect.py (without it that
test is skipped, saying so). Exits non-zero on any failure."""
import argparse
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--inspect", help="combiner-inspect binary, for test_inspect.py")
    args, rest = p.parse_known_args(argv)
    if args.inspect and not os.access(args.inspect, os.X_OK):
        p.error(f"--inspect: '{args.inspect}' is not an executable file")
    sys.path.insert(0, HERE)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # before torch is imported
    import torch
    sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
    import inductor_cpu  # a compile cache of its own, linked against this torch
    note = inductor_cpu.use_own_inductor()
    if note:
        print(f"note: {note}")
    import combiner_attention
    import test_inspect
    test_inspect.INSPECT = args.inspect
    print(f"torch {torch.__version__}, combiner_attention from "
          f"{os.path.dirname(combiner_attention.__file__)}", flush=True)
    program = unittest.main(module=None, argv=[sys.argv[0], "discover", "-s", HERE, "-t", HERE,
                                                "-v", *rest], exit=False)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
