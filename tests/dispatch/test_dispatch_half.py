"""bfloat16 and float16 logits through the public entry points (CPU; the CUDA path is the
same code in front of the float32 kernels, exercised by ``test_dispatch_gpu.py``).

Every answer is checked against an independent reference of the same 16-bit rows: the
selected order keys equal the row's top-K order keys as a multiset (NaN above +inf, -0.0 ==
+0.0, as ``torch.topk`` ranks them), the indices are distinct and in the window, and the
values are the selected scores bit for bit; the families cover ties, +-inf, NaN, -0.0,
subnormals, short and empty rows.
"""

from __future__ import annotations

import math

import gvr_dispatch
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

HALF = (torch.bfloat16, torch.float16)


def _rows(dtype, rows, width, kind, g):
    x = torch.randn(rows, width, generator=g)
    if kind == "ties":
        x = torch.round(x * 2) / 2
    elif kind == "specials":
        pick = torch.rand(rows, width, generator=g)
        x = torch.where(pick < 0.05, math.inf, x)
        x = torch.where((pick >= 0.05) & (pick < 0.1), -math.inf, x)
        x = torch.where((pick >= 0.1) & (pick < 0.13), math.nan, x)
        x = torch.where((pick >= 0.13) & (pick < 0.3), -0.0, x)
        x = torch.where((pick >= 0.3) & (pick < 0.35), 0.0, x)
    elif kind == "subnormal":
        tiny = torch.finfo(dtype).smallest_normal
        x = x * tiny / 4
    elif kind == "constant":
        x = torch.full((rows, width), 0.5)
    return x.to(dtype)


def _keys(v):
    """int64 order keys of 16-bit or float32 values, via the exact float32 widening (NaN
    canonical above +inf, both zeros one key)."""
    b = v.float().contiguous().view(torch.int32).to(torch.int64)
    key = torch.where(b < 0, -(b & 0x7FFFFFFF) - 1, b)
    key = torch.where(torch.isnan(v.float()), torch.full_like(key, 1 << 40), key)
    return torch.where(v.float() == 0, torch.zeros_like(key), key)


