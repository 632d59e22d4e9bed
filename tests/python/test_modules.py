"""normkit.nn modules and normkit.swap_norms."""
import pytest

torch = pytest.importorskip("torch")

from nk_testutil import TOL, assert_close, device, import_normkit  # noqa: E402

normkit = import_normkit()

DEV = device()


def test_layer_norm_module_matches_torch_interface():
    for kwargs in ({}, {"eps": 1e-6}, {"elementwise_affine": False}, {"bias": False}):
        ref = torch.nn.LayerNorm((4, 32), **kwargs)
        nk = normkit.nn.LayerNorm((4, 32), **kwargs)
        assert isinstance(nk, torch.nn.LayerNorm)
        assert list(nk.state_dict()) == list(ref.state_dict()), kwargs
        assert [n for n, _ in nk.named_parameters()] == [n for n, _ in ref.named_parameters()]
        assert (nk.normalized_shape, nk.eps, nk.elementwise_affine) == (ref.normalized_shape, ref.eps,
                                                                        ref.elementwise_affine)
        if ref.weight is not None:
            with torch.no_grad():
                ref.weight.normal_()
                if ref.bias is not None:
                    ref.bias.normal_()
        nk.load_state_dict(ref.state_dict())
        x = torch.randn(3, 4, 32)
        assert_close(f"LayerNorm {kwargs}", nk(x), ref(x), 1e-5)


def test_rms_norm_module_matches_torch_interface():
    for kwargs in ({}, {"eps": 1e-6}, {"elementwise_affine": False}):
        ref = torch.nn.RMSNorm(64, **kwargs)
        nk = normkit.nn.RMSNorm(64, **kwargs)
        assert isinstance(nk, torch.nn.RMSNorm)
        assert list(nk.state_dict()) == list(ref.state_dict())
        assert (nk.normalized_shape, nk.eps) == (ref.normalized_shape, ref.eps)
        if ref.weight is not None:
            with torch.no_grad():
                ref.weight.normal_()
        nk.load_state_dict(ref.state_dict())
        x = torch.randn(5, 64)
        assert_close(f"RMSNorm {kwargs}", nk(x), ref(x), 1e-5)


class _Block(torch.nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, d)
        self.rms = torch.nn.RMSNorm(d, eps=1e-6)
        self.ln_noaffine = torch.nn.LayerNorm(d, elementwise_affine=False)
        self.seq = torch.nn.Sequential(torch.nn.LayerNorm(d, bias=False), torch.nn.GELU())

    def forward(self, x):
        return self.seq(self.ln_noaffine(self.rms(self.fc(self.ln1(x)))))


class FakeLlamaRMSNorm(torch.nn.Module):
    """The attribute layout of Hugging Face's LlamaRMSNorm: .weight and .variance_epsilon."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * xf.to(x.dtype)


class FakeGemmaRMSNorm(torch.nn.Module):
    """Hugging Face's GemmaRMSNorm: the attributes of an RMSNorm, but it scales by 1 + weight."""

    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(hidden))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return (xf * (1.0 + self.weight.float())).type_as(x)


class MyLayerNorm(torch.nn.LayerNorm):
    """A user subclass with its own forward: never swapped unless mapped explicitly."""

    def forward(self, x):
        return super().forward(x) * 2


def test_swap_norms_keeps_parameters_and_outputs():
    torch.manual_seed(0)
    model = _Block().to(DEV)
    for p in model.parameters():
        torch.nn.init.normal_(p)
    params_before = {name: p for name, p in model.named_parameters()}
    keys_before = list(model.state_dict())
    x = torch.randn(7, 32, device=DEV)
    expected = model(x)
    model.eval()
    assert normkit.swap_norms(model) == 4
    assert not model.training and not model.ln1.training
    assert type(model.ln1) is normkit.nn.LayerNorm and type(model.rms) is normkit.nn.RMSNorm
    assert type(model.seq[0]) is normkit.nn.LayerNorm and type(model.ln_noaffine) is normkit.nn.LayerNorm
    assert list(model.state_dict()) == keys_before
    for name, p in model.named_parameters():
        assert p is params_before[name], name  # the very same Parameter objects
    assert model.rms.eps == 1e-6 and model.ln_noaffine.weight is None and model.seq[0].bias is None
    assert_close("swapped model output", model(x), expected, 1e-5)
    # idempotent: normkit modules are not swapped again
    assert normkit.swap_norms(model) == 0


