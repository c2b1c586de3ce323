"""The torch-free task arithmetic kernel (mgit/merge/methods/affine_arrays.py): bit for bit the
torch kernel on every slice it accepts, declining what it cannot match, a merge that needs
nothing else never imports torch, and a torch that computes otherwise (affine_probe) merges every
chunk itself."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from helpers.models import commit_model, frozen_finetune, llama_state_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgit.merge import kernels
from mgit.merge.methods import affine_arrays, affine_probe
from mgit.merge.methods.affine_arrays import BLOCK, INTERLEAVED, MAX_SUMMED, AffineKernel, affine_kernel
from mgit.merge.methods.registry import get_method
from mgit.merge.methods.task_arithmetic import TaskArithmetic

TORCH_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16}


def bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def torch_merge(base, experts, params, present):
    """What the engine's torch path computes for a slice: one torch thread, as on the pool."""
    method = get_method("task_arithmetic")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return method.combine_slice(base, experts, params, None, 0, present)
    finally:
        torch.set_num_threads(before)


def order_sensitive(g: torch.Generator, shape: tuple[int, ...], lowest: int, highest: int) -> torch.Tensor:
    """±m·2^e with 8 mantissa bits and exponents spread over [lowest, highest): float32 sums of
    such values are often inexact, so the order of a sum shows in its rounding."""
    e = torch.randint(lowest, highest, shape, generator=g).float()
    m = torch.randint(128, 256, shape, generator=g).float() / 128
    return torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0) * m * torch.pow(2.0, e)


