"""normkit's norms on DTensors (tensor / sequence parallelism), on two CPU processes over gloo: the values and
gradients of torch.nn.functional's norms on the whole tensors, the placements a sharding rule would give,
and a sequence-parallel block (torch.distributed.tensor.parallel) with normkit's modules swapped in, eager
and under torch.compile, against the same block with torch's modules; and FSDP2 over the norms."""
import copy
import os
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available():
    pytest.skip("torch.distributed is not available", allow_module_level=True)

from nk_testutil import assert_close, import_normkit  # noqa: E402

import_normkit()
WORLD = 2


def _functional_cases(rank, mesh):
    import torch.nn.functional as F
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    import normkit

    def case(name, x_shape, norm_shape, placement, affine=True, bias=True, rms=False, expect_rows=None):
        g = torch.Generator().manual_seed(len(name))  # every rank draws the same whole tensors
        x = torch.randn(x_shape, generator=g, dtype=torch.float64).requires_grad_()
        w = torch.randn(norm_shape, generator=g, dtype=torch.float64).requires_grad_() if affine else None
        b = torch.randn(norm_shape, generator=g, dtype=torch.float64).requires_grad_() if bias and not rms else None
        dy = torch.randn(x_shape, generator=g, dtype=torch.float64)
        if isinstance(placement, Partial):  # each rank holds a share of the sum
            dx = DTensor.from_local(x.detach() / WORLD, mesh, [placement], run_check=False).requires_grad_()
        else:
            dx = distribute_tensor(x.detach(), mesh, [placement]).requires_grad_()

        def whole(t):
            return None if t is None else distribute_tensor(t.detach(), mesh, [Replicate()]).requires_grad_()
        dw, db = whole(w), whole(b)
        if rms:
            y, ref = normkit.rms_norm(dx, norm_shape, dw, 1e-5), F.rms_norm(x, norm_shape, w, 1e-5)
        else:
            y, ref = normkit.layer_norm(dx, norm_shape, dw, db), F.layer_norm(x, norm_shape, w, b)
        assert isinstance(y, DTensor) and y.shape == x.shape, name
        assert tuple(y.placements) == (expect_rows or placement,), (name, y.placements)
        y.backward(distribute_tensor(dy, mesh, list(y.placements)))
        ref.backward(dy)
        assert_close(f"{name} y", y.full_tensor(), ref, 1e-12)
        assert_close(f"{name} dx", dx.grad.full_tensor(), x.grad, 1e-12)
        for label, d, t in (("dweight", dw, w), ("dbias", db, b)):
            if t is not None:
                # a weight's gradient summed over the ranks' rows: a partial sum a rank where rows are sharded
                rows_sharded = isinstance(y.placements[0], Shard)
                assert tuple(d.grad.placements) == ((Partial(),) if rows_sharded else (Replicate(),)), (name, label)
                assert_close(f"{name} {label}", d.grad.full_tensor(), t.grad, 1e-12)

    case("sequence-sharded", (4, 6, 16), (16,), Shard(1))
    case("batch-sharded", (4, 6, 16), (16,), Shard(0))
    case("replicated", (4, 6, 16), (16,), Replicate())
    case("uneven shards", (4, 7, 16), (16,), Shard(1))
    case("two normalized dims", (4, 6, 16), (6, 16), Shard(0))
    case("no affine", (4, 6, 16), (16,), Shard(1), affine=False, bias=False)
    case("weight, no bias", (4, 6, 16), (16,), Shard(1), bias=False)
    # shards the norm cannot keep are gathered first: a normalized dim, a partial sum
    case("normalized dim sharded", (4, 6, 16), (16,), Shard(2), expect_rows=Replicate())
    case("sharded inside a 2-dim shape", (4, 6, 16), (6, 16), Shard(1), expect_rows=Replicate())
    case("partial sum", (4, 6, 16), (16,), Partial(), expect_rows=Replicate())
    case("RMSNorm", (4, 6, 16), (16,), Shard(1), rms=True)
    case("RMSNorm, no weight", (4, 6, 16), (16,), Shard(0), affine=False, rms=True)

    x = distribute_tensor(torch.randn(4, 16), mesh, [Shard(0)])
    with pytest.raises(RuntimeError, match="mixed torch.Tensor and DTensor"):
        normkit.layer_norm(x, (16,), torch.ones(16))


