"""Validation battery: every bad argument raises the right error naming it, before anything is
written (the output buffers keep their sentinel contents).

Most checks run on the CPU path (default dispatcher, numba engine). The checks only CUDA calls
make (K range, width limit, workspace) run through a dispatcher whose kernel device is the CPU
(``dispatch_fakes``), so they are exercised without a GPU.
"""

from __future__ import annotations

import re

import gvr_dispatch
import numpy as np
import pytest
import torch
from dispatch_fakes import aligned_empty, fake_dispatcher
from gvr_dispatch.launch import kernel_view
from gvr_dispatch.validation import (
    check_compress_ratio,
    check_index_tensor,
    check_kernel_k,
    check_kernel_width,
    check_output,
    resolve_k,
)
from gvr_dispatch.workspace import Workspace, as_workspace_words
from gvr_kernels.routing import route_static
from gvr_kernels.spec import H200

ROWS, WIDTH, K = 4, 64, 8
SENTINEL_OUT = 12345
SENTINEL_VAL = 7.5


def _base(entry):
    """A valid call of ``entry``: (positional args, keyword args)."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(ROWS, WIDTH, generator=g)
    out = torch.full((ROWS, K), SENTINEL_OUT, dtype=torch.int32)
    values = torch.full((ROWS, K), SENTINEL_VAL, dtype=torch.float32)
    kw = dict(out=out, values=values)
    if entry == "decode":
        args = [logits, torch.tensor([40, 10], dtype=torch.int32), K]
        kw["next_n"] = 2
    elif entry == "prefill":
        starts = torch.tensor([0, 3, 10, 60], dtype=torch.int32)
        ends = torch.tensor([64, 9, 50, 64], dtype=torch.int32)
        args = [logits, starts, ends, K]
    else:
        args = [logits, K, torch.tensor([64, 3, 0, 20], dtype=torch.int32)]
    return args, kw


_FN = {
    "decode": "topk_decode",
    "prefill": "topk_prefill",
    "dense": "topk",
}
_K_POS = {"decode": 2, "prefill": 3, "dense": 1}
_SECOND = {"decode": 1, "prefill": 1, "dense": 2}  # kv_lens / row_starts / lengths


def _set_logits(value):
    return lambda a, kw, e: a.__setitem__(0, value)


def _set_k(value):
    return lambda a, kw, e: a.__setitem__(_K_POS[e], value)


def _set_kw(name, value):
    return lambda a, kw, e: kw.__setitem__(name, value)


def _set_second(value):
    return lambda a, kw, e: a.__setitem__(_SECOND[e], value)


def _noncontig_out(a, kw, e):
    kw["out"] = torch.full((K, ROWS), SENTINEL_OUT, dtype=torch.int32).t()


def _strided_second(a, kw, e):
    n = 2 if e == "decode" else ROWS
    a[_SECOND[e]] = torch.zeros(2 * n, dtype=torch.int32)[::2]


def _values_require_grad(a, kw, e):
    kw["values"].requires_grad_(True)


def _drop_k_and_buffers(a, kw, e):
    a[_K_POS[e]] = None
    kw.pop("out")
    kw.pop("values")


def _drop_k_with_out(buf):
    """K left out, ``out`` a malformed buffer (the error names ``out``, not ``k``)."""

    def mutate(a, kw, e):
        a[_K_POS[e]] = None
        kw["out"] = buf
        kw.pop("values")

    return mutate


COMMON = [
    ("logits-numpy", _set_logits(np.zeros((ROWS, WIDTH), np.float32)), TypeError, "logits"),
    ("logits-f64", _set_logits(torch.zeros(ROWS, WIDTH, dtype=torch.float64)), TypeError, "logits"),
    ("logits-i32", _set_logits(torch.zeros(ROWS, WIDTH, dtype=torch.int32)), TypeError, "logits"),
    ("logits-1d", _set_logits(torch.zeros(WIDTH)), ValueError, "logits"),
    ("logits-3d", _set_logits(torch.zeros(ROWS, WIDTH, 1)), ValueError, "logits"),
    ("logits-meta", _set_logits(torch.empty(ROWS, WIDTH, device="meta")), ValueError, "logits"),
    ("k-zero", _set_k(0), ValueError, "k must be >= 1"),
    ("k-negative", _set_k(-3), ValueError, "k must be >= 1"),
    ("k-float", _set_k(2.5), TypeError, "k must be an int"),
    ("k-bool", _set_k(True), TypeError, "k must be an int"),
    ("k-tensor", _set_k(torch.tensor(8)), TypeError, "k must be an int"),
    ("k-disagrees", _set_k(K + 1), ValueError, "disagrees with out"),
    ("k-missing", _drop_k_and_buffers, TypeError, "k is required"),
    (
        "k-missing-out-1d",
        _drop_k_with_out(torch.zeros(ROWS * K, dtype=torch.int32)),
        ValueError,
        f"out must be 2-D [rows, k], got shape ({ROWS * K},)",
    ),
    (
        "k-missing-out-numpy",
        _drop_k_with_out(np.zeros((ROWS, K), np.int32)),
        TypeError,
        "out must be a torch.Tensor [rows, k], got numpy.ndarray",
    ),
    ("out-numpy", _set_kw("out", np.zeros((ROWS, K), np.int32)), TypeError, "out"),
    ("out-int64", _set_kw("out", torch.zeros(ROWS, K, dtype=torch.int64)), TypeError, "out"),
    ("out-rows", _set_kw("out", torch.zeros(ROWS + 1, K, dtype=torch.int32)), ValueError, "out"),
    ("out-3d", _set_kw("out", torch.zeros(ROWS, K, 1, dtype=torch.int32)), ValueError, "out"),
    ("out-noncontig", _noncontig_out, ValueError, "out must be contiguous"),
    (
        "out-meta",
        _set_kw("out", torch.empty(ROWS, K, dtype=torch.int32, device="meta")),
        ValueError,
        "out must be on the logits device",
    ),
    (
        "values-f64",
        _set_kw("values", torch.zeros(ROWS, K, dtype=torch.float64)),
        TypeError,
        "values",
    ),
    ("values-rows", _set_kw("values", torch.zeros(ROWS - 1, K)), ValueError, "values"),
    ("values-width", _set_kw("values", torch.zeros(ROWS, K + 1)), ValueError, "values"),
    ("values-list", _set_kw("values", [[0.0] * K] * ROWS), TypeError, "values"),
    # the call's own sentinel buffer, so the battery checks that it stays unwritten (on the
    # kernel path the decode call's fast path must leave it to the checks)
    ("values-requires-grad", _values_require_grad, ValueError, "values must not require grad"),
    ("return_values-int", _set_kw("return_values", 1), TypeError, "return_values"),
    ("deterministic-str", _set_kw("deterministic", "yes"), TypeError, "deterministic"),
    ("sorted-none", _set_kw("sorted", None), TypeError, "sorted"),
    (
        "deterministic-numpy-bool",
        _set_kw("deterministic", np.bool_(True)),
        TypeError,
        "deterministic must be a bool, got numpy.bool",
    ),
]

SECOND_ARG = [
    ("second-int64", _set_second(torch.zeros(2, dtype=torch.int64)), TypeError, "{arg}"),
    ("second-float", _set_second(torch.zeros(2)), TypeError, "{arg}"),
    ("second-numpy", _set_second(np.zeros(2, np.int32)), TypeError, "{arg}"),
    ("second-2d", _set_second(torch.zeros(2, 2, dtype=torch.int32)), ValueError, "{arg}"),
    (
        "second-meta",
        _set_second(torch.zeros(2, dtype=torch.int32, device="meta")),
        ValueError,
        "{arg} must be on the logits device",
    ),
    ("second-strided", _strided_second, ValueError, "{arg} must be contiguous"),
]

DECODE = [
    (
        "kv_lens-length",
        _set_second(torch.zeros(3, dtype=torch.int32)),
        ValueError,
        "kv_lens.numel() * next_n",
    ),
    ("next_n-zero", _set_kw("next_n", 0), ValueError, "next_n must be >= 1"),
    ("next_n-float", _set_kw("next_n", 2.0), TypeError, "next_n"),
    ("next_n-mismatch", _set_kw("next_n", 3), ValueError, "kv_lens.numel() * next_n"),
    ("compress_ratio-3", _set_kw("compress_ratio", 3), ValueError, "compress_ratio"),
    ("compress_ratio-0", _set_kw("compress_ratio", 0), ValueError, "compress_ratio"),
    ("compress_ratio-str", _set_kw("compress_ratio", "4"), TypeError, "compress_ratio"),
    ("compress_ratio-huge", _set_kw("compress_ratio", 2**63), ValueError, "compress_ratio"),
    ("compress_ratio-2^31", _set_kw("compress_ratio", 2**31), ValueError, "compress_ratio"),
    ("max_seq_len-negative", _set_kw("max_seq_len", -1), ValueError, "max_seq_len"),
    ("max_seq_len-float", _set_kw("max_seq_len", 10.0), TypeError, "max_seq_len"),
]

PREFILL = [
    (
        "row_ends-length",
        lambda a, kw, e: a.__setitem__(2, torch.zeros(3, dtype=torch.int32)),
        ValueError,
        "row_ends must have 4 entries",
    ),
    (
        "row_ends-int64",
        lambda a, kw, e: a.__setitem__(2, torch.zeros(4, dtype=torch.int64)),
        TypeError,
        "row_ends",
    ),
    (
        "row_starts-length",
        _set_second(torch.zeros(5, dtype=torch.int32)),
        ValueError,
        "row_starts must have 4 entries",
    ),
]

DENSE = [
    (
        "lengths-length",
        _set_second(torch.zeros(3, dtype=torch.int32)),
        ValueError,
        "lengths must have 4 entries",
    ),
]

_ARG_NAME = {"decode": "kv_lens", "prefill": "row_starts", "dense": "lengths"}


def _cases():
    for entry in ("decode", "prefill", "dense"):
        for case in COMMON + SECOND_ARG:
            yield pytest.param(entry, *case[1:], id=f"{entry}-{case[0]}")
        for case in {"decode": DECODE, "prefill": PREFILL, "dense": DENSE}[entry]:
            yield pytest.param(entry, *case[1:], id=f"{entry}-{case[0]}")


def _run_bad(dispatch, entry, mutate, exc, match, dtype=None):
    args, kw = _base(entry)
    if dtype is not None:
        args[0] = args[0].to(dtype)
    out, values = kw["out"], kw["values"]
    mutate(args, kw, entry)
    with pytest.raises(exc, match=re.escape(match.format(arg=_ARG_NAME[entry]))):
        getattr(dispatch, _FN[entry])(*args, **kw)
    assert (out == SENTINEL_OUT).all(), "out was written before the error"
    assert (values == SENTINEL_VAL).all(), "values was written before the error"


@pytest.mark.parametrize("entry, mutate, exc, match", list(_cases()))
def test_bad_argument_cpu(entry, mutate, exc, match):
    _run_bad(gvr_dispatch, entry, mutate, exc, match)


@pytest.mark.parametrize("entry, mutate, exc, match", list(_cases()))
def test_bad_argument_cpu_16bit(entry, mutate, exc, match, monkeypatch):
    """The same battery with bfloat16 logits on the CPU (which selects from a float32
    widening): every argument is checked before the widened copy is made."""
    from gvr_dispatch import dispatcher

    copies = []
    real = dispatcher.padded_copy
    monkeypatch.setattr(
        dispatcher, "padded_copy", lambda *a, **k: copies.append(1) or real(*a, **k)
    )
    _run_bad(gvr_dispatch, entry, mutate, exc, match, torch.bfloat16)
    assert not copies, "the logits were widened before the error"


@pytest.mark.parametrize("entry, mutate, exc, match", list(_cases()))
def test_bad_argument_kernel_path(entry, mutate, exc, match):
    """The same battery on the kernel path (CPU tensors standing in for CUDA ones)."""
    d, _, compiler = fake_dispatcher()
    _run_bad(d, entry, mutate, exc, match)
    assert not compiler.calls, "a kernel ran although the call was invalid"


@pytest.mark.parametrize("entry", ["decode", "prefill", "dense"])
def test_valid_base_calls_write(entry):
    """The battery's base calls are valid (so each bad case differs by exactly one argument)."""
    for dispatch in (gvr_dispatch, fake_dispatcher()[0]):
        args, kw = _base(entry)
        res_out, res_values = getattr(dispatch, _FN[entry])(*args, **kw)
        assert res_out is kw["out"] and res_values is kw["values"]
        assert not (kw["out"] == SENTINEL_OUT).any()