def test_swap_norms_gradients_reach_the_same_parameters():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)).to(DEV)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16)).to(DEV)
    ref.load_state_dict(model.state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    normkit.swap_norms(model)
    x = torch.randn(8, 16, device=DEV)
    r = torch.randn(8, 16, device=DEV)  # a random projection: sum(y**2) has ~zero gradient through a norm
    (model(x) * r).sum().backward()
    (ref(x) * r).sum().backward()
    for (n, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
        assert_close(n, p.grad, r.grad, 1e-5)
    before = model[1].weight.detach().clone()
    opt.step()  # the optimizer built before the swap still updates the norm's weight
    assert not torch.equal(before, model[1].weight.detach())


def test_swap_norms_mapping_for_custom_classes():
    model = torch.nn.ModuleDict({"a": FakeLlamaRMSNorm(48, eps=1e-5), "b": MyLayerNorm(48),
                                 "c": torch.nn.LayerNorm(48)}).to(DEV)
    with torch.no_grad():
        model["a"].weight.normal_()
    weight = model["a"].weight
    x = torch.randn(4, 48, device=DEV)
    expected = model["a"](x)
    assert normkit.swap_norms(model, {FakeLlamaRMSNorm: normkit.nn.RMSNorm}) == 2
    assert type(model["a"]) is normkit.nn.RMSNorm and model["a"].weight is weight and model["a"].eps == 1e-5
    assert model["a"].normalized_shape == (48,)
    assert type(model["b"]) is MyLayerNorm  # subclass with its own forward: left alone
    assert_close("mapped RMSNorm", model["a"](x), expected, 1e-5)
    # a callable target works too; MyLayerNorm doubles its output, so only unchecked
    with pytest.raises(ValueError, match="computes something else"):
        normkit.swap_norms(model, {MyLayerNorm: lambda m: normkit.nn.LayerNorm.from_module(m)})
    assert type(model["b"]) is MyLayerNorm
    assert normkit.swap_norms(model, {MyLayerNorm: lambda m: normkit.nn.LayerNorm.from_module(m, check=False)}) == 1
    assert type(model["b"]) is normkit.nn.LayerNorm


def test_swap_norms_refuses_a_mapped_class_that_computes_something_else():
    """A mapped class is compared with its replacement on a probe: Gemma's RMSNorm (1 + weight) has the
    attributes of an RMSNorm and would silently change the model's outputs; LlamaRMSNorm passes in every
    dtype (it rounds x * rstd to the input dtype before the weight: within the bound)."""
    torch.manual_seed(1)
    gemma = torch.nn.Sequential(FakeGemmaRMSNorm(64)).to(DEV)
    with pytest.raises(ValueError, match="FakeGemmaRMSNorm.forward computes something else"):
        normkit.swap_norms(gemma, {FakeGemmaRMSNorm: normkit.nn.RMSNorm})
    assert type(gemma[0]) is FakeGemmaRMSNorm  # nothing replaced
    with pytest.raises(ValueError, match="1 \\+ weight"):
        normkit.nn.RMSNorm.from_module(gemma[0])
    assert normkit.swap_norms(gemma, {FakeGemmaRMSNorm: normkit.nn.RMSNorm}, check=False) == 1
    assert type(gemma[0]) is normkit.nn.RMSNorm

    dtypes = (torch.float32, torch.float16, torch.bfloat16) if DEV == "cuda" else (torch.float32, torch.bfloat16)
    for dtype in dtypes:
        llama = torch.nn.Sequential(FakeLlamaRMSNorm(96)).to(DEV, dtype)
        with torch.no_grad():
            llama[0].weight.normal_()
        assert normkit.swap_norms(llama, {FakeLlamaRMSNorm: normkit.nn.RMSNorm}) == 1, dtype

    # a forward that cannot run on the probe is not silently trusted
    class TakesTwo(FakeLlamaRMSNorm):
        def forward(self, x, residual):
            return super().forward(x + residual)

    with pytest.raises(ValueError, match="cannot compare TakesTwo"):
        normkit.swap_norms(torch.nn.Sequential(TakesTwo(8)), {TakesTwo: normkit.nn.RMSNorm})
    # parameters on the meta device have no values: not compared
    meta = torch.nn.Sequential(FakeGemmaRMSNorm(8).to("meta"))
    assert normkit.swap_norms(meta, {FakeGemmaRMSNorm: normkit.nn.RMSNorm}) == 1


def test_swap_norms_names_the_norm_classes_it_leaves_alone():
    """A Hugging Face model's norms are their own classes: swap_norms without a mapping replaces none of them
    and says so (returning 0 alone went unnoticed); with the mapping, or for torch's own subclasses, no warning."""
    import warnings
    model = torch.nn.Sequential(FakeLlamaRMSNorm(8), torch.nn.Linear(8, 8), FakeLlamaRMSNorm(8), MyLayerNorm(8),
                                torch.nn.GroupNorm(2, 8))
    with pytest.warns(UserWarning, match=r"leaves FakeLlamaRMSNorm alone .*mapping=\{FakeLlamaRMSNorm: "
                                         r"normkit\.nn\.RMSNorm"):
        assert normkit.swap_norms(model) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert normkit.swap_norms(model, {FakeLlamaRMSNorm: normkit.nn.RMSNorm}) == 2
        assert normkit.swap_norms(torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.BatchNorm1d(8))) == 1


def test_swap_norms_keeps_the_modules_hooks():
    """Hooks registered on a swapped module keep running on its replacement (they were dropped), and
    their handles still remove them."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.LayerNorm(16), torch.nn.RMSNorm(16)).to(DEV)
    seen = []
    ramp = torch.linspace(0, 3, 16, device=DEV)  # a norm's output moves with it (not with a shift or scale)
    pre = model[1].register_forward_pre_hook(lambda m, args: (args[0] + ramp,))
    post = model[1].register_forward_hook(lambda m, args, out: seen.append(("forward", type(m).__name__)))
    model[2].register_full_backward_hook(lambda m, grad_in, grad_out: seen.append(("backward", type(m).__name__)))
    model[2].register_state_dict_pre_hook(lambda m, prefix, keep_vars: seen.append(("state_dict", prefix)))
    x = torch.randn(4, 16, device=DEV, requires_grad=True)
    expect = model(x)
    expect.sum().backward()
    seen.clear()
    assert normkit.swap_norms(model) == 2
    got = model(x)
    assert_close("y with the pre-hook adding the ramp", got, expect, 1e-5)
    got.sum().backward()
    model.state_dict()
    assert seen == [("forward", "LayerNorm"), ("backward", "RMSNorm"), ("state_dict", "2.")], seen
    assert isinstance(model[1], normkit.nn.LayerNorm) and isinstance(model[2], normkit.nn.RMSNorm)
    pre.remove()
    post.remove()
    seen.clear()
    h = model[0](x)
    ln = model[1]
    assert_close("LayerNorm without the pre-hook", ln(h), torch.nn.functional.layer_norm(h, (16,), ln.weight, ln.bias), 1e-5)
    assert ("forward", "LayerNorm") not in seen


def test_swap_norms_shared_module_stays_shared():
    ln = torch.nn.LayerNorm(8)
    model = torch.nn.ModuleList([ln, torch.nn.Sequential(ln)])
    assert normkit.swap_norms(model) == 1
    assert model[0] is model[1][0] and type(model[0]) is normkit.nn.LayerNorm and model[0].weight is ln.weight


def test_swap_norms_errors():
    with pytest.raises(ValueError, match="model itself"):
        normkit.swap_norms(torch.nn.LayerNorm(8))
    with pytest.raises(TypeError, match="model"):
        normkit.swap_norms("not a module")

    class WithBias(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(4))
            self.bias = torch.nn.Parameter(torch.zeros(4))

    with pytest.raises(ValueError, match="bias"):
        normkit.swap_norms(torch.nn.Sequential(WithBias()), {WithBias: normkit.nn.RMSNorm})


def test_module_dtype_combinations():
    dtypes = (torch.float16, torch.bfloat16) if DEV == "cuda" else (torch.bfloat16,)
    for dtype in dtypes:
        # fp32 parameters with low-precision activations (mixed precision without autocast casting)
        nk = normkit.nn.LayerNorm(64, device=DEV)
        ref = torch.nn.LayerNorm(64, device=DEV, dtype=torch.float64)
        x = torch.randn(10, 64, device=DEV).to(dtype)
        y = nk(x)
        assert y.dtype == dtype
        assert_close(f"fp32 weight, {dtype} x", y, ref(x.double()), TOL[dtype])


def test_readme_pytorch_usage_runs():
    """The README's PyTorch usage block, run as written, on a small model: the swap replaces the
    norms and keeps the Parameters, and the functional call matches F.layer_norm."""
    import os
    import re

    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md"), encoding="utf-8").read()
    section = readme[readme.index("## PyTorch usage"):]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block, "README.md has no python block under '## PyTorch usage'"
    hidden = 64
    model = torch.nn.Sequential(torch.nn.Linear(hidden, hidden), torch.nn.LayerNorm(hidden), torch.nn.RMSNorm(hidden))
    norm_weight = model[1].weight
    x = torch.randn(5, hidden)
    weight, bias = torch.randn(hidden), torch.randn(hidden)
    scope = {"model": model, "x": x, "hidden": hidden, "weight": weight, "bias": bias}
    exec(compile(block.group(1), "README.md", "exec"), scope)  # noqa: S102 -- the README's own example
    assert isinstance(model[1], normkit.nn.LayerNorm) and isinstance(model[2], normkit.nn.RMSNorm)
    assert model[1].weight is norm_weight
    assert_close("README layer_norm", scope["y"], torch.nn.functional.layer_norm(x, (hidden,), weight, bias, 1e-5), 1e-5)
