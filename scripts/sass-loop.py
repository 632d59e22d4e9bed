#!/usr/bin/env python3
"""Instructions in a kernel's main loop, from the SASS of an object file, without a GPU: the offline
proxy for a row kernel's cost (ncu showed the row kernels issue-bound, docs/NOTES.md entry 8), and the
check that a change elsewhere in a kernel left its loop alone (entry 34: an epilogue change moved the
fused walk loop from 550 to 561 instructions and cost 1-5 % on the GPU).

  scripts/sass-loop.py OBJECT.o NAME-SUBSTRING [--elements N] [--containing OPCODE] [--base BASE.o]

OBJECT.o: a CUDA object of the CMake build (e.g. build-prebuilt/CMakeFiles/normkit.dir/src/cuda/
forward.cu.o), or a linked binary holding the kernels (normkit-bench, stripped or not: a prebuilt's).
Every kernel whose mangled name contains NAME-SUBSTRING is reported (e.g.
'forward_kernelI13__nv_bfloat16S3_Lb0ELb1ELi4ELi8E' = LayerNorm, staged, 4 x 8 elements per thread).
The loop is the longest backward branch of the function whose body holds none of its EXITs (a cold
block after the exits that branches back into the loop spans most of the function); --containing
OPCODE takes the longest one whose body holds that opcode instead (e.g. LDGSTS: a staged walk's loop,
not a longer epilogue loop).
--elements divides its instruction count by the elements a thread handles per iteration. --base
reports the same kernel's loop in BASE.o (e.g. an object built at the base commit) and the opcodes
whose counts differ.

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

INSTRUCTION = re.compile(r"/\*[0-9a-f]{4}\*/\s+\S")
OPCODE = re.compile(r"/\*[0-9a-f]{4}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")


def tool(name):
    folder = os.environ.get("NORMKIT_CUDA_BIN")
    path = os.path.join(folder, name) if folder else shutil.which(name)
    if not path or not os.path.exists(path):
        sys.exit(f"sass-loop: {name} not found (set NORMKIT_CUDA_BIN; see --help)")
    return path


def disassemble(obj):
    """nvdisasm text of every cubin in a CUDA object file."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([tool("cuobjdump"), "-xelf", "all", os.path.abspath(obj)], cwd=tmp, check=True,
                       capture_output=True)
        sass = ""
        for cubin in sorted(f for f in os.listdir(tmp) if f.endswith(".cubin")):
            sass += subprocess.run([tool("nvdisasm"), "-c", os.path.join(tmp, cubin)], check=True,
                                   capture_output=True, text=True).stdout
    return sass


def stable_name(name):
    """A mangled name without its anonymous namespace's per-build identifier (<length>_GLOBAL__N_...,
    which holds a hash of the build), so that two builds' kernels can be matched."""
    m = re.search(r"(\d+)(_GLOBAL__N_)", name)
    if not m:
        return name
    end = m.start(2) + int(m.group(1))
    return name[:m.start()] + "<anonymous>" + name[end:]


def functions(sass):
    """(mangled name, lines of its section) for each function of an nvdisasm listing."""
    for part in re.split(r"\n\s*\.section\s+\.text\.", sass)[1:]:
        yield part.split(",")[0].split("\n")[0], part.split("\n")


def opcodes(lines):
    ops = collections.Counter()
    for line in lines:
        m = OPCODE.search(line)
        if m:
            ops[m.group(1)] += 1
    return ops


def main_loop(lines, containing=None):
    """Lines of the longest backward branch's body (label to branch), optionally only among bodies
    that hold the opcode `containing`; None when there is no such loop. Bodies that hold the function's
    EXIT or RET come last: ptxas puts cold blocks after the function's exits and branches from them back
    into the loop, and such a branch spans most of the function (the fused backward's 564-instruction
    walk read as 2423-2967 instructions in session 47's variants, docs/NOTES.md entry 104)."""
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"(\.L_x_\d+):", line.strip()))}
    loops = sorted(((i - labels[m.group(1)], labels[m.group(1)], i) for i, line in enumerate(lines)
                    if (m := re.search(r"BRA `\((\.L_x_\d+)\)", line)) and m.group(1) in labels
                    and labels[m.group(1)] < i), reverse=True)
    longest_with_exit = None
    for _, begin, end in loops:
        body = lines[begin:end + 1]
        ops = opcodes(body)
        if containing is not None and ops[containing] == 0:
            continue
        if ops["EXIT"] == 0 and ops["RET"] == 0:
            return body
        longest_with_exit = longest_with_exit or body
    return longest_with_exit


def report(lines, containing, elements):
    """(one-line summary, opcode counts of the loop or None)."""
    total = sum(1 for line in lines if INSTRUCTION.search(line))
    body = main_loop(lines, containing)
    if body is None:
        return f"function {total} instructions, no loop" + (f" holding {containing}" if containing else ""), None
    ops = opcodes(body)
    n = sum(ops.values())
    per = f" = {n / elements:.1f} per element" if elements else ""
    return f"function {total} instructions, main loop {n}{per}", ops


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("object")
    ap.add_argument("name")
    ap.add_argument("--elements", type=int, default=0, help="elements per thread per loop iteration")
    ap.add_argument("--containing", help="the longest loop holding this opcode (e.g. LDGSTS)")
    ap.add_argument("--base", help="an object to compare the same kernels' loops with")
    args = ap.parse_args()
    base = {stable_name(name): lines for name, lines in functions(disassemble(args.base))} if args.base else {}
    found = False
    for name, lines in functions(disassemble(args.object)):
        if args.name not in name:
            continue
        found = True
        summary, ops = report(lines, args.containing, args.elements)
        print(f"{name}\n  {summary}")
        if ops:
            print("  " + ", ".join(f"{op} {c}" for op, c in ops.most_common(16)))
        if args.base:
            if stable_name(name) not in base:
                print("  base: no such kernel")
                continue
            base_summary, base_ops = report(base[stable_name(name)], args.containing, args.elements)
            print(f"  base: {base_summary}")
            if ops is not None and base_ops is not None:
                moved = sorted(op for op in set(ops) | set(base_ops) if ops[op] != base_ops[op])
                print("  loop opcodes that moved (base -> this): " +
                      (", ".join(f"{op} {base_ops[op]} -> {ops[op]}" for op in moved) if moved else "none"))
    if not found:
        sys.exit(f"sass-loop: no kernel matching {args.name!r} in {args.object}")


if __name__ == "__main__":
    main()