def test_a_warm_decode_call_refuses_values_that_require_grad():
    """The decode fast path (a warmed launch key) leaves such a buffer to the checks."""
    d, _, _ = fake_dispatcher()
    args, kw = _base("decode")
    d.topk_decode(*args, **kw)  # warms the launch: the next call of this shape takes the fast path
    kw["out"].fill_(SENTINEL_OUT)
    kw["values"].fill_(SENTINEL_VAL)
    kw["values"].requires_grad_(True)
    with pytest.raises(ValueError, match="values must not require grad"):
        d.topk_decode(*args, **kw)
    assert (kw["out"] == SENTINEL_OUT).all() and (kw["values"] == SENTINEL_VAL).all()
    with torch.no_grad():  # accepted there (the fast path again)
        assert d.topk_decode(*args, **kw)[1] is kw["values"]
    assert not (kw["out"] == SENTINEL_OUT).any()


# ---------------------------------------------------------------------- CUDA-only checks
def _kernel_bad(call, exc, match):
    d, _, compiler = fake_dispatcher()
    out = torch.full((1, 8), SENTINEL_OUT, dtype=torch.int32)
    with pytest.raises(exc, match=match):
        call(d, out)
    assert (out == SENTINEL_OUT).all()
    assert not compiler.calls


def test_kernel_k_limit():
    x = torch.randn(1, 4096)
    _kernel_bad(lambda d, out: d.topk(x, 2049), ValueError, "k must be <= 2048")
    # The CPU engine takes any K.
    res = gvr_dispatch.topk(x, 3000)
    assert res.shape == (1, 3000)


