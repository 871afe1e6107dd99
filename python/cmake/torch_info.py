"""Writes what the package's CMake build needs to know about the torch it builds against (the one
the building Python imports: pip's, conda's, ..., never a system LibTorch) as a CMake file:
  python torch_info.py OUT.cmake
Exits with one line when that Python has no torch or one older than the package supports."""
import os
import sys

MINIMUM = (2, 4)  # torch.library.opcheck and register_fake, which the tests and compile use


def main(out_path):
    try:
        import torch
    except ImportError as e:
        sys.exit(f"combiner_attention builds against the torch of the Python that runs the build, "
                 f"and {sys.executable} cannot import it ({e}): install torch there, then build "
                 f"with `pip install --no-build-isolation ./python` (pip's build isolation hides "
                 f"the installed torch)")
    version = torch.__version__.split("+")[0]
    major, minor = (int(x) for x in version.split(".")[:2])
    if (major, minor) < MINIMUM:
        sys.exit(f"combiner_attention needs torch >= {'.'.join(map(str, MINIMUM))}, "
                 f"found {torch.__version__} in {sys.executable}")
    root = os.path.dirname(torch.__file__)
    facts = {
        "TORCH_VERSION": version,
        "TORCH_INCLUDE_DIRS": f"{root}/include;{root}/include/torch/csrc/api/include",
        "TORCH_LIB_DIR": f"{root}/lib",
        "TORCH_CXX11_ABI": str(int(torch._C._GLIBCXX_USE_CXX11_ABI)),
        "TORCH_CUDA_VERSION": torch.version.cuda or "",
        # LibTorch from 2.12 on needs C++20 (scripts/build-cuda.sh chooses the same way).
        "TORCH_CXX_STANDARD": "20" if (major, minor) >= (2, 12) else "17",
    }
    with open(out_path, "w") as f:
        for key, value in facts.items():
            f.write(f'set({key} "{value}")\n')


if __name__ == "__main__":
    main(sys.argv[1])
