"""python -m normkit: what this install is (its build, torch, the device, the planner table) and a self-check
of its norms against torch.nn.functional on this machine's device, forward and backward. Exit status 1 when
a case fails, e.g. a GPU this build has no kernels for, or a planner table that picks a wrong plan."""
import sys

import torch

import normkit

F = torch.nn.functional

# relative L2 error against a float64 reference on the dtype-rounded inputs (shared/norm-math.md)
_TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
# an odd row count with rows of 1000 columns, and rows the vectorised walks take
_SHAPES = ((37, 1000), (256, 4096))


def _rel(a, ref):
    a, ref = a.detach().double().cpu(), ref.detach().double().cpu()
    if not torch.isfinite(a).all():
        return float("inf")
    return float(torch.linalg.vector_norm(a - ref) / torch.linalg.vector_norm(ref).clamp_min(1e-30))


def _case(op, dtype, rows, cols, device, generator):
    """normkit's y and gradients against F.* in float64 on the same (dtype-rounded) inputs: the worst
    relative L2 error over the outputs."""
    def draw(*shape, scale=1.0, shift=0.0):
        return (shift + scale * torch.randn(*shape, generator=generator, dtype=torch.float64)).to(dtype)
    x, dy = draw(rows, cols), draw(rows, cols)
    w, b = draw(cols, scale=0.1, shift=1.0), draw(cols, scale=0.1)
    params = (w, b) if op == "layer_norm" else (w,)

    def run(fn, tensors, on):
        leaves = [t.detach().to(on).requires_grad_() for t in tensors]
        y = fn(*leaves)
        y.backward(dy.to(on, y.dtype))
        return [y] + [t.grad for t in leaves]

    if op == "layer_norm":
        ours = run(lambda x_, w_, b_: normkit.layer_norm(x_, (cols,), w_, b_), (x, *params), device)
        ref = run(lambda x_, w_, b_: F.layer_norm(x_, (cols,), w_, b_), [t.double() for t in (x, *params)], "cpu")
    else:
        ours = run(lambda x_, w_: normkit.rms_norm(x_, (cols,), w_, 1e-6), (x, *params), device)
        ref = run(lambda x_, w_: F.rms_norm(x_, (cols,), w_, 1e-6), [t.double() for t in (x, *params)], "cpu")
    return max(_rel(a, r) for a, r in zip(ours, ref))


def main() -> int:
    cuda = torch.cuda.is_available() and normkit.built_with_cuda()
    print(f"normkit {normkit.__version__}: {'CUDA' if normkit.built_with_cuda() else 'CPU-only'} build")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'})")
    if cuda:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        print(f"device: {props.name} (compute {props.major}.{props.minor}, {props.multi_processor_count} SMs)")
    else:
        print("device: none used (CPU tensors run normkit's float64 reference)")
    failed = 0
    try:
        table = normkit.planner_table()
        print(f"planner table: {table}")
        if cuda and table == "built-in (H200)" and "H200" not in props.name:
            # some crossovers differ between GPUs (docs/NOTES.md entries 92, 102: an H100 wants other cluster sizes)
            print("  note: this GPU has no built-in table of its own; `normkit-bench --tune FILE` (the C++ build's "
                  "benchmark) measures a table for it, used through NORMKIT_PLANNER_TABLE=FILE")
    except RuntimeError as error:  # a table file that does not load
        failed += 1
        print(f"planner table: FAILED, {error}")
    for op in ("layer_norm", "rms_norm"):
        try:  # a planner table that does not load fails here (the CPU path never plans)
            print(f"plan, {op} backward 16384 x 4096 bf16: {normkit.plan_backward(op, 16384, 4096, torch.bfloat16)}")
        except RuntimeError as error:
            failed += 1
            print(f"plan, {op} backward 16384 x 4096 bf16: FAILED, {error}")

    device = "cuda" if cuda else "cpu"
    dtypes = (torch.float32, torch.bfloat16, torch.float16) if cuda else (torch.float32,)
    generator = torch.Generator().manual_seed(0)
    print(f"self-check on {device} against torch.nn.functional (float64), y and every gradient:")
    for dtype in dtypes:
        for rows, cols in _SHAPES:
            for op in ("layer_norm", "rms_norm"):
                label = f"  {op:<10} {str(dtype).replace('torch.', ''):<8} {rows} x {cols}"
                try:
                    error = _case(op, dtype, rows, cols, device, generator)
                except Exception as exc:  # noqa: BLE001 (a kernel that cannot run is a failed case)
                    failed += 1
                    print(f"{label}: FAILED, {type(exc).__name__}: {exc}")
                    continue
                ok = error <= _TOLERANCE[dtype]
                failed += not ok
                print(f"{label}: relative error {error:.1e} (tolerance {_TOLERANCE[dtype]:.0e}) {'ok' if ok else 'FAILED'}")
    checks = len(dtypes) * len(_SHAPES) * 2 + 2  # and the two plans
    print(f"self-check: {'ok' if not failed else 'FAILED'} ({checks - failed} of {checks} checks passed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