def test_kernel_width_limit():
    huge = torch.zeros(4).as_strided((1, 1 << 26), (0, 0))
    _kernel_bad(lambda d, out: d.topk(huge, 8, out=out), ValueError, r"logits.shape\[1\]")


def _split_call(workspace):
    """A call that routes to a workspace split (one long row, deterministic ties: without
    them the cluster split serves it, with no workspace) with ``workspace``."""

    def call(d, out):
        n = 1 << 18
        assert route_static(H200, rows=1, n_env=n, k=8, deterministic=True).workspace_words
        x = torch.randn(1, n)
        kv = torch.tensor([n], dtype=torch.int32)
        return d.topk_decode(
            x, kv, 8, out=out, max_seq_len=n, workspace=workspace, deterministic=True
        )

    return call


@pytest.mark.parametrize(
    "workspace, exc, match",
    [
        (np.zeros(1 << 20, np.uint8), TypeError, "workspace"),
        (torch.zeros(1 << 18, dtype=torch.float32), TypeError, "workspace"),
        (torch.zeros(1 << 18, dtype=torch.int64), TypeError, "workspace"),
        (aligned_empty((1 << 20,), offset_bytes=4, dtype=torch.uint8), ValueError, "16-byte"),
        (torch.zeros((1 << 18) * 2, dtype=torch.int32)[::2], ValueError, "contiguous"),
        (torch.zeros(1 << 10, dtype=torch.int32), ValueError, "too small"),
        (torch.zeros(16, dtype=torch.int32, device="meta"), ValueError, "logits device"),
    ],
    ids=["numpy", "float32", "int64", "misaligned", "strided", "too-small", "meta"],
)
def test_workspace_checks(workspace, exc, match):
    _kernel_bad(_split_call(workspace), exc, match)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.uint32])
