"""Makes torch.compile's C++ (CPU) path safe on a machine that also has a system LibTorch.

Inductor links the C++ it generates with -L<python's LIBDIR>; Debian's python has LIBDIR
/usr/lib/x86_64-linux-gnu, where Debian's LibTorch 1.13 lives, so a pip torch's kernels can be
linked against the wrong libtorch_cpu. The first victim is Inductor's own test of the CPU's
vector ISA: its probe library fails to load, the ISA is taken as none, and that verdict is cached
on disk under the probe's source alone (in /tmp/torchinductor_<user>), so every later process
sharing the cache, fixed or not, compiles without vectors, and CPU FlexAttention refuses to
lower at all ("AssertionError" in cpp_micro_gemm).

use_own_inductor() gives this process a compile cache of its own (unless TORCHINDUCTOR_CACHE_DIR
is already set) and points LIBDIR at the imported torch's lib folder. Call it before the first
torch.compile; TORCHINDUCTOR_COMPILE_THREADS=1 keeps compiling in this process, which the LIBDIR
fix does not reach beyond.
"""
import atexit
import os
import shutil
import sysconfig
import tempfile


def use_own_inductor():
    """Returns a note on what it changed (empty when nothing needed changing)."""
    import torch
    notes = []
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        cache = tempfile.mkdtemp(prefix="combiner-inductor-")
        atexit.register(shutil.rmtree, cache, ignore_errors=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
        notes.append(f"Inductor cache {cache}")
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    other = os.path.join(libdir, "libtorch_cpu.so")
    if os.path.exists(other) and not os.path.samefile(other, os.path.join(torch_lib,
                                                                          "libtorch_cpu.so")):
        sysconfig.get_config_vars()["LIBDIR"] = torch_lib
        notes.append(f"{other} is another LibTorch: compiled kernels link against {torch_lib}")
    return "; ".join(notes)
