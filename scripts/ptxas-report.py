#!/usr/bin/env python3
"""Summarises `nvcc -Xptxas -v` output (read from stdin): one line per kernel instance with
registers, stack frame and spills, the worst first. Used on build logs (scripts/gpu-check.sh keeps one)."""
import re
import subprocess
import sys

entries, current = [], None
for line in sys.stdin:
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m:
        current = {"name": m.group(1), "regs": 0, "stack": 0, "spill": 0}
        entries.append(current)
        continue
    if current is None:
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores", line)
    if m:
        current["stack"], current["spill"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"Used (\d+) registers", line)
    if m:
        current["regs"] = int(m.group(1))

names = [e["name"] for e in entries]
try:
    demangled = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
except OSError:
    demangled = names
for e, d in zip(entries, demangled):
    d = re.sub(r"normkit::cuda::\(anonymous namespace\)::", "", d)
    d = re.sub(r"\(.*", "", d).replace("__nv_bfloat16", "bf16").replace("__half", "f16")
    e["short"] = d
limit = int(sys.argv[1]) if len(sys.argv) > 1 else 25
for e in sorted(entries, key=lambda e: (-e["spill"], -e["stack"], -e["regs"]))[:limit]:
    print(f'{e["regs"]:4d} regs {e["stack"]:4d} B stack {e["spill"]:4d} B spill  {e["short"]}')