def _check(x, lengths, starts, k, out, values, vdt):
    rows = x.shape[0]
    for r in range(rows):
        s, n = int(starts[r]), int(lengths[r])
        row = x[r, s : s + n]
        idx = out[r]
        take = min(k, n)
        assert int((idx >= 0).sum()) == take and bool((idx[take:] == -1).all())
        got = idx[:take].long()
        assert got.unique().numel() == take and bool(((got >= 0) & (got < n)).all())
        want = torch.sort(_keys(row), descending=True).values[:take]
        have = torch.sort(_keys(row[got]), descending=True).values
        assert torch.equal(want, have), r
        if values is not None:
            assert values.dtype == vdt
            exp = row[got].to(vdt)
            v = values[r, :take]
            view = torch.int32 if vdt == torch.float32 else torch.int16
            assert torch.equal(v.view(view), exp.view(view))
            pad = values[r, take:]
            assert bool((pad == torch.finfo(vdt).min).all())


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("kind", ["gaussian", "ties", "specials", "subnormal", "constant"])
def test_decode_matches_torch_topk(dtype, kind):
    g = torch.Generator().manual_seed(hash((str(dtype), kind)) % 1000)
    x = _rows(dtype, 6, 3000, kind, g)
    kv = torch.tensor([3000, 2999, 64, 65, 0, 1500], dtype=torch.int32)
    out, values = gvr_dispatch.topk_decode(x, kv, 64, return_values=True)
    _check(x, kv, torch.zeros(6, dtype=torch.int64), 64, out, values, dtype)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_prefill_windows_dense_rows_and_buffers(dtype):
    g = torch.Generator().manual_seed(5)
    x = _rows(dtype, 5, 2001, "specials", g)
    s = torch.tensor([0, 1, 7, 1000, 2001], dtype=torch.int32)
    e = torch.tensor([2001, 40, 2000, 1003, 2001], dtype=torch.int32)
    out, values = gvr_dispatch.topk_prefill(x, s, e, 33, return_values=True)
    _check(x, e - s, s, 33, out, values, dtype)
    # dense rows, a float32 values buffer (exact widening, -FLT_MAX pad), sorted order
    o = torch.empty(5, 40, dtype=torch.int32)
    v32 = torch.empty(5, 40)
    res = gvr_dispatch.topk(x, 40, out=o, values=v32, sorted=True)
    assert res[0] is o and res[1] is v32
    full = torch.full((5,), 2001, dtype=torch.int64)
    _check(x, full, torch.zeros(5, dtype=torch.int64), 40, o, v32, torch.float32)
    assert bool((_keys(v32)[:, :-1] >= _keys(v32)[:, 1:]).all())
    # a buffer of the logits dtype, and the indices alone
    vh = torch.empty(5, 40, dtype=dtype)
    oh, res = gvr_dispatch.topk(x, 40, values=vh)
    assert res is vh
    _check(x, full, torch.zeros(5, dtype=torch.int64), 40, oh, vh, dtype)
    only = gvr_dispatch.topk(x, 40)
    assert only.dtype == torch.int32 and only.shape == (5, 40)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_prefill_values_of_windows_clamped_at_the_row_ends(dtype):
    """A window starting before column 0 (or past the width) is clamped, and its indices and
    values count from the clamped start, exactly as the float32 call of the widened row."""
    g = torch.Generator().manual_seed(11)
    x = _rows(dtype, 4, 300, "specials", g)
    s = torch.tensor([-5, -(2**31), 299, 400], dtype=torch.int32)
    e = torch.tensor([40, 300, 2**31 - 1, 500], dtype=torch.int32)
    kw = dict(return_values=True, sorted=True, deterministic=True)
    out, values = gvr_dispatch.topk_prefill(x, s, e, 16, **kw)
    want, want_values = gvr_dispatch.topk_prefill(x.float(), s, e, 16, **kw)
    assert torch.equal(out, want)
    hit = out >= 0
    got_bits = values.float().view(torch.int32)
    assert torch.equal(got_bits[hit], want_values.view(torch.int32)[hit])
    assert bool((values[~hit] == torch.finfo(dtype).min).all())
    assert int(hit[0].sum()) == 16 and int(hit[2].sum()) == 1 and int(hit[3].sum()) == 0


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_deterministic_ties_take_the_smallest_indices(dtype):
    x = torch.zeros(3, 500, dtype=dtype)
    x[1, ::5] = 1.0
    out = gvr_dispatch.topk(x, 50, deterministic=True, sorted=True)
    assert torch.equal(out[0], torch.arange(50, dtype=torch.int32))
    assert torch.equal(out[1], torch.arange(0, 250, 5, dtype=torch.int32))


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    width=st.integers(1, 700),
    k=st.integers(1, 80),
    dtype=st.sampled_from(HALF),
)
def test_property_against_torch_topk(data, width, k, dtype):
    bits = data.draw(st.lists(st.integers(0, 0xFFFF), min_size=width, max_size=width))
    x = torch.tensor(bits, dtype=torch.int32).to(torch.int16).view(dtype)[None, :]
    n = data.draw(st.integers(0, width))
    lengths = torch.tensor([n], dtype=torch.int32)
    out, values = gvr_dispatch.topk(x, k, lengths, return_values=True)
    _check(x, lengths, torch.zeros(1, dtype=torch.int64), k, out, values, dtype)


