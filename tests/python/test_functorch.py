"""normkit.layer_norm / rms_norm under torch.func transforms: grad, vjp, jacrev, vmap (batched inputs,
batched weights, per-sample gradients), against torch.nn.functional's; second derivatives raise."""
import pytest

torch = pytest.importorskip("torch")

from nk_testutil import device, import_normkit  # noqa: E402

normkit = import_normkit()
F = torch.nn.functional
DEV = device()

# float64: normkit's reference path on the CPU (CUDA float64 is copied there too), so the comparison with
# torch's float64 norms is exact to rounding
OPS = {
    "layer_norm": (lambda t, w, b: normkit.layer_norm(t, (8,), w, b), lambda t, w, b: F.layer_norm(t, (8,), w, b)),
    "rms_norm": (lambda t, w, b: normkit.rms_norm(t, (8,), w), lambda t, w, b: F.rms_norm(t, (8,), w)),
}


def _inputs():
    g = torch.Generator().manual_seed(7)
    make = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64).to(DEV)  # noqa: E731
    return make(5, 3, 8), make(8), make(8)


def _close(a, b):
    a = a if isinstance(a, tuple) else (a,)
    b = b if isinstance(b, tuple) else (b,)
    assert len(a) == len(b)
    for p, q in zip(a, b):
        torch.testing.assert_close(p, q, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op", OPS)
def test_grad_vjp_jacrev_match_torch(op):
    ours, theirs = OPS[op]
    x, w, b = _inputs()

    def loss(f):
        return lambda t, w, b: f(t, w, b).square().sum()

    for argnums in (0, 1, (0, 1, 2)):
        _close(torch.func.grad(loss(ours), argnums=argnums)(x, w, b),
               torch.func.grad(loss(theirs), argnums=argnums)(x, w, b))
    y, vjp = torch.func.vjp(lambda t: ours(t, w, b), x)
    y_ref, vjp_ref = torch.func.vjp(lambda t: theirs(t, w, b), x)
    _close(y, y_ref)
    _close(vjp(y), vjp_ref(y_ref))
    _close(torch.func.jacrev(lambda t: ours(t, w, b))(x[0, 0]), torch.func.jacrev(lambda t: theirs(t, w, b))(x[0, 0]))


@pytest.mark.parametrize("op", OPS)
def test_vmap_and_per_sample_gradients_match_torch(op):
    ours, theirs = OPS[op]
    x, w, b = _inputs()
    weights = torch.randn(5, 8, dtype=torch.float64, device=DEV)
    # the batch on dim 0 (folded into rows), on dim 1, and with a weight per batch entry (one call each)
    for in_dims, args in (((0, None, None), (x, w, b)), ((1, None, None), (x, w, b)), ((0, 0, None), (x, weights, b))):
        _close(torch.vmap(ours, in_dims=in_dims)(*args), torch.vmap(theirs, in_dims=in_dims)(*args))

    def per_sample(f):
        return torch.func.vmap(torch.func.grad(lambda t, w, b: f(t, w, b).square().sum(), argnums=(0, 1, 2)),
                               in_dims=(0, None, None))

    got, want = per_sample(ours)(x, w, b), per_sample(theirs)(x, w, b)
    assert got[1].shape == (5, 8)
    _close(got, want)


@pytest.mark.parametrize("op", OPS)
def test_vmap_composes_with_the_other_transforms(op):
    """vmap inside or outside grad / vjp / jacrev / another vmap (the vmap rules call the Python Functions
    again, so each level sees one it accepts; calling the ops there failed with functorch's refusal of the
    C++ autograd, or a missing batching rule, or fell back to the slow per-op loop with a warning)."""
    import warnings
    from torch.func import grad, jacrev, vjp, vmap
    ours, theirs = OPS[op]
    x, w, b = _inputs()
    fo = lambda t: ours(t, w, b)  # noqa: E731
    ft = lambda t: theirs(t, w, b)  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the fallback's performance warning fails the test
        for compose in (lambda f: grad(lambda t: (vmap(f)(t) ** 2).sum())(x),
                        lambda f: vjp(vmap(f), x)[1](x),
                        lambda f: jacrev(vmap(f))(x[0]),
                        lambda f: vmap(jacrev(f))(x),
                        lambda f: vmap(vmap(f))(x),
                        lambda f: vmap(vmap(grad(lambda t: (f(t) ** 3).sum())))(x)):
            _close(compose(fo), compose(ft))


@pytest.mark.parametrize("op", OPS)
def test_functionalize_runs_the_ops(op):
    """functionalize alone takes the ops as they are (they are functional): the values of torch's norms, and
    make_fx of it records normkit's op (the custom Functions of the other transforms have no functionalize
    rule in PyTorch: they raised "NYI: Functionalize rule for custom_function_call")."""
    from torch.fx.experimental.proxy_tensor import make_fx
    ours, theirs = OPS[op]
    x, w, b = _inputs()
    _close(torch.func.functionalize(lambda t: ours(t, w, b))(x), theirs(x, w, b))
    graph = make_fx(torch.func.functionalize(lambda t: ours(t, w, b)))(x)
    assert any(f"normkit.{op}_forward" in str(n.target) for n in graph.graph.nodes), graph.code


@pytest.mark.parametrize("op", OPS)
def test_second_derivatives_raise(op):
    ours, _ = OPS[op]
    x, w, b = _inputs()
    inner = torch.func.grad(lambda t: ours(t, w, b).square().sum())
    with pytest.raises(RuntimeError, match="double backward is not supported"):
        torch.func.grad(lambda t: inner(t).sum())(x[0, 0])
    with pytest.raises(NotImplementedError, match="jvp"):  # forward mode (jacfwd, hessian): not implemented
        torch.func.jacfwd(lambda t: ours(t, w, b))(x[0, 0])


_TRANSFORMS = {  # each maps a norm f(t, w, b) to a function of (x, w) that returns one tensor
    "grad": lambda f, b: lambda x, w: torch.func.grad(lambda t: f(t, w, b).float().sin().sum())(x),
    "vjp": lambda f, b: lambda x, w: torch.func.vjp(lambda t: f(t, w, b), x)[1](torch.ones_like(x))[0],
    "jacrev_weight": lambda f, b: lambda x, w: torch.func.jacrev(lambda v: f(x, v, b).float().sum((0, 1)))(w),
    "vmap_grad": lambda f, b: lambda x, w: torch.func.vmap(torch.func.grad(lambda t: f(t, w, b).float().sin().sum()))(x),
    "vmap": lambda f, b: lambda x, w: torch.func.vmap(lambda t: f(t, w, b))(x),
}


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("transform", list(_TRANSFORMS))
@pytest.mark.parametrize("dtype, weight_dtype", [(torch.float64, torch.float64), (torch.float32, torch.float32),
                                                 (torch.bfloat16, torch.float32), (torch.float16, torch.float16)])
def test_compile_over_a_transform(op, transform, dtype, weight_dtype):
    """torch.compile(torch.func.grad(f)) and the like: under Dynamo the transform is hidden from the ops'
    dispatch, so functional.py traces the norm from ATen ops there (_functorch.composite); the result must
    be eager normkit's under the same transform and torch's in float64."""
    x, w, b = _inputs()
    x, w, b = x.to(dtype), w.to(weight_dtype), b.to(weight_dtype)
    ours, theirs = OPS[op]
    eager = _TRANSFORMS[transform](ours, b)(x, w)
    torch._dynamo.reset()
    got = torch.compile(_TRANSFORMS[transform](ours, b), backend="aot_eager", fullgraph=True)(x, w)
    wide = lambda t: t.double()  # noqa: E731
    rms_eps = torch.finfo(torch.float64 if dtype == torch.float64 else torch.float32).eps  # normkit's default
    reference = _TRANSFORMS[transform](lambda t, v, c: theirs(t, v, c) if op == "layer_norm" else
                                       F.rms_norm(t, (8,), v, eps=rms_eps), wide(b))(wide(x), wide(w))
    assert got.dtype == eager.dtype and got.shape == eager.shape
    # CUDA kernels sum in another order than the ATen ops: up to an ulp of the dtype apart (on the CPU, where
    # eager normkit is the float64 reference, the probe found 16-bit results bit-equal)
    tolerance = {torch.float64: 1e-10, torch.float32: 1e-5}.get(dtype, 1e-2)
    torch.testing.assert_close(got, eager, rtol=tolerance, atol=tolerance)
    torch.testing.assert_close(got.double(), reference, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("op", list(OPS))
def test_compile_over_a_transform_names_a_bad_argument(op):
    """The ops' checks (their messages) run on the traced path too: a weight of the wrong shape is named."""
    x, _, b = _inputs()
    ours, _ = OPS[op]
    torch._dynamo.reset()
    with pytest.raises(Exception, match="argument 'weight' has shape \\[7\\], expected normalized_shape \\[8\\]"):
        torch.compile(torch.func.grad(lambda t: ours(t, b[:7], b).sum()), backend="eager", fullgraph=True)(x)


@pytest.mark.parametrize("op", list(OPS))
def test_compile_over_a_transform_is_twice_differentiable(op):
    """The traced ATen form has every derivative: hessian (forward over reverse) and grad of grad compile,
    where eager transforms raise (test_second_derivatives_raise)."""
    x, w, b = _inputs()
    ours, theirs = OPS[op]
    row = x[0, 0]
    torch._dynamo.reset()
    got = torch.compile(torch.func.hessian(lambda t: ours(t, w, b).sin().sum()), backend="aot_eager", fullgraph=True)(row)
    _close(got, torch.func.hessian(lambda t: theirs(t, w, b).sin().sum())(row))
    torch._dynamo.reset()
    inner = lambda f: torch.func.grad(lambda t: f(t, w, b).sin().sum())  # noqa: E731
    got = torch.compile(torch.func.grad(lambda t: inner(ours)(t).square().sum()), backend="aot_eager", fullgraph=True)(x)
    _close(got, torch.func.grad(lambda t: inner(theirs)(t).square().sum())(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_compile_over_a_transform_keeps_the_default_eps(dtype):
    """Rows whose mean square is near eps (1e-5 for layer_norm; rms_norm's default, the epsilon of float32
    or float64) tell a wrong eps at once: compiled over vmap they must match eager normkit."""
    x, w, b = (t.to(dtype) for t in _inputs())
    for scale, f in ((1e-3, lambda t: normkit.layer_norm(t, (8,), w, b)),
                     (1e-4 if dtype == torch.float32 else 1e-8, lambda t: normkit.rms_norm(t, (8,), w))):
        small = x * scale
        torch._dynamo.reset()
        got = torch.compile(torch.func.vmap(f), backend="aot_eager", fullgraph=True)(small)
        torch.testing.assert_close(got, f(small), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", list(OPS))
def test_compile_over_a_transform_with_eps_an_input(op):
    """eps passed into the compiled function: with dynamic=True Dynamo traces it as a symbolic float, which the
    composite's eps check must take (math.isfinite cannot); a bad eps is still named."""
    x, w, b = _inputs()
    norm = {"layer_norm": lambda t, eps: normkit.layer_norm(t, (8,), w, b, eps),
            "rms_norm": lambda t, eps: normkit.rms_norm(t, (8,), w, eps)}[op]
    fn = lambda t, eps: torch.func.vmap(lambda u: norm(u, eps))(t)  # noqa: E731
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=True)
    for eps in (1e-3, 0.5):
        _close(compiled(x, eps), fn(x, eps))
    with pytest.raises(Exception, match="argument 'eps' is -1.0, expected a finite value >= 0"):
        compiled(x, -1.0)
