"""The CPU path: which calls the direct entry (``gvr_dispatch.cpu.direct``) serves and which it
leaves to the general path, that bad input still raises before anything is written, and that
every mode is exact: property tests against the oracle (the engine gives ties to the smallest
indices, so its answers must equal the oracle's bit for bit) on rows with ties, +-inf, NaN,
-0.0 and denormals, and crafted rows at the engine's routing boundaries (``n`` around ``k``,
the radix path's branches, the sampled path's thresholds, the torch.topk route,
the thread-pool threshold)."""

from __future__ import annotations

import gvr_dispatch
import numpy as np
import pytest
import torch
from gvr_dispatch import cpu
from gvr_reference import cpu_engine, oracle, validate
from gvr_reference.windows import RowWindows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SPECIAL_BITS = [
    0x00000000,  # +0
    0x80000000,  # -0
    0x7F800000,  # +inf
    0xFF800000,  # -inf
    0x7FC00000,  # NaN
    0xFFC00000,  # negative NaN
    0x7F800001,  # signalling NaN
    0x00000001,  # smallest denormal
    0x807FFFFF,  # largest negative denormal
    0x7F7FFFFF,  # FLT_MAX
    0xFF7FFFFF,  # -FLT_MAX
    0x3F800000,  # 1.0
    0x3F800001,  # 1.0 + ulp (same top-11-bit bin as 1.0)
    0xBF800000,  # -1.0
]
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,  # the no_general_path spy holds for every example
    ],
)


@pytest.fixture(scope="module", autouse=True)
def warm():
    gvr_dispatch.warmup(k=4, width=64, device="cpu", progress=False)


@pytest.fixture
def no_general_path(monkeypatch):
    """Fail any call that reaches the general path."""

    def fail(*args, **kwargs):
        raise AssertionError("the general path ran")

    monkeypatch.setattr(cpu, "run_cpu", fail)


@pytest.fixture
def general_calls(monkeypatch):
    """Record the calls that reach the general path."""
    calls = []
    real = cpu.run_cpu

    def spy(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(cpu, "run_cpu", spy)
    return calls


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint32)


def _expect(x: np.ndarray, starts, lengths, k: int, sorted_mode: bool):
    w = RowWindows(np.asarray(starts, np.int64), np.asarray(lengths, np.int64))
    return oracle.topk_windows(x, w, k, sorted=sorted_mode, return_values=True), w


def _assert_same(x, starts, lengths, k, sorted_mode, out, values):
    (ref_idx, ref_val), w = _expect(x, starts, lengths, k, sorted_mode)
    np.testing.assert_array_equal(out.numpy(), ref_idx)
    np.testing.assert_array_equal(_bits(values.numpy()), _bits(ref_val))
    validate.check_topk(x, w, k, out.numpy(), values.numpy()).raise_if_failed()


# ------------------------------------------------------------------------------ who serves
def test_common_calls_take_the_direct_path(no_general_path):
    x = torch.randn(6, 300)
    lens = torch.tensor([0, 5, 299, 300, 400, -3], dtype=torch.int32)
    out = torch.empty(6, 16, dtype=torch.int32)
    assert gvr_dispatch.topk(x, 16, out=out) is out
    gvr_dispatch.topk(x, 16, lens, out=out, deterministic=True)
    gvr_dispatch.topk(x, None, out=out)  # k from out
    kv = torch.tensor([300, 7, 0], dtype=torch.int32)
    gvr_dispatch.topk_decode(x, kv, 16, next_n=2, compress_ratio=2, max_seq_len=600)
    rs = torch.tensor([0, 10, 299, -5, 200, 0], dtype=torch.int32)
    re = torch.tensor([300, 20, 300, 400, 100, 0], dtype=torch.int32)
    gvr_dispatch.topk_prefill(x, rs, re, 16, return_values=True, sorted=True)
    # a row-strided view (an arena with padding) is read in place too
    gvr_dispatch.topk(torch.randn(6, 320)[:, :300], 16)
    d = gvr_dispatch.get_dispatcher()
    d.topk(x, 16)
    d.topk_prefill(x, rs, re, 16)
    d.topk_decode(x, torch.tensor([300, 300, 300, 300, 300, 300], dtype=torch.int32), 16)


