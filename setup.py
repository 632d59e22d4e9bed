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
import shutil
import subprocess
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


def _links_libstdcxx_dynamically(compiler):
    """Whether `compiler` finds a shared libstdc++ to link against (-print-file-name answers with a
    path only when the file exists in its search dirs)."""
    try:
        out = subprocess.run([compiler, "-print-file-name=libstdc++.so"], capture_output=True, text=True,
                             timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return True  # cannot tell: leave the user's choice alone
    return os.path.isabs(out) and os.path.exists(out)


def _check_compiler():
    """Refuse a C++ compiler that would link libstdc++ statically into the extension.

    Why: the extension then carries a private copy of libstdc++ next to the shared one torch runs
    on, and the first std::ostringstream or std::string that crosses into libtorch crashes the
    process (seen on our H200 image, where CXX=/opt/gcc/bin/g++ wraps a relocated gcc 13 whose
    search dirs hold only libstdc++.a: a formatted TORCH_CHECK message segfaulted; /usr/bin/g++
    worked -- docs/NOTES.md). Such a CXX is replaced by the g++ on PATH when that one links libstdc++
    dynamically (a note is printed); NORMKIT_KEEP_CXX=1 keeps it."""
    cxx = os.environ.get("CXX")
    if not cxx or os.environ.get("NORMKIT_KEEP_CXX", "0") not in ("", "0"):
        return
    if _links_libstdcxx_dynamically(cxx.split()[0]):
        return
    for candidate in ("/usr/bin/g++", shutil.which("g++"), shutil.which("c++")):
        if candidate and os.path.realpath(candidate) != os.path.realpath(cxx.split()[0]) \
                and _links_libstdcxx_dynamically(candidate):
            cc = os.path.join(os.path.dirname(candidate), "gcc")
            print("normkit: CXX=%s would link libstdc++ statically into the extension (it finds no "
                  "libstdc++.so), which crashes next to torch's shared libstdc++; building with %s "
                  "instead (NORMKIT_KEEP_CXX=1 keeps CXX)" % (cxx, candidate))
            os.environ["CXX"] = candidate
            if os.path.exists(cc):
                os.environ["CC"] = cc
            return
    raise RuntimeError("normkit: CXX=%s finds no shared libstdc++ (-print-file-name=libstdc++.so), so the "
                       "extension would carry a static copy that crashes next to torch's; point CXX at a "
                       "g++ that links libstdc++ dynamically, or set NORMKIT_KEEP_CXX=1 to build anyway" % cxx)


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
    _check_compiler()
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
