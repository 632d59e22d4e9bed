#!/usr/bin/env python3
"""Instructions in a kernel's main loop, from the SASS of an object file, without a GPU: the offline
proxy for a row kernel's cost (ncu showed the row kernels issue-bound, docs/NOTES.md entry 8).

  scripts/sass-loop.py OBJECT.o NAME-SUBSTRING [--elements N]

OBJECT.o: a CUDA object of the CMake build (e.g. build-prebuilt/CMakeFiles/normkit.dir/src/cuda/
forward.cu.o). Every kernel whose mangled name contains NAME-SUBSTRING is reported (e.g.
'forward_kernelI13__nv_bfloat16S3_Lb0ELb1ELi4ELi8E' = LayerNorm, staged, 4 x 8 elements per thread).
The loop is the longest backward branch of the function; --elements divides its instruction count
by the elements a thread handles per iteration.

Needs cuobjdump and nvdisasm (CUDA toolkit, or PyPI: `pip download --no-deps nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm`, unzip, point NORMKIT_CUDA_BIN at the folder holding both)."""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile


def tool(name):
    folder = os.environ.get("NORMKIT_CUDA_BIN")
    path = os.path.join(folder, name) if folder else shutil.which(name)
    if not path or not os.path.exists(path):
        sys.exit(f"sass-loop: {name} not found (set NORMKIT_CUDA_BIN; see --help)")
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object")
    ap.add_argument("name")
    ap.add_argument("--elements", type=int, default=0, help="elements per thread per loop iteration")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool("cuobjdump"), "-xelf", "all", os.path.abspath(args.object)], cwd=tmp, check=True,
                       capture_output=True)
        sass = ""
        for cubin in sorted(f for f in os.listdir(tmp) if f.endswith(".cubin")):
            sass += subprocess.run([tool("nvdisasm"), "-c", os.path.join(tmp, cubin)], check=True,
                                   capture_output=True, text=True).stdout
    found = False
    for part in re.split(r"\n\s*\.section\s+\.text\.", sass)[1:]:
        name = part.split(",")[0].split("\n")[0]
        if args.name not in name:
            continue
        found = True
        lines = part.split("\n")
        labels = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"(\.L_x_\d+):", l.strip()))}
        loops = [(i - labels[m.group(1)], labels[m.group(1)], i) for i, l in enumerate(lines)
                 if (m := re.search(r"BRA `\((\.L_x_\d+)\)", l)) and m.group(1) in labels and labels[m.group(1)] < i]
        total = sum(1 for l in lines if re.search(r"/\*[0-9a-f]{4}\*/\s+\S", l))
        if not loops:
            print(f"{name}: {total} instructions, no loop")
            continue
        _, begin, end = max(loops)
        ops = collections.Counter()
        for l in lines[begin:end + 1]:
            m = re.search(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)", l)
            if m:
                ops[m.group(1)] += 1
        n = sum(ops.values())
        per = f" = {n / args.elements:.1f} per element" if args.elements else ""
        print(f"{name}\n  function {total} instructions, main loop {n}{per}")
        print("  " + ", ".join(f"{op} {c}" for op, c in ops.most_common(16)))
    if not found:
        sys.exit(f"sass-loop: no kernel matching {args.name!r} in {args.object}")


if __name__ == "__main__":
    main()