def test_unusual_calls_take_the_general_path(general_calls):
    x = torch.randn(4, 64)
    cases = [
        lambda: gvr_dispatch.topk(x.t().contiguous().t(), 8),  # inner stride 4
        lambda: gvr_dispatch.topk(torch.nn.Parameter(x), 8),  # a tensor subclass
        lambda: gvr_dispatch.topk(torch._neg_view(x), 8),  # lazily negated
        lambda: gvr_dispatch.topk(x, 8, workspace=torch.zeros(4, dtype=torch.int32)),
    ]
    for i, call in enumerate(cases):
        call()
        assert len(general_calls) == i + 1, i


def test_general_path_answers_like_the_direct_path():
    x = torch.randn(5, 200)
    x[:, 50:60] = float("nan")
    x[:, 60:70] = 0.0
    x[1, 100:] = -0.0
    ref = gvr_dispatch.topk(x, 20, sorted=True, return_values=True)
    neg_ref = gvr_dispatch.topk(-x, 20, sorted=True, return_values=True)
    strided = torch.empty(200, 5).t()
    strided.copy_(x)
    for view, expect in ((strided, ref), (torch._neg_view(-x), ref), (torch._neg_view(x), neg_ref)):
        got = gvr_dispatch.topk(view, 20, sorted=True, return_values=True)
        assert torch.equal(got[0], expect[0])
        assert torch.equal(got[1].view(torch.int32), expect[1].view(torch.int32))


BAD_CALLS = [
    (TypeError, "kv_lens must be int32", lambda x, o: gvr_dispatch.topk_decode(
        x, torch.tensor([9, 9], dtype=torch.int64), out=o)),
    (ValueError, "kv_lens.numel", lambda x, o: gvr_dispatch.topk_decode(
        x, torch.tensor([9, 9, 9], dtype=torch.int32), out=o)),
    (ValueError, "next_n must be >= 1", lambda x, o: gvr_dispatch.topk_decode(
        x, torch.tensor([9, 9], dtype=torch.int32), out=o, next_n=0)),
    (ValueError, "compress_ratio must be a power of two", lambda x, o: gvr_dispatch.topk_decode(
        x, torch.tensor([9, 9], dtype=torch.int32), out=o, compress_ratio=3)),
    (ValueError, "max_seq_len must be >= 0", lambda x, o: gvr_dispatch.topk_decode(
        x, torch.tensor([9, 9], dtype=torch.int32), out=o, max_seq_len=-1)),
    (ValueError, "max_seq_len must be at most 2\\*\\*63 - 1", lambda x, o: gvr_dispatch.topk_decode(
        x, torch.tensor([9, 9], dtype=torch.int32), out=o, max_seq_len=1 << 64)),
    (TypeError, "row_ends must be int32", lambda x, o: gvr_dispatch.topk_prefill(
        x, torch.zeros(2, dtype=torch.int32), torch.zeros(2), out=o)),
    (ValueError, "row_starts must have 2 entries", lambda x, o: gvr_dispatch.topk_prefill(
        x, torch.zeros(3, dtype=torch.int32), torch.zeros(2, dtype=torch.int32), out=o)),
    (ValueError, "lengths must be contiguous", lambda x, o: gvr_dispatch.topk(
        x, None, torch.zeros(4, dtype=torch.int32)[::2], out=o)),
    (ValueError, "k=4 disagrees with out.shape", lambda x, o: gvr_dispatch.topk(x, 4, out=o)),
    (TypeError, "values must be torch.float32", lambda x, o: gvr_dispatch.topk(
        x, 3, out=o, values=torch.zeros(2, 3, dtype=torch.float64))),
    (ValueError, "values must have shape", lambda x, o: gvr_dispatch.topk(
        x, 3, out=o, values=torch.zeros(3, 3))),
    (ValueError, "values must not require grad", lambda x, o: gvr_dispatch.topk(
        x, 3, out=o, values=torch.zeros(2, 3, requires_grad=True))),
    (TypeError, "deterministic must be a bool", lambda x, o: gvr_dispatch.topk(
        x, 3, out=o, deterministic=1)),
    (TypeError, "sorted must be a bool", lambda x, o: gvr_dispatch.topk(x, 3, out=o, sorted=None)),
    (TypeError, "return_values must be a bool", lambda x, o: gvr_dispatch.topk(
        x, 3, out=o, return_values="yes")),
    (TypeError, "k must be an int", lambda x, o: gvr_dispatch.topk(x, 3.0, out=o)),
    (ValueError, "k must be >= 1", lambda x, o: gvr_dispatch.topk(x, 0)),
    (TypeError, "logits must be float32", lambda x, o: gvr_dispatch.topk(x.double(), 3, out=o)),
    (ValueError, "logits must be 2-D", lambda x, o: gvr_dispatch.topk(x[0], 3)),
]  # fmt: skip