def test_workspace_accepted_dtypes(dtype):
    d, _, compiler = fake_dispatcher()
    words = d.workspace_bytes() // 4
    ws = torch.zeros(words * 4 // torch.tensor([], dtype=dtype).element_size(), dtype=dtype)
    out = _split_call(ws)(d, None)
    assert out.shape == (1, 8)
    call = compiler.calls[-1]
    assert call["parts"] > 1 and call["ws_ptr"] == ws.data_ptr()


def test_workspace_object_accepted():
    d, _, compiler = fake_dispatcher()
    ws = Workspace.zeros(d.workspace_bytes() // 4, "cpu")
    _split_call(ws)(d, None)
    assert compiler.calls[-1]["ws_ptr"] == ws.tensor.data_ptr()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_out_and_values_must_not_share_memory(dtype):
    """Both buffers are written, so ones that overlap are refused before either is."""
    logits = torch.randn(ROWS, WIDTH).to(dtype)
    gvr_dispatch.topk(logits, K)  # warm: later calls may take the CPU path's direct entry
    kv = torch.full((ROWS,), WIDTH, dtype=torch.int32)
    buf = torch.full((2 * ROWS * K,), SENTINEL_OUT, dtype=torch.int32)
    out = buf[: ROWS * K].view(ROWS, K)
    vdt = torch.float32
    same = out.view(vdt)
    shifted = buf[ROWS * K // 2 : ROWS * K // 2 + ROWS * K].view(ROWS, K).view(vdt)
    for values in (same, shifted):
        with pytest.raises(ValueError, match="out and values must not share memory"):
            gvr_dispatch.topk(logits, K, out=out, values=values)
        with pytest.raises(ValueError, match="out and values must not share memory"):
            gvr_dispatch.topk_decode(logits, kv, out=out, values=values)
        assert bool((buf == SENTINEL_OUT).all())
    # the kernel path, warm (its inline checks defer such buffers to the general ones)
    d, _, _ = fake_dispatcher()
    lg32 = logits.float()
    warm = torch.empty(ROWS, K), torch.empty(ROWS, K, dtype=torch.int32)
    d.topk_decode(lg32, kv, out=warm[1], values=warm[0])
    with pytest.raises(ValueError, match="out and values must not share memory"):
        d.topk_decode(lg32, kv, out=out, values=same)
    assert bool((buf == SENTINEL_OUT).all())
    # the two halves of one allocation are fine
    apart = buf[ROWS * K :].view(ROWS, K).view(vdt)
    got, vals = gvr_dispatch.topk(logits, K, out=out, values=apart, sorted=True)
    assert torch.equal(vals, torch.topk(logits.float(), K).values)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_outputs_must_not_share_memory_with_the_logits(dtype):
    """The logits are read while ``out`` and ``values`` are written, so an output buffer
    viewing the logits' memory is refused before anything is written (the logits untouched),
    on the CPU path (warm: its direct entry defers such buffers) and the kernel path."""
    logits = torch.randn(ROWS, 4 * WIDTH).to(dtype)
    gvr_dispatch.topk(logits, K)  # warm
    before = logits.clone()
    kv = torch.full((ROWS,), WIDTH, dtype=torch.int32)
    x = logits[:, :WIDTH]  # a strided view: the checks compare the bytes its strides reach
    words = logits.view(torch.int16).reshape(-1).view(torch.int32)  # the allocation, in words
    per = 4 if dtype is torch.float32 else 2  # bytes a score
    out = words[: ROWS * K].view(ROWS, K)  # over the view's first scores
    gap = WIDTH * per // 4  # the words after row 0's scores: inside the view's range
    between = words[gap : gap + ROWS * K].view(ROWS, K)
    for o in (out, between):
        with pytest.raises(ValueError, match="out and logits must not share memory"):
            gvr_dispatch.topk(x, K, out=o)
        with pytest.raises(ValueError, match="out and logits must not share memory"):
            gvr_dispatch.topk_decode(x, kv, out=o)
        with pytest.raises(ValueError, match="values and logits must not share memory"):
            gvr_dispatch.topk(x, K, values=o.view(torch.float32))
    assert torch.equal(logits.view(torch.int16), before.view(torch.int16))
    d, _, _ = fake_dispatcher()
    lg32 = logits.float()
    with pytest.raises(ValueError, match="out and logits must not share memory"):
        d.topk_decode(
            lg32[:, :WIDTH], kv, out=lg32.view(torch.int32).reshape(-1)[: ROWS * K].view(ROWS, K)
        )
    # another allocation, or memory past every byte the view reaches, is fine
    # (values compared, not indices: bfloat16 scores tie)
    want = torch.topk(x.float(), K).values
    past = words[-ROWS * K :].view(ROWS, K)
    for o in (torch.empty(ROWS, K, dtype=torch.int32), past):
        got = gvr_dispatch.topk(x, K, out=o, sorted=True)
        assert got.data_ptr() == o.data_ptr()
        assert torch.equal(torch.gather(x.float(), 1, got.long()), want)


def test_outputs_must_not_share_memory_with_the_index_inputs():
    """``kv_lens``, ``lengths``, ``row_starts`` and ``row_ends`` are read while ``out`` and
    ``values`` are written (an ``out`` over ``kv_lens`` would overwrite later rows' lengths
    first), so an output over their bytes is refused before anything is written, on the warm
    CPU path (its direct entry defers such buffers) and the kernel path."""
    logits = torch.randn(ROWS, WIDTH)
    gvr_dispatch.topk(logits, K)  # warm
    full = torch.full((ROWS,), WIDTH, dtype=torch.int32)
    zero = torch.zeros(ROWS, dtype=torch.int32)
    cases = [  # (call on a buffer w of ROWS * K words whose first ROWS hold WIDTH, names)
        (lambda w: gvr_dispatch.topk_decode(logits, w[:ROWS], K, out=w.view(ROWS, K)),
         "out and kv_lens"),
        (lambda w: gvr_dispatch.topk(logits, K, w[:ROWS], out=w.view(ROWS, K)),
         "out and lengths"),
        (lambda w: gvr_dispatch.topk(logits, K, w[:ROWS],
                                     values=w.view(torch.float32).view(ROWS, K)),
         "values and lengths"),
        (lambda w: gvr_dispatch.topk_prefill(logits, zero, w[:ROWS], K, out=w.view(ROWS, K)),
         "out and row_ends"),
        (lambda w: gvr_dispatch.topk_prefill(logits, w[ROWS : 2 * ROWS], full, K,
                                             out=w.view(ROWS, K)),
         "out and row_starts"),
    ]  # fmt: skip
    half = logits.bfloat16()  # 16-bit logits on the CPU, float32 values: checked the same
    cases += [
        (lambda w: gvr_dispatch.topk_decode(half, w[:ROWS], K,
                                            values=w.view(torch.float32).view(ROWS, K)),
         "values and kv_lens"),
        (lambda w: gvr_dispatch.topk(half, K, w[:ROWS],
                                     values=w.view(torch.float32).view(ROWS, K)),
         "values and lengths"),
        (lambda w: gvr_dispatch.topk_prefill(half, zero, w[:ROWS], K,
                                             values=w.view(torch.float32).view(ROWS, K)),
         "values and row_ends"),
    ]  # fmt: skip
    d, _, _ = fake_dispatcher()
    cases.append(
        (lambda w: d.topk_decode(logits, w[:ROWS], K, out=w.view(ROWS, K)), "out and kv_lens")
    )
    for call, names in cases:
        words = torch.zeros(ROWS * K, dtype=torch.int32)
        words[:ROWS] = WIDTH
        before = words.clone()
        with pytest.raises(ValueError, match=f"{names} must not share memory"):
            call(words)
        assert torch.equal(words, before), names  # nothing written
    # the lengths and the output in disjoint parts of one allocation are fine
    words = torch.zeros(ROWS + ROWS * K, dtype=torch.int32)
    words[:ROWS] = WIDTH
    for topk_decode in (gvr_dispatch.topk_decode, d.topk_decode):
        got = topk_decode(logits, words[:ROWS], K, out=words[ROWS:].view(ROWS, K))
        assert torch.equal(
            torch.sort(torch.gather(logits, 1, got.long()), 1).values,
            torch.sort(torch.topk(logits, K).values, 1).values,
        )


def test_sparse_logits_are_refused_naming_them():
    for dtype in (torch.float32, torch.float16):
        sparse = torch.randn(ROWS, WIDTH).to(dtype).to_sparse()
        with pytest.raises(TypeError, match="logits must be a dense"):
            gvr_dispatch.topk(sparse, K)


def test_float16_nan_values_widen_exactly():
    """float16 logits with a float32 ``values`` buffer: every value is the float32 widening
    of the selected score, NaN sign and payload included, whatever the tensor's size (the
    scalar and the vector conversions of the CPU differ on NaN)."""
    for rows, width, k in ((1, 8, 3), (4, 64, 16), (2, 1000, 100)):
        bits = torch.randint(-32768, 32768, (rows, width), dtype=torch.int32).to(torch.int16)
        bits[:, :3] = torch.tensor([-511, 0x7E01, -1024], dtype=torch.int16)  # NaNs, -inf
        logits = bits.view(torch.float16)
        values = torch.empty(rows, k)
        out, got = gvr_dispatch.topk(logits, k, values=values)
        picked = torch.gather(bits, 1, out.long()).numpy().view(np.float16)
        want = picked.astype(np.float32).view(np.int32)
        assert np.array_equal(got.view(torch.int32).numpy(), want)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_negated_float16_views_are_read_by_value():
    """A lazily negated view (the ``.imag`` of a conjugated complex32 tensor) holds memory that
    is not its values; its top-K and values are those of its values."""
    z = torch.randn(ROWS, WIDTH, dtype=torch.complex64).to(torch.complex32)
    neg = z.conj().imag
    assert neg.is_neg()
    plain = neg.clone()
    for values in (None, torch.empty(ROWS, K)):
        got = gvr_dispatch.topk(neg, K, values=values, return_values=True, sorted=True)
        want = gvr_dispatch.topk(plain, K, values=values, return_values=True, sorted=True)
        assert torch.equal(got[0], want[0])
        assert torch.equal(got[1].float(), want[1].float())


# ---------------------------------------------------------------------- the functions directly
def test_validation_functions_directly():
    with pytest.raises(ValueError, match="k must be <= 2048"):
        check_kernel_k(4096)
    check_kernel_k(2048)
    with pytest.raises(ValueError, match="2\\*\\*26"):
        check_kernel_width(1 << 26)
    assert check_compress_ratio(1) == 0 and check_compress_ratio(4) == 2
    with pytest.raises(ValueError, match="compress_ratio"):
        check_compress_ratio(6)
    assert resolve_k(None, torch.zeros(2, 5, dtype=torch.int32), None) == 5
    assert resolve_k(None, None, torch.zeros(2, 6)) == 6
    assert resolve_k(None, torch.zeros(2, 5, dtype=torch.int32), torch.zeros(2, 5)) == 5
    # k left out: two buffers of different widths name each other, not a k nobody passed
    with pytest.raises(ValueError, match=re.escape("values.shape[1]=6 disagrees with out.shape")):
        resolve_k(None, torch.zeros(2, 5, dtype=torch.int32), torch.zeros(2, 6))
    assert resolve_k(7, torch.zeros(2, 5, dtype=torch.int32), torch.zeros(2, 6)) == 7
    with pytest.raises(ValueError, match=re.escape("k=5 disagrees with values.shape[1]=6")):
        check_output(torch.zeros(2, 6), "values", torch.float32, torch.device("cpu"), 2, 5)
    meta = torch.device("meta")
    check_index_tensor(torch.empty(3, dtype=torch.int32, device=meta), "kv_lens", meta, 3)
    with pytest.raises(ValueError, match="kv_lens must be on the logits device"):
        check_index_tensor(torch.empty(3, dtype=torch.int32), "kv_lens", meta, 3)
    check_output(torch.empty(2, 3, dtype=torch.int32, device=meta), "out", torch.int32, meta, 2, 3)
    with pytest.raises(ValueError, match="out must have shape"):
        check_output(
            torch.empty(3, 3, dtype=torch.int32, device=meta), "out", torch.int32, meta, 2, 3
        )


@pytest.mark.parametrize(
    "make, issue",
    [
        (lambda: aligned_empty((3, 64)), None),
        (lambda: aligned_empty((3, 68))[:, :61], None),
        (lambda: aligned_empty((3, 65))[:, :64], "row stride"),
        (lambda: aligned_empty((64, 3)).t(), "inner stride"),
        (lambda: aligned_empty((3, 68))[:, 1:61], "alignment"),
        (lambda: aligned_empty((1, 70))[:, 1:5], "alignment"),
        (lambda: aligned_empty((1, 65))[:, :63], None),
        (lambda: aligned_empty((5, 1)).as_strided((5, 1), (4, 3)), None),
    ],
    ids=[
        "dense",
        "padded-view",
        "odd-stride",
        "transposed",
        "misaligned",
        "row-misaligned",
        "one-row",
        "one-column",
    ],
)
def test_kernel_view(make, issue):
    x = make()
    view, why = kernel_view(x, *x.shape)
    if issue is None:
        assert why == "" and view.data_ptr() == x.data_ptr()
        assert view.stride(1) == 1 and view.stride(0) % 4 == 0
        assert torch.equal(view, x)
    else:
        assert view is None and why == issue


def test_as_workspace_words_views():
    t = torch.zeros(64, dtype=torch.uint8)
    w = as_workspace_words(t, "workspace", t.device, 16)
    assert w.dtype == torch.uint32 and w.shape == (16,) and w.data_ptr() == t.data_ptr()
    with pytest.raises(ValueError, match="needs 68 bytes"):
        as_workspace_words(t, "workspace", t.device, 17)
