#!/usr/bin/env python3
"""Host time per call of normkit's PyTorch ops against ATen's.

A training step of a small model is host-bound when its kernels are short: the CPU time a norm
call takes to validate, allocate and launch is then the step's time (docs/NOTES.md, the BART
end-to-end entries). This measures that time: each case is called `--calls` times back to back
on tiny CUDA tensors (8 x 768 by default, so every kernel is shorter than its launch) with one
synchronisation at the end; wall time / calls is the host time of one call (the GPU keeps up).
The median of `--runs` such loops is reported, normkit next to ATen for the same work:

  ln_fwd     F.layer_norm                           vs normkit.layer_norm (no autograd)
  ln_bwd     aten.native_layer_norm_backward        vs torch.ops.normkit.layer_norm_backward (both below
             autograd, as a backward pass calls them)
  ln_train   F.layer_norm + backward (autograd)     vs normkit.layer_norm + backward
  rms_fwd    F.rms_norm                             vs normkit.rms_norm
  rms_bwd    aten._fused_rms_norm_backward          vs torch.ops.normkit.rms_norm_backward
  rms_train  F.rms_norm + backward (autograd)       vs normkit.rms_norm + backward
  empty      torch.empty_like(x) (the floor: one allocation through the dispatcher)

and normkit against itself, the same op and work (the "ATen" column then holds the torch.ops call):

  ln_fwd_ops    torch.ops.normkit.layer_norm_forward(...)[0]   vs normkit.layer_norm (its eager entry point)
  ln_train_ops  the same + backward (autograd)                  vs normkit.layer_norm + backward
  rms_fwd_ops   torch.ops.normkit.rms_norm_forward(...)[0]     vs normkit.rms_norm

--device cpu times CPU tensors (no GPU needed): normkit then runs its float64 reference and ATen its CPU
kernels, so the ATen rows compare different work; the *_ops rows still compare the same op.

    python bench/host_overhead.py [--device cuda|cpu] [--rows 8 --cols 768] [--dtypes f32,bf16]
                                  [--calls 2000] [--runs 7] [--md FILE] [--commit SHA]
"""
import argparse
import datetime
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import normkit

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def per_call_us(fn, calls, runs, dev):
    """Median over `runs` of (wall time of `calls` back-to-back calls) / calls, in microseconds."""
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    for _ in range(max(20, calls // 10)):  # warm-up: allocator, dispatcher caches, first launches
        fn()
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def cases(rows, cols, dtype, dev):
    """name -> (ATen callable, normkit callable); both do the same work on the same tensors."""
    shape = (cols,)
    x = torch.randn(rows, cols, device=dev, dtype=dtype)
    dy = torch.randn_like(x)
    w = torch.randn(cols, device=dev, dtype=dtype)
    b = torch.randn(cols, device=dev, dtype=dtype)
    _, mean, rstd = torch.ops.aten.native_layer_norm(x, shape, w, b, 1e-5)
    # normkit's own statistics for its backward: ATen's CPU kernels keep 16-bit ones (normkit's are fp32)
    _, nk_mean, nk_rstd = torch.ops.normkit.layer_norm_forward(x, list(shape), w, b, 1e-5)
    _, rms_rstd = torch.ops.normkit.rms_norm_forward(x, list(shape), w, None)
    mask3, mask2 = [True, True, True], [True, True]
    xg = x.clone().requires_grad_()
    wg = w.clone().requires_grad_()
    bg = b.clone().requires_grad_()

    def below_autograd(f):
        # How autograd's backward reaches the backward ops: below the Autograd key (normkit's backward
        # ops carry a Python autograd registration that only raises on double backward).
        def call():
            with torch._C._AutoDispatchBelowAutograd():
                return f()
        return call

    def train(f):
        def step():
            f().backward(dy)
        return step

    out = {
        "ln_fwd": (lambda: F.layer_norm(x, shape, w, b, 1e-5), lambda: normkit.layer_norm(x, shape, w, b, 1e-5)),
        "ln_bwd": (below_autograd(lambda: torch.ops.aten.native_layer_norm_backward(dy, x, shape, mean, rstd, w, b, mask3)),
                   below_autograd(lambda: torch.ops.normkit.layer_norm_backward(dy, x, list(shape), nk_mean, nk_rstd, w, b,
                                                                                mask3, "auto"))),
        "ln_train": (train(lambda: F.layer_norm(xg, shape, wg, bg, 1e-5)),
                     train(lambda: normkit.layer_norm(xg, shape, wg, bg, 1e-5))),
        "rms_fwd": (lambda: F.rms_norm(x, shape, w), lambda: normkit.rms_norm(x, shape, w)),
        "rms_train": (train(lambda: F.rms_norm(xg, shape, wg)), train(lambda: normkit.rms_norm(xg, shape, wg))),
        "ln_fwd_ops": (lambda: torch.ops.normkit.layer_norm_forward(x, list(shape), w, b, 1e-5)[0],
                       lambda: normkit.layer_norm(x, shape, w, b, 1e-5)),
        "ln_train_ops": (train(lambda: torch.ops.normkit.layer_norm_forward(xg, list(shape), wg, bg, 1e-5)[0]),
                         train(lambda: normkit.layer_norm(xg, shape, wg, bg, 1e-5))),
        "rms_fwd_ops": (lambda: torch.ops.normkit.rms_norm_forward(x, list(shape), w, None)[0],
                        lambda: normkit.rms_norm(x, shape, w)),
    }
    fused_rms_bwd = getattr(torch.ops.aten, "_fused_rms_norm_backward", None)
    if fused_rms_bwd is not None:
        out["rms_bwd"] = (below_autograd(lambda: fused_rms_bwd(dy, x, shape, rms_rstd, w, mask2)),
                          below_autograd(lambda: torch.ops.normkit.rms_norm_backward(dy, x, list(shape), rms_rstd, w,
                                                                                     mask2, "auto")))
    out["empty"] = (lambda: torch.empty_like(x), None)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--cols", type=int, default=768)
    parser.add_argument("--dtypes", default="f32,bf16")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--md", default=None, help="also write the table as markdown to FILE")
    parser.add_argument("--commit", default="unknown")
    args = parser.parse_args()
    if args.device == "cuda" and (not torch.cuda.is_available() or not normkit.built_with_cuda()):
        sys.exit("bench/host_overhead.py --device cuda needs a CUDA device and a CUDA build of normkit")
    where = (f"GPU: {torch.cuda.get_device_name()}" if args.device == "cuda"
             else f"CPU tensors on {platform.processor() or platform.machine()} ({torch.get_num_threads()} threads)")

    lines = [
        "# Host time per call: normkit's PyTorch ops vs ATen's",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- {where}; torch {torch.__version__}; normkit commit: {args.commit}",
        f"- {args.rows} x {args.cols} {args.device.upper()} tensors; {args.calls} calls back to back, one synchronisation; "
        f"median of {args.runs} loops; µs per call",
        "",
        "| case | dtype | ATen µs | normkit µs | normkit - ATen µs | normkit / ATen |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines[:6]), flush=True)
    for name in args.dtypes.split(","):
        dtype = DTYPES[name]
        for case, (aten_fn, nk_fn) in cases(args.rows, args.cols, dtype, args.device).items():
            try:
                aten_us = per_call_us(aten_fn, args.calls, args.runs, args.device)
            except (RuntimeError, TypeError) as e:  # an ATen op this torch lacks or spells differently
                print(f"  {case} {name}: ATen side skipped: {str(e).splitlines()[0][:120]}", flush=True)
                continue
            if nk_fn is None:
                row = f"| {case} | {name} | {aten_us:.2f} | - | - | - |"
            else:
                nk_us = per_call_us(nk_fn, args.calls, args.runs, args.device)
                row = f"| {case} | {name} | {aten_us:.2f} | {nk_us:.2f} | {nk_us - aten_us:+.2f} | {nk_us / aten_us:.2f} |"
            lines.append(row)
            print(row, flush=True)
    if args.md:
        with open(args.md, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