@pytest.mark.parametrize("exc, match, call", BAD_CALLS)
def test_bad_input_raises_before_writing(exc, match, call):
    x = torch.randn(2, 10)
    out = torch.full((2, 3), 123, dtype=torch.int32)
    with pytest.raises(exc, match=match):
        call(x, out)
    assert (out == 123).all()


@pytest.mark.parametrize("rows", [2, 100])  # 100 rows, K = 8: the torch.topk route
@pytest.mark.parametrize("deterministic", [False, True])
def test_a_values_buffer_that_requires_grad_is_refused_on_the_cpu_routes(rows, deterministic):
    x = torch.randn(rows, 1000)
    values = torch.full((rows, 8), 5.0, requires_grad=True)
    with pytest.raises(ValueError, match="values must not require grad"):
        gvr_dispatch.topk(x, 8, values=values, deterministic=deterministic)
    assert bool((values == 5.0).all())
    with torch.no_grad():  # no graph to keep: the buffer is written, as torch.topk's would be
        out, got = gvr_dispatch.topk(x, 8, values=values, deterministic=deterministic)
    assert got is values
    torch.testing.assert_close(values.detach(), torch.gather(x, 1, out.long()))


# ------------------------------------------------------------------------------ exactness
@st.composite
def scores(draw, rows: int, max_width: int):
    """float32 ``[rows, width]`` (a row-strided view) from special bit patterns, a small pool
    of repeated values (ties) and arbitrary bits."""
    width = draw(st.integers(1, max_width))
    pool = draw(st.lists(st.sampled_from(SPECIAL_BITS) | st.integers(0, 2**32 - 1), max_size=4))
    elements = st.sampled_from(SPECIAL_BITS) | st.integers(0, 2**32 - 1)
    if pool:
        elements = st.sampled_from(pool) | elements
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    fill = draw(st.sampled_from(["drawn", "pool", "gaussian"]))
    if fill == "drawn" and rows * width > 2048:  # too many for hypothesis to draw one by one
        mix = np.array(pool + SPECIAL_BITS, np.uint32)
        bits = np.where(rng.random(rows * width) < 0.5, rng.choice(mix, rows * width),
                        rng.integers(0, 2**32, rows * width, dtype=np.uint32))  # fmt: skip
    elif fill == "drawn":
        bits = np.array(draw(st.lists(elements, min_size=rows * width, max_size=rows * width)))
    elif fill == "pool" and pool:
        bits = rng.choice(np.array(pool + SPECIAL_BITS[:4], np.uint32), rows * width)
    else:
        bits = rng.standard_normal(rows * width).astype(np.float32).view(np.uint32)
    pad = draw(st.integers(0, 3))
    arena = np.full((rows, width + pad), 0x7E61CEB8, np.uint32)  # a big value, if read
    arena[:, :width] = bits.astype(np.uint32).reshape(rows, width)
    return arena.view(np.float32)[:, :width]


