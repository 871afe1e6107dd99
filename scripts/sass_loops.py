#!/usr/bin/env python3
"""The fused attention kernels' inner loops, counted in SASS without a GPU.

For each kernel of a compiled object (nvcc -c, sm_90) whose name matches the filter, prints its
instructions in all, its calls (CALL: a called routine, as a 64-bit integer division or the slow
path of an IEEE reciprocal is, whose call sites hold registers across the call) and, for every
loop that issues tensor-core instructions (a backward branch whose body holds HMMA: the walk
over key or query tiles), the loop body's instructions and how many of them are HMMA. A body
runs once per tile and warp, so its length is what one tile costs the warp scheduler to issue
(the loads' own loops inside it run once per tile too); where the loads wait on memory less than
the issue takes, this is the kernel's time.

Static counts: a branch not taken still counts, so they bound, not measure, the work per tile.

Usage: scripts/sass_loops.py OBJECT [FILTER]   (cuobjdump from $CUDA_HOME/bin, else triton's)
"""
import glob
import os
import re
import shutil
import subprocess
import sys


def cuobjdump():
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    found = [os.path.join(cuda, "bin", "cuobjdump"), shutil.which("cuobjdump") or ""]
    here = os.path.dirname(os.path.abspath(__file__))
    found += glob.glob(os.path.join(here, "..", ".cache", "torch-venv", "lib", "python3*",
                                    "site-packages", "triton", "backends", "nvidia", "bin",
                                    "cuobjdump"))
    for path in found:
        if path and os.access(path, os.X_OK):
            return path
    return None


def kernels(sass):
    """(demangled name, [(address, instruction)]) per function of cuobjdump -sass output."""
    for block in re.split(r"\n\s+Function : ", sass)[1:]:
        mangled = block.split("\n", 1)[0].strip()
        name = subprocess.run(["c++filt", mangled], capture_output=True, text=True).stdout.strip()
        name = re.sub(r"combiner::attention::fused::(cuda_detail::)?", "", name)
        name = re.sub(r"\((Forward|Backward|Delta)\)", "", name).replace("__nv_bfloat16", "bf16")
        code = []
        for line in block.split("\n"):
            m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
            if m:
                code.append((int(m.group(1), 16), m.group(2).strip()))
        yield name, code


def hmma_loops(code):
    """(instructions, HMMA) of each loop whose body issues HMMA, in address order."""
    loops = []
    for address, text in code:
        if "BRA" not in text:
            continue
        target = re.search(r"0x([0-9a-f]+)", text)
        if not target or int(target.group(1), 16) >= address:
            continue
        start = int(target.group(1), 16)
        body = [t for a, t in code if start <= a <= address]
        hmma = sum("HMMA" in t for t in body)
        if hmma:
            loops.append((len(body), hmma))
    return loops


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: scripts/sass_loops.py OBJECT [FILTER]")
    tool = cuobjdump()
    if tool is None:
        sys.exit("sass_loops: no cuobjdump ($CUDA_HOME/bin, PATH, or triton's in the venv)")
    sass = subprocess.run([tool, "-sass", sys.argv[1]], capture_output=True, text=True, check=True)
    pattern = sys.argv[2] if len(sys.argv) > 2 else ""
    head = f"{'kernel':48s} {'instructions':>12s} {'calls':>5s}"
    print(f"{head}  loops with HMMA: instructions (HMMA)")
    for name, code in kernels(sass.stdout):
        if pattern not in name:
            continue
        calls = sum(t.startswith("CALL") for _, t in code)
        loops = ", ".join(f"{n} ({h})" for n, h in hmma_loops(code))
        print(f"{name:48s} {len(code):12d} {calls:5d}  {loops}")


if __name__ == "__main__":
    main()