class _Block(torch.nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.up = torch.nn.Linear(d, 2 * d)
        self.down = torch.nn.Linear(2 * d, d)
        self.rms = torch.nn.RMSNorm(d)

    def forward(self, h):
        return self.rms(h + self.down(torch.relu(self.up(self.norm(h)))))


def _sequence_parallel_block(rank, mesh):
    """torchtitan's layout: norms under SequenceParallel (the sequence sharded), the MLP column / row
    parallel in between."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, SequenceParallel,
                                                   parallelize_module)

    import normkit

    torch.manual_seed(0)
    reference = _Block().double()
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_()
    ours = copy.deepcopy(reference)
    assert normkit.swap_norms(ours) == 2
    plan = {"norm": SequenceParallel(), "up": ColwiseParallel(input_layouts=Shard(1)),
            "down": RowwiseParallel(output_layouts=Shard(1)), "rms": SequenceParallel()}
    for model in (reference, ours):
        parallelize_module(model, mesh, plan)
    h = torch.randn(2, 8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    local_h = h.chunk(WORLD, dim=1)[rank]  # SequenceParallel takes each rank's part of the sequence

    def step(fn, model):
        model.zero_grad(set_to_none=True)
        out = fn(local_h.clone()).full_tensor()
        out.square().sum().backward()
        return out, {n: p.grad.full_tensor() for n, p in model.named_parameters()}

    expect_y, expect_grads = step(reference, reference)
    counter = CompileCounterWithBackend("aot_eager")
    for label, fn in (("eager", ours), ("compiled", torch.compile(ours, backend=counter))):
        y, grads = step(fn, ours)
        assert_close(f"{label} y", y, expect_y, 1e-12)
        for n, g in expect_grads.items():
            assert_close(f"{label} {n}.grad", grads[n], g, 1e-12)
    traced = {str(n.target) for g in counter.graphs for n in g.graph.nodes}
    assert counter.frame_count == 1 and {"normkit.layer_norm_forward", "normkit.rms_norm_forward"} <= traced, traced


def _fully_sharded(rank, mesh):
    """FSDP2 (fully_shard) over modules holding the norms: the gradients of torch's norms, sharded the same."""
    from torch.distributed.fsdp import fully_shard

    import normkit

    torch.manual_seed(0)
    reference = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.Linear(16, 16),
                                    torch.nn.RMSNorm(16)).double()
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_()
    ours = copy.deepcopy(reference)
    assert normkit.swap_norms(ours) == 2
    x = torch.randn(8, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(rank))  # a batch a rank
    grads = []
    for model in (reference, ours):
        fully_shard(model[1], mesh=mesh)
        fully_shard(model[3], mesh=mesh)
        fully_shard(model, mesh=mesh)
        model(x).square().sum().backward()
        grads.append({n: p.grad.full_tensor() for n, p in model.named_parameters()})
    for n, g in grads[0].items():
        assert_close(f"FSDP2 {n}.grad", grads[1][n], g, 1e-12)


def _worker(rank, init_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=WORLD)
    try:
        from torch.distributed.tensor import init_device_mesh
        mesh = init_device_mesh("cpu", (WORLD,))
        _functional_cases(rank, mesh)
        _sequence_parallel_block(rank, mesh)
        _fully_sharded(rank, mesh)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # Every check passed: leave without the interpreter's finalization. Gloo's worker thread can still be
    # destroying a finished collective that holds tensors (the barrier's, the all-gathers' before it); from a
    # finalizing interpreter its decref cannot take the GIL, the thread is ended inside a noexcept destructor,
    # and std::terminate aborts the rank ("terminate called without an active exception"; core dump:
    # ~AsyncBarrierWork -> decref_pyobject -> take_gil -> pthread_exit). torch's teardown race, not a check of
    # ours: 3 aborts in about 200 runs on a 2-core machine. A failed check still raises above, and spawn reports
    # its traceback.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def test_dtensor_norms_on_two_processes(tmp_path):
    import torch.multiprocessing as mp
    # an assertion in a rank fails the spawn with that rank's traceback
    mp.spawn(_worker, args=(str(tmp_path / "rendezvous"),), nprocs=WORLD, join=True)