def _flags(data):
    return (
        data.draw(st.booleans(), label="sorted"),
        data.draw(st.booleans(), label="deterministic"),
        data.draw(st.booleans(), label="out given"),
    )


def _run(call, rows, k, given_out, **kw):
    out = torch.full((rows, k), 77, dtype=torch.int32) if given_out else None
    values = torch.full((rows, k), 77.0) if given_out else None
    res = call(k=k, out=out, values=values, return_values=True, **kw)
    if given_out:
        assert res[0] is out and res[1] is values
    return res


@SETTINGS
@given(data=st.data())
def test_dense_exact(data, no_general_path):
    rows = data.draw(st.integers(1, 4))
    x = data.draw(scores(rows, 600))
    width = x.shape[1]
    k = data.draw(st.integers(1, width + 3))
    use_lengths = data.draw(st.booleans())
    sorted_mode, det, given_out = _flags(data)
    xt = torch.from_numpy(x)
    if use_lengths:
        lens = np.array(data.draw(st.lists(st.integers(-2, width + 2), min_size=rows,
                                           max_size=rows)), np.int32)  # fmt: skip
        lengths = torch.from_numpy(lens)
        n = np.clip(lens, 0, width)
    else:
        lengths = None
        n = np.full(rows, width)
    out, values = _run(
        lambda **kw: gvr_dispatch.topk(xt, lengths=lengths, **kw), rows, k, given_out,
        sorted=sorted_mode, deterministic=det,
    )  # fmt: skip
    _assert_same(x, np.zeros(rows), n, k, sorted_mode, out, values)