@pytest.mark.parametrize(
    ("call", "err", "match"),
    [
        (lambda x: gvr_dispatch.topk(x.double(), 4), TypeError, "logits must be float32"),
        (lambda x: gvr_dispatch.topk(x.to(torch.int16), 4), TypeError, "logits must be"),
        (
            lambda x: gvr_dispatch.topk(x, 4, values=torch.empty(2, 4, dtype=torch.float64)),
            TypeError,
            "values must be torch.bfloat16 \\(the logits dtype\\) or torch.float32, got "
            "torch.float64",
        ),
        (
            lambda x: gvr_dispatch.topk(x, 4, values=torch.empty(2, 4, dtype=torch.float16)),
            TypeError,
            "values must be torch.bfloat16 \\(the logits dtype\\) or torch.float32",
        ),
        (
            lambda x: gvr_dispatch.topk(x, 4, values=torch.empty(3, 4, dtype=torch.bfloat16)),
            ValueError,
            "values must have shape",
        ),
        (lambda x: gvr_dispatch.topk(x, 0), ValueError, "k must be >= 1"),
        (lambda x: gvr_dispatch.topk(x, 4, return_values=1), TypeError, "return_values"),
        (
            lambda x: gvr_dispatch.topk_decode(x, torch.zeros(3, dtype=torch.int32), 4),
            ValueError,
            "kv_lens",
        ),
    ],
)
def test_bad_inputs_are_refused_before_anything_is_written(call, err, match):
    x = torch.randn(2, 50).to(torch.bfloat16)
    with pytest.raises(err, match=match):
        call(x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_cuda_decode_eager_and_graph(dtype):
    """On the GPU: split rows, single-CTA rows and register-resident rows, values and the
    deterministic mode, then the same call captured in a CUDA graph and replayed on new
    scores and lengths."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    g = torch.Generator().manual_seed(11)
    for rows, width, k in ((4, 70001, 2048), (160, 40000, 512), (200, 5000, 1024)):
        for kind in ("gaussian", "specials", "constant"):
            x = _rows(dtype, rows, width, kind, g)
            kv = torch.randint(0, width + 1, (rows,), generator=g, dtype=torch.int32)
            kv[0] = width
            out, values = gvr_dispatch.topk_decode(
                x.cuda(), kv.cuda(), k, return_values=True, deterministic=kind == "constant"
            )
            torch.cuda.synchronize()
            _check(x, kv, torch.zeros(rows, dtype=torch.int64), k, out.cpu(), values.cpu(), dtype)
    rows, width, k = 8, 30000, 512
    xs = torch.empty(rows, width, dtype=dtype, device="cuda")
    kvs = torch.empty(rows, dtype=torch.int32, device="cuda")
    o = torch.empty(rows, k, dtype=torch.int32, device="cuda")
    v = torch.empty(rows, k, dtype=dtype, device="cuda")
    xs.copy_(_rows(dtype, rows, width, "ties", g))
    kvs.fill_(width)
    gvr_dispatch.topk_decode(xs, kvs, out=o, values=v)  # warms the launch key
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gvr_dispatch.topk_decode(xs, kvs, out=o, values=v)
    for step in range(3):
        x = _rows(dtype, rows, width, ("gaussian", "specials", "ties")[step], g)
        kv = torch.randint(0, width + 1, (rows,), generator=g, dtype=torch.int32)
        xs.copy_(x)
        kvs.copy_(kv)
        graph.replay()
        torch.cuda.synchronize()
        _check(x, kv, torch.zeros(rows, dtype=torch.int64), k, o.cpu(), v.cpu(), dtype)


# ---------------------------------------------------------------------- the kernel path
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_kernel_path_routes_16bit_logits_to_16bit_kernels(dtype):
    """On the kernel device (the CPU stand-in of ``dispatch_fakes``) 16-bit logits are read in
    place by 16-bit configurations: no widening copy, values written in the logits dtype (or
    widened into a float32 buffer), the launch key carries the dtype, a row stride that is not
    a multiple of 8 elements is copied in the same dtype, and warmup covers the dtype."""
    from dispatch_fakes import fake_dispatcher

    d, runtime, compiler = fake_dispatcher()
    g = torch.Generator().manual_seed(3)
    x = _rows(dtype, 4, 3000, "specials", g)
    kv = torch.tensor([3000, 5, 2048, 1999], dtype=torch.int32)
    out, values = d.topk_decode(x, kv, 64, return_values=True)
    _check(x, kv, torch.zeros(4, dtype=torch.int64), 64, out, values, dtype)
    call = compiler.calls[-1]
    name = {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    assert call["config"].dtype == name and call["logits_ptr"] == x.data_ptr()
    assert d.launch_keys()[-1].dtype == name
    # a float32 values buffer, sorted
    v32 = torch.empty(4, 64)
    o, v = d.topk_decode(x, kv, 64, values=v32, sorted=True)
    assert v is v32
    _check(x, kv, torch.zeros(4, dtype=torch.int64), 64, o, v32, torch.float32)
    # a row stride of 3004 elements (a multiple of 4, not of 8) is copied in the dtype
    wide = torch.empty(4, 3004, dtype=dtype)
    wide[:, :3000] = x
    view = wide[:, :3000]
    out2 = d.topk_decode(view, kv, 64)
    assert compiler.calls[-1]["logits_ptr"] != view.data_ptr()
    assert compiler.calls[-1]["stride"] % 8 == 0
    _check(x, kv, torch.zeros(4, dtype=torch.int64), 64, out2, None, dtype)
    runtime.is_capturing = True
    with pytest.raises(RuntimeError, match="multiple of 8 elements"):
        d.topk_decode(view, kv, 64)
    runtime.is_capturing = False
    # prefill and dense rows, deterministic ties
    s = torch.tensor([0, 9, 100, 2999], dtype=torch.int32)
    e = torch.tensor([3000, 2000, 101, 3000], dtype=torch.int32)
    op, vp = d.topk_prefill(x, s, e, 40, return_values=True, deterministic=True)
    _check(x, e - s, s, 40, op, vp, dtype)
    # warmup of the dtype makes the keys a capture can use
    report = d.warmup(k=64, rows=(4,), width=3000, modes=("decode", "dense"), dtype=dtype)
    # decode and dense-with-lengths share the ("decode", width) key; dense adds ("full", width)
    assert report.launch_keys == 2 and {c.dtype for c, _ in compiler.compiled} == {name}
    assert {key.mode for key in d.launch_keys()} == {"decode", "prefill", "full"}
    with pytest.raises(TypeError, match="dtype must be torch.float32"):
        d.warmup(k=64, rows=(4,), width=3000, dtype=torch.float64)