@st.composite
def slices(draw):
    dtype = draw(st.sampled_from(sorted(TORCH_DTYPES)))
    count = draw(st.integers(1, MAX_SUMMED))
    n = draw(st.sampled_from([1, 2, 7, 31, 64, 128, 200, 1152, 40_960, 1 << 19]))
    seed = draw(st.integers(0, 2**31))
    lowest = draw(st.integers(-30, 0) if dtype == "BF16" else st.integers(-12, 0))
    # any weights, or powers of two only (then the kernel skips the rounding after each product
    # when it would change nothing), or all ones (a plain sum: no products at all)
    weight = st.floats(-2, 2, allow_subnormal=False) | st.sampled_from([0.0625, -0.5, 0.25, 2.0, 1.0, 2.0**-20])
    weights = draw(
        st.lists(weight, min_size=count, max_size=count)
        | st.lists(st.sampled_from([0.0625, -0.5, 1.0, 2.0**-20]), min_size=count, max_size=count)
        | st.just([1.0] * count)
    )
    normalize = draw(st.booleans())
    lam = draw(st.sampled_from([1.0, 0.5, 1.7, -0.3, 2.0**-30]))
    present = draw(st.none() | st.lists(st.integers(0, count - 1), min_size=0, max_size=count, unique=True).map(sorted))
    return dtype, count, n, seed, lowest, weights, normalize, lam, present


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slices())
def test_array_kernel_gives_the_torch_kernels_bits(case):
    dtype, count, n, seed, lowest, weights, normalize, lam, present = case
    g = torch.Generator().manual_seed(seed)
    tdt = TORCH_DTYPES[dtype]
    base = order_sensitive(g, (n,), lowest, 4).to(tdt)
    base[: n // 9] = 0.0
    base[n // 9 : n // 7] = -0.0
    experts = [(base.float() + order_sensitive(g, (n,), lowest, 2)).to(tdt) for _ in range(count)]
    given = experts if present is None else [experts[k] for k in present]
    params = get_method("task_arithmetic").resolve({"weight": weights, "normalize": normalize, "lambda": lam}, count)
    kernel = affine_kernel(dtype, params["weight"], params["normalize"], params["lambda"])
    if kernel is None:  # weights summing to (nearly) 0, normalized: no range of inputs is safe
        assert normalize
        return
    out = np.empty(n, np.uint16)
    if not kernel.merge(bits(base), [bits(e) for e in given], present, out):
        mask = 0x7F80 if dtype == "BF16" else 0x7C00
        beyond = any(int((bits(t) & mask).max()) >= kernel.limit for t in [base, *given])
        assert beyond or (len(given) > INTERLEAVED and n % BLOCK)  # the only slices it leaves to torch
        return
    assert np.array_equal(out, bits(torch_merge(base, given, params, present)))


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
@pytest.mark.parametrize("weight", [-0.5, 0.3])
@pytest.mark.parametrize(("normalize", "lam"), [(False, 1.0), (True, -0.7)])
def test_one_differing_expert_gives_the_torch_kernels_bits_zeros_signed_as_torch_signs_them(
    dtype, weight, normalize, lam
):
    # one expert of three present (the kernel's shortcut for a single row): it equals the base on
    # half the elements, so its weighted deltas there are -0 or +0, which torch's sum makes +0
    g = torch.Generator().manual_seed(11)
    tdt, n = TORCH_DTYPES[dtype], 3000
    base = order_sensitive(g, (n,), -8, 2).to(tdt)
    base[:100] = -0.0
    expert = (base.float() + order_sensitive(g, (n,), -10, -2)).to(tdt)
    expert[: n // 2] = base[: n // 2]
    params = get_method("task_arithmetic").resolve(
        {"weight": [0.2, weight, 1.0], "normalize": normalize, "lambda": lam}, 3
    )
    kernel = affine_kernel(dtype, params["weight"], params["normalize"], params["lambda"])
    assert kernel is not None
    out = np.empty(n, np.uint16)
    assert kernel.merge(bits(base), [bits(expert)], [1], out)
    assert np.array_equal(out, bits(torch_merge(base, [expert], params, [1])))


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
@pytest.mark.parametrize("count", [1, 3])
def test_power_of_two_weights_that_take_deltas_below_the_normal_range_round_as_torch_rounds(dtype, count):
    # deltas near the smallest normal number times 2^-12: the products are subnormal, and many are
    # not dtype values, so the rounding the kernel skips for exact products must still happen here
    g = torch.Generator().manual_seed(3)
    tdt, n = TORCH_DTYPES[dtype], 4 * BLOCK
    lowest = -120 if dtype == "BF16" else -10
    base = order_sensitive(g, (n,), lowest, lowest + 6).to(tdt)
    experts = [(base.float() + order_sensitive(g, (n,), lowest - 2, lowest + 4)).to(tdt) for _ in range(count)]
    params = get_method("task_arithmetic").resolve({"weight": 2.0**-12, "normalize": False}, count)
    kernel = affine_kernel(dtype, params["weight"], params["normalize"], params["lambda"])
    assert kernel is not None and kernel.exact_products
    out = np.empty(n, np.uint16)
    assert kernel.merge(bits(base), [bits(e) for e in experts], None, out)
    expected = torch_merge(base, experts, params, None)
    assert np.array_equal(out, bits(expected))
    unrounded = (experts[0].float() - base.float()).to(tdt).float() * 2.0**-12
    assert not torch.equal(unrounded.to(tdt).float(), unrounded)  # the case this test is for


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
def test_array_kernel_declines_what_torch_would_make_nan_or_overflow(dtype):
    kernel = affine_kernel(dtype, (0.5, 0.5), False, 1.0)
    assert kernel is not None
    tdt = TORCH_DTYPES[dtype]
    base = torch.full((BLOCK,), 0.25, dtype=tdt)
    ok = torch.full((BLOCK,), 0.5, dtype=tdt)
    out = np.empty(BLOCK, np.uint16)
    assert kernel.merge(bits(base), [bits(ok), bits(ok)], None, out)
    largest = torch.finfo(tdt).max
    for bad in (float("nan"), float("inf"), -float("inf"), largest):
        expert = ok.clone()
        expert[3] = bad
        assert not kernel.merge(bits(base), [bits(ok), bits(expert)], None, out)
        assert not kernel.merge(bits(expert), [bits(ok)], [1], out)


def test_array_kernel_exists_only_where_it_matches_torch():
    ta = get_method("task_arithmetic")
    zero_sum = ta.resolve({"weight": [0.5, -0.5], "normalize": True}, 2)
    assert ta.array_kernel(zero_sum, "F16") is None  # torch: 0 / 0 (1e-8 is 0 in fp16)
    assert ta.array_kernel(zero_sum, "BF16") is not None  # the divisor becomes 1
    p = ta.resolve({"weight": 0.5}, 2)
    assert ta.array_kernel(p, "BF16") is not None and ta.array_kernel(p, "F16") is not None
    assert ta.array_kernel(p, "F32") is None  # torch sums float32 in another order
    many = ta.resolve({"weight": 0.05}, MAX_SUMMED + 1)
    assert ta.array_kernel(many, "BF16") is None  # from 17 rows on torch sums in groups of 16
    ties = get_method("ties")
    assert ties.array_kernel(ties.resolve({"weight": 0.5, "density": 0.5}, 2), "BF16") is None
    assert get_method("slerp").array_kernel({"t": 0.5}, "BF16") is None
    kernel = ta.array_kernel(ta.resolve({"weight": 0.05}, MAX_SUMMED), "BF16")
    assert kernel is not None
    out = np.empty(BLOCK * 2, np.uint16)
    zeros = np.zeros(BLOCK * 2, np.uint16)
    assert kernel.merge(zeros, [zeros] * MAX_SUMMED, None, out)
    present = list(range(MAX_SUMMED))
    assert not kernel.merge(zeros, [zeros] * (MAX_SUMMED + 1), present + [0], out)  # torch sums those in groups
    for n in (1, 2, 5, BLOCK - 1, BLOCK + 64):  # torch sums a slice's last columns four rows interleaved
        assert not kernel.merge(zeros[:n], [zeros[:n]] * 5, None, out[:n])
        assert kernel.merge(zeros[:n], [zeros[:n]] * INTERLEAVED, list(range(INTERLEAVED)), out[:n])


def test_torch_sums_a_slices_last_columns_in_another_order():
    """Why the kernel declines slices whose length is not a multiple of BLOCK: five bf16 rows
    where the order of the float32 sum decides the rounding (sequential: the 1.2e-7 is lost)."""
    rows = torch.tensor([[-0.0], [0.2734375], [-0.0], [1.2293e-07], [-3.078125]]).to(torch.bfloat16)
    sequential = torch.tensor([0.0])
    for row in rows.float():
        sequential = sequential + row
    assert not torch.equal(rows.sum(dim=0), sequential.to(torch.bfloat16))
    wide = rows.expand(5, BLOCK).contiguous()
    assert torch.equal(wide.sum(dim=0), sequential.to(torch.bfloat16).expand(BLOCK))


def test_a_chunk_the_kernel_declines_is_merged_by_torch_and_matches_the_whole_tensor(repo, monkeypatch):
    monkeypatch.setattr(kernels, "torch_loaded", lambda: False)  # the array kernels, as in a CLI process
    declined: list[bool] = []
    real = AffineKernel.merge

    def watching(self, *args, **kwargs):
        declined.append(not real(self, *args, **kwargs))
        return declined[-1] is False

    monkeypatch.setattr(AffineKernel, "merge", watching)
    base = llama_state_dict(seed=5)
    name = "model.layers.0.mlp.up_proj.weight"
    commit_model(repo, base, "base")
    tuned = []
    for k, branch in enumerate(("a", "b")):
        repo.checkout("main")
        repo.checkout(create_branch=branch)
        sd = frozen_finetune(base, set(), seed=40 + k)
        if k == 1:
            sd[name].view(-1)[5] = float("nan")  # one chunk of this tensor goes to torch
            sd[name].view(-1)[-1] = float("inf")
        commit_model(repo, sd, branch)
        tuned.append(sd)
    repo.checkout("main")
    threads = torch.get_num_threads()
    repo.merge(["a", "b"], "task_arithmetic", weight=[0.3, 0.6], branch="m")
    assert any(declined) and not all(declined)  # the NaN / inf chunks went to torch, the others not
    assert torch.get_num_threads() == threads  # torch's own threads given back after the merge
    merged = repo.state_dict("m")
    method = get_method("task_arithmetic")
    for tensor in (name, "model.layers.1.self_attn.q_proj.weight"):
        whole = method(base[tensor], [sd[tensor] for sd in tuned], {"weight": [0.3, 0.6]})
        assert torch.equal(merged[tensor].view(torch.int16), whole.view(torch.int16))


TORCH_FREE = """
import sys
from mgit.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    assert done.code in (0, None), done.code
print("torch" in sys.modules)
"""


def _merge_imports_torch(root, *args: str) -> bool:
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_FREE, "-C", str(root), "-q", "merge", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.strip().splitlines()[-1] == "True"


@pytest.fixture
def verdicts(tmp_path, monkeypatch):
    """The probe's verdicts kept under ``tmp_path`` (for this process and the ones it starts)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    affine_probe.affine_reproduces_torch.cache_clear()
    yield affine_probe.cache_dir() / affine_probe.VERDICTS
    affine_probe.affine_reproduces_torch.cache_clear()


def test_a_bf16_task_arithmetic_merge_never_imports_torch(experts, verdicts):
    assert affine_probe.affine_reproduces_torch()  # probed here, where torch is loaded: kept on disk
    root = experts.root
    assert not _merge_imports_torch(root, "math", "code", "--method=task_arithmetic", "--weights=0.5,0.5", "-b", "ta")
    assert not _merge_imports_torch(
        root,
        "math",
        "code",
        "--method=task_arithmetic",
        "--weights=0.5,0.3",
        "--budget=50%",
        "-b",
        "ta-b",
        "--no-checkout",
    )
    assert _merge_imports_torch(root, "math", "code", "--method=ties", "--weights=0.5,0.5", "--density=0.5", "-b", "t")
    merged = experts.state_dict("ta")
    sds = [experts.state_dict(b) for b in ("main", "math", "code")]
    method = get_method("task_arithmetic")
    for tensor in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"):
        whole = method(sds[0][tensor], [sds[1][tensor], sds[2][tensor]], {"weight": 0.5})
        assert torch.equal(merged[tensor].view(torch.int16), whole.view(torch.int16))


@pytest.mark.parametrize("dtype", ["BF16", "F16"])
@pytest.mark.parametrize(("weights", "normalize", "lam"), [((2.0,) * 16, False, 1.7), ((1.0, -0.999), True, 1.0)])
def test_values_just_below_the_kernels_limit_still_match_torch(dtype, weights, normalize, lam):
    params = get_method("task_arithmetic").resolve(
        {"weight": list(weights), "normalize": normalize, "lambda": lam}, len(weights)
    )
    kernel = affine_kernel(dtype, params["weight"], params["normalize"], params["lambda"])
    assert kernel is not None
    tdt = TORCH_DTYPES[dtype]
    below = torch.tensor([kernel.limit - 1], dtype=torch.int16).view(tdt)  # the largest accepted magnitude
    g = torch.Generator().manual_seed(7)
    n = 4096
    signs = [torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0) for _ in range(len(weights) + 1)]
    scale = [torch.rand(n, generator=g) * 0.5 + 0.5 for _ in range(len(weights) + 1)]
    base, *experts = ((s * f * below.float()).to(tdt) for s, f in zip(signs, scale, strict=True))
    experts[0][:8] = below  # the extremes themselves
    base[:8] = -below
    out = np.empty(n, np.uint16)
    assert kernel.merge(bits(base), [bits(e) for e in experts], None, out)
    expected = torch_merge(base, experts, params, None)
    assert torch.isfinite(expected.float()).all()
    assert np.array_equal(out, bits(expected))


def test_the_array_and_torch_kernels_commit_the_same_merge(experts, monkeypatch):
    seen: list[int] = []
    real = TaskArithmetic.combine_slice

    def counting(self, base, experts_, *args, **kwargs):
        seen.append(len(experts_))
        return real(self, base, experts_, *args, **kwargs)

    monkeypatch.setattr(TaskArithmetic, "combine_slice", counting)
    a = experts.merge(["math", "code"], "task_arithmetic", weight=[0.3, 0.6], base="main", branch="torch")
    assert seen  # this process has torch loaded: its kernels, faster, are used
    seen.clear()
    monkeypatch.setattr(kernels, "torch_loaded", lambda: False)  # as in a CLI process
    b = experts.merge(["math", "code"], "task_arithmetic", weight=[0.3, 0.6], base="main", branch="arrays")
    assert not seen  # a small merge: every chunk through the array kernel
    assert experts.graph.commit(a).tree == experts.graph.commit(b).tree
    monkeypatch.setattr(kernels, "ARRAY_KERNEL_BYTES", -1)  # a merge computing more than that
    c = experts.merge(["math", "code"], "task_arithmetic", weight=[0.3, 0.6], base="main", branch="big")
    assert seen and experts.graph.commit(c).tree == experts.graph.commit(a).tree


def test_the_probe_finds_that_the_kernel_reproduces_this_torch():
    assert affine_probe.probe_affine()


def test_the_verdict_is_kept_per_torch_build(verdicts, monkeypatch):
    probes: list[bool] = []
    monkeypatch.setattr(affine_probe, "probe_affine", lambda: probes.append(False) or False)
    assert affine_probe.affine_reproduces_torch() is False
    affine_probe.affine_reproduces_torch.cache_clear()  # a later process: the verdict is read, not probed
    assert affine_probe.affine_reproduces_torch() is False
    assert probes == [False]
    assert affine_probe.torch_build() in verdicts.read_text()
    monkeypatch.setattr(affine_probe, "torch_build", lambda: "another torch")
    affine_probe.affine_reproduces_torch.cache_clear()
    affine_probe.affine_reproduces_torch()
    assert probes == [False, False]  # another build is probed again


def test_a_torch_that_computes_otherwise_merges_every_chunk_with_torchs_bits(experts, verdicts, monkeypatch):
    """Forced mismatch: the kernel's rounding broken, as if torch had changed how it rounds. The
    probe sees it, no chunk goes through the array kernel, and the merge holds torch's bits."""
    monkeypatch.setattr(affine_arrays, "_round", lambda values, spare, dtype, look_first=False: None)
    assert not affine_probe.affine_reproduces_torch()
    assert affine_kernel("BF16", [0.3, 0.6], False, 1.0) is None
    monkeypatch.setattr(kernels, "torch_loaded", lambda: False)  # array kernels wanted, as in a CLI process
    monkeypatch.setattr(AffineKernel, "merge", lambda *a, **k: pytest.fail("the array kernel merged a chunk"))
    experts.merge(["math", "code"], "task_arithmetic", weight=[0.3, 0.6], base="main", branch="m")
    merged = experts.state_dict("m")
    sds = [experts.state_dict(b) for b in ("main", "math", "code")]
    method = get_method("task_arithmetic")
    for tensor in ("model.layers.0.self_attn.q_proj.weight", "model.embed_tokens.weight"):
        whole = method(sds[0][tensor], [sds[1][tensor], sds[2][tensor]], {"weight": [0.3, 0.6]})
        assert torch.equal(merged[tensor].view(torch.int16), whole.view(torch.int16))