@SETTINGS
@given(data=st.data())
def test_decode_exact(data, no_general_path):
    next_n = data.draw(st.integers(1, 3))
    batch = data.draw(st.integers(1, 3))
    cr = data.draw(st.sampled_from([1, 2, 4]))
    x = data.draw(scores(batch * next_n, 400))
    width = x.shape[1]
    kv = np.array(data.draw(st.lists(st.integers(-3, cr * width + 5), min_size=batch,
                                     max_size=batch)), np.int32)  # fmt: skip
    k = data.draw(st.integers(1, width + 3))
    sorted_mode, det, given_out = _flags(data)
    out, values = _run(
        lambda **kw: gvr_dispatch.topk_decode(torch.from_numpy(x), torch.from_numpy(kv), **kw),
        batch * next_n, k, given_out, next_n=next_n, compress_ratio=cr, sorted=sorted_mode,
        deterministic=det,
    )  # fmt: skip
    r = np.arange(batch * next_n)
    n = np.maximum(kv.astype(np.int64)[r // next_n] - next_n + r % next_n + 1, 0) // cr
    _assert_same(x, np.zeros_like(r), np.minimum(n, width), k, sorted_mode, out, values)


@SETTINGS
@given(data=st.data())
def test_prefill_exact(data, no_general_path):
    rows = data.draw(st.integers(1, 4))
    x = data.draw(scores(rows, 400))
    width = x.shape[1]
    ends = st.lists(st.integers(-3, width + 3), min_size=rows, max_size=rows)
    rs = np.array(data.draw(ends), np.int32)
    re = np.array(data.draw(ends), np.int32)
    k = data.draw(st.integers(1, width + 3))
    sorted_mode, det, given_out = _flags(data)
    out, values = _run(
        lambda **kw: gvr_dispatch.topk_prefill(
            torch.from_numpy(x), torch.from_numpy(rs), torch.from_numpy(re), **kw
        ),
        rows, k, given_out, sorted=sorted_mode, deterministic=det,
    )  # fmt: skip
    s = np.clip(rs, 0, width)
    e = np.clip(re, s, width)
    _assert_same(x, s, e - s, k, sorted_mode, out, values)


# ------------------------------------------------------------------------------ boundaries
def _rows_of(kind: str, rows: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        return rng.standard_normal((rows, n), dtype=np.float32)
    if kind == "one_bin":  # every key in one top-11-bit bin, many distinct: the candidate rounds
        return (1.0 + rng.integers(0, 1 << 21, (rows, n)) * 2.0**-23).astype(np.float32)
    if kind == "few_values":  # big tie classes, taken in part
        return rng.choice(np.array([-np.inf, -1.0, 0.0, -0.0, 1.0, 2.0, np.nan], np.float32),
                          (rows, n))  # fmt: skip
    if kind == "flood":  # one value everywhere
        return np.full((rows, n), 3.0, np.float32)
    if kind == "sorted":
        return np.tile(np.arange(n, dtype=np.float32), (rows, 1))
    raise AssertionError(kind)


KINDS = ("gaussian", "one_bin", "few_values", "flood", "sorted")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "n, k",
    [(511, 512), (512, 512), (513, 512), (100, 1), (4096, 8), (4096, 16), (4096, 17),
     (4096, 511), (4096, 513), (2000, 1999), (512, 100), (513, 100), (64, 17)],
)  # fmt: skip
def test_row_methods_at_their_boundaries(kind, n, k, no_general_path):
    x = _rows_of(kind, 3, n, n * 7 + k)
    for sorted_mode in (False, True):
        out, values = gvr_dispatch.topk(torch.from_numpy(x), k, return_values=True,
                                        sorted=sorted_mode)  # fmt: skip
        _assert_same(x, np.zeros(3), np.full(3, n), k, sorted_mode, out, values)


def test_route_table():
    # torch.topk: whole dense rows, >= 64 of them, a small K, no tie/order rule
    assert cpu.cpu_route(64, 4096, 8) == "torch"
    assert cpu.cpu_route(64, 2, 1) == "torch"
    assert cpu.cpu_route(63, 4096, 8) == "radix"
    assert cpu.cpu_route(64, 4096, 9) == "radix"
    assert cpu.cpu_route(64, 4097, 8) == "radix x pool"
    assert cpu.cpu_route(64, 8, 8) == "identity"
    assert cpu.cpu_route(64, 4096, 8, deterministic=True) == "radix"
    assert cpu.cpu_route(64, 4096, 8, sorted=True) == "radix"
    assert cpu.cpu_route(64, 4096, 8, whole_rows=False) == "radix"
    assert cpu.cpu_route(1, 512, 512) == "identity"
    assert cpu.cpu_route(1, 513, 512) == "radix"
    assert cpu.cpu_route(1, 32767, 512) == "radix"  # short of both sampled-path rules
    assert cpu.cpu_route(1, 32768, 4096) == "sampled"
    assert cpu.cpu_route(1, 32768, 4097) == "radix"  # n < 8 k
    assert cpu.cpu_route(1, 16384, 128) == "sampled"
    assert cpu.cpu_route(1, 16384, 129) == "radix"
    assert cpu.cpu_route(1, 16383, 1) == "radix"
    assert cpu.cpu_route(64, 4096, 512) == "radix"  # 2**18 scores: still on this thread
    assert cpu.cpu_route(65, 4096, 512) == "radix x pool"
    assert cpu.cpu_route(2, 131072, 512) == "sampled"  # 2**18 again
    assert cpu.cpu_route(3, 131072, 512) == "sampled x pool"


@pytest.mark.parametrize(
    "n, k", [(32767, 512), (32768, 4096), (32768, 4097), (16384, 128), (16384, 129)]
)
@pytest.mark.parametrize("kind", ("gaussian", "few_values", "one_bin", "sorted"))
def test_sampled_path_boundary(n, k, kind, no_general_path):
    x = _rows_of(kind, 2, n, n + k)
    out, values = gvr_dispatch.topk(torch.from_numpy(x), k, return_values=True)
    _assert_same(x, np.zeros(2), np.full(2, n), k, False, out, values)


def test_thread_pool_threshold(monkeypatch, no_general_path):
    pooled = []
    real = cpu._parallel_at

    def spy(*args):
        pooled.append(args[2])
        return real(*args)

    monkeypatch.setattr(cpu, "_parallel_at", spy)
    width = 4096
    rows = cpu_engine.SERIAL_WORK // width
    x = _rows_of("gaussian", rows + 1, width, 1)
    xt = torch.from_numpy(x)
    for r, pool in ((1, False), (rows, False), (rows + 1, True)):
        out = gvr_dispatch.topk(xt[:r], 64)
        assert bool(pooled) is pool, r
        validate.check_dense(x[:r], 64, out.numpy()).raise_if_failed()
        np.testing.assert_array_equal(out.numpy(), oracle.topk_dense(x[:r], 64))
        pooled.clear()
    # decode rows count their windows, not the width: short requests stay on this thread
    kv = torch.full((rows + 1,), 100, dtype=torch.int32)
    out = gvr_dispatch.topk_decode(xt, kv, 64)
    assert not pooled
    kv = torch.full((rows + 1,), width, dtype=torch.int32)
    out, values = gvr_dispatch.topk_decode(xt, kv, 64, sorted=True, return_values=True)
    assert pooled == [rows + 1]
    _assert_same(x, np.zeros(rows + 1), np.full(rows + 1, width), 64, True, out, values)


# ------------------------------------------------------------------------------ torch.topk
@pytest.fixture
def torch_calls(monkeypatch):
    calls = []
    real = torch.topk

    def spy(*args, **kwargs):
        calls.append(args[1])
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "topk", spy)
    return calls


@SETTINGS
@given(data=st.data())
def test_torch_route_keeps_the_contract(data, torch_calls, no_general_path):
    rows = data.draw(st.integers(cpu.TORCH_MIN_ROWS, cpu.TORCH_MIN_ROWS + 3))
    x = data.draw(scores(rows, 300))
    width = x.shape[1]
    if width < 2:
        return
    k = data.draw(st.integers(1, min(width - 1, cpu.TORCH_MAX_K)))
    given_out = data.draw(st.booleans())
    torch_calls.clear()
    out, values = _run(lambda **kw: gvr_dispatch.topk(torch.from_numpy(x), **kw), rows, k,
                       given_out)  # fmt: skip
    assert torch_calls == [k]
    w = RowWindows(np.zeros(rows, np.int64), np.full(rows, width, np.int64))
    # the exact multiset (NaN above +inf, -0.0 tied with +0.0), values the logits bit for bit
    validate.check_topk(x, w, k, out.numpy(), values.numpy()).raise_if_failed()
    picked = np.take_along_axis(_bits(x), out.numpy().astype(np.int64), axis=1)
    np.testing.assert_array_equal(picked, _bits(values.numpy()))


@pytest.mark.parametrize("kind", KINDS)
def test_torch_route_small_k_and_the_modes_it_leaves(kind, torch_calls):
    rows = cpu.TORCH_MIN_ROWS
    x = _rows_of(kind, rows, 4096, 3)
    xt = torch.from_numpy(x)
    out = gvr_dispatch.topk(xt, 8)
    assert torch_calls == [8]
    validate.check_dense(x, 8, out.numpy()).raise_if_failed()
    torch_calls.clear()
    for kw in ({"deterministic": True}, {"sorted": True}):  # smallest indices / index order
        out, values = gvr_dispatch.topk(xt, 8, return_values=True, **kw)
        _assert_same(x, np.zeros(rows), np.full(rows, 4096), 8, "sorted" in kw, out, values)
    lengths = torch.full((rows,), 4096, dtype=torch.int32)  # ragged calls: the engine
    np.testing.assert_array_equal(gvr_dispatch.topk(xt, 8, lengths).numpy(),
                                  oracle.topk_dense(x, 8))  # fmt: skip
    assert torch_calls == []
    xg = torch.from_numpy(x).requires_grad_()
    validate.check_dense(x, 8, gvr_dispatch.topk(xg, 8).numpy()).raise_if_failed()
