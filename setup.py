# Builds the `normkit` Python package: the PyTorch operators (python/csrc) compiled together with
# the library sources (src/) into one extension, normkit._C, by torch.utils.cpp_extension.
#
# Why torch's cpp_extension rather than scikit-build-core + CMake: the extension must be compiled
# with exactly the compiler flags, C++ ABI (_GLIBCXX_USE_CXX11_ABI), include paths and libraries of
# the torch it is imported into. cpp_extension reads all of that from the installed torch itself,
# finds nvcc through CUDA_HOME, and honours TORCH_CUDA_ARCH_LIST; a CMake build would have to
# reproduce it through find_package(Torch) and Caffe2's CMake files. Building the library sources
# straight into the extension (rather than linking a separately built libnormkit) keeps the wheel a
# single self-contained .so.
#
# Build modes
#   CUDA  when torch was built with CUDA and nvcc is found (CUDA_HOME / PATH): src/**/*.cpp except
#         src/cuda_stub.cpp, plus src/cuda/*.cu and src/cuda/*.cpp; NORMKIT_WITH_CUDA=1.
#   CPU   otherwise, or when NORMKIT_FORCE_CPU=1: src/**/*.cpp except src/cuda/, plus
#         src/cuda_stub.cpp. CPU tensors (and fp64) work; CUDA tensors raise a clear error.
# Environment
#   NORMKIT_FORCE_CPU=1     build the CPU-only extension even when CUDA is available
#   TORCH_CUDA_ARCH_LIST    e.g. "9.0" or "8.0;9.0+PTX"; default: sm_90 (H100/H200)
#   MAX_JOBS                parallel compile jobs (ninja)
#   NORMKIT_DEBUG=1         -O0 -g
#   NORMKIT_EXTRA_CXXFLAGS  more host compiler flags, space-separated (appended last)
import glob
import os
import sys
import sysconfig

from setuptools import find_packages, setup

ROOT = os.path.dirname(os.path.abspath(__file__))


def _import_torch():
    """Import the torch this package is built against.

    Under pip's default build isolation the interpreter's own site-packages are hidden; the
    extension must be compiled against the torch that will import it (the one already installed),
    never a second copy downloaded into the isolated environment, so they are put back on sys.path.
    """
    try:
        import torch  # noqa: F401
    except ImportError:
        for key in ("purelib", "platlib"):
            path = sysconfig.get_paths()[key]
            if path not in sys.path:
                sys.path.append(path)
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            raise RuntimeError(
                "normkit needs PyTorch installed before it is built: `pip install torch`, then "
                "`pip install .` (or `pip install --no-build-isolation .` offline)") from exc
    import torch
    return torch


torch = _import_torch()
from torch.utils import cpp_extension  # noqa: E402


def _rel(paths):
    return sorted(os.path.relpath(p, ROOT) for p in paths)


def _want_cuda():
    if os.environ.get("NORMKIT_FORCE_CPU", "0") not in ("", "0"):
        return False, "NORMKIT_FORCE_CPU is set"
    if torch.version.cuda is None:
        return False, "torch %s was built without CUDA" % torch.__version__
    if cpp_extension.CUDA_HOME is None:
        return False, "no CUDA toolkit found (set CUDA_HOME or put nvcc on PATH)"
    return True, "torch %s (CUDA %s), CUDA_HOME=%s" % (torch.__version__, torch.version.cuda,
                                                       cpp_extension.CUDA_HOME)


def _sources(with_cuda):
    cpp = set(glob.glob(os.path.join(ROOT, "src", "**", "*.cpp"), recursive=True))
    stub = os.path.join(ROOT, "src", "cuda_stub.cpp")
    cuda_dir = os.path.join(ROOT, "src", "cuda") + os.sep
    if with_cuda:
        cpp.discard(stub)
        cu = set(glob.glob(os.path.join(ROOT, "src", "cuda", "*.cu")))
    else:
        cpp = {p for p in cpp if not p.startswith(cuda_dir)}
        cu = set()
    binding = set(glob.glob(os.path.join(ROOT, "python", "csrc", "*.cpp")))
    sources = _rel(cpp | cu | binding)
    # One object file per source stem and folder: a.cpp next to a.cu would overwrite each other.
    stems = {}
    for s in sources:
        key = os.path.splitext(s)[0]
        if key in stems:
            raise RuntimeError("normkit setup.py: %s and %s would compile to the same object file"
                               % (stems[key], s))
        stems[key] = s
    if not any(s.startswith("src" + os.sep) for s in sources):
        raise RuntimeError("normkit setup.py: no library sources found under src/")
    return sources


def _extension():
    with_cuda, why = _want_cuda()
    print("normkit: building the %s extension (%s)" % ("CUDA" if with_cuda else "CPU-only", why))
    debug = os.environ.get("NORMKIT_DEBUG", "0") not in ("", "0")
    opt = ["-O0", "-g"] if debug else ["-O3"]
    cxx = opt + ["-std=c++17", "-Wall", "-Wno-unknown-pragmas"] + os.environ.get("NORMKIT_EXTRA_CXXFLAGS", "").split()
    include_dirs = [os.path.join(ROOT, "include"), os.path.join(ROOT, "src")]
    kwargs = dict(name="normkit._C", sources=_sources(with_cuda), include_dirs=include_dirs)
    if not with_cuda:
        return cpp_extension.CppExtension(extra_compile_args={"cxx": cxx}, **kwargs)
    nvcc = opt + [
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-lineinfo",
        # cpp_extension defines these to keep ATen's own half types unambiguous; the library's
        # kernels use cuda_fp16/cuda_bf16 operators and conversions, as in its CMake build.
        "-U__CUDA_NO_HALF_OPERATORS__",
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        "-DNORMKIT_WITH_CUDA=1",
    ]
    if not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        nvcc.append("-gencode=arch=compute_90,code=sm_90")
    return cpp_extension.CUDAExtension(
        define_macros=[("NORMKIT_WITH_CUDA", "1")],
        extra_compile_args={"cxx": cxx, "nvcc": nvcc},
        **kwargs)


setup(
    name="normkit",
    version="0.1.0",
    description="LayerNorm / RMSNorm forward and backward kernels with PyTorch semantics",
    package_dir={"": "python"},
    packages=find_packages(where="python", exclude=["csrc*"]),
    ext_modules=[_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension},
    python_requires=">=3.9",
    zip_safe=False,
)
