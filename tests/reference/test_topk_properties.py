"""Property tests: the oracle and the CPU engine against an independent sort-based reference.

Inputs mix arbitrary fp32 bit patterns (every NaN payload, denormals, +-0, +-inf, FLT_MAX) with
a small per-example pool of repeated values (ties), in short rows, empty rows and windows, on
strided views of a poisoned arena; all three call shapes, ``deterministic`` and ``sorted``.
Both implementations resolve ties to the smallest indices, so they must equal the reference
exactly, and the validator must accept them.
"""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference import cpu_engine, oracle, validate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from topk_sortref import decode_lengths, gather_values, sort_topk

SPECIAL_BITS = [
    0x00000000,  # +0
    0x80000000,  # -0
    0x7F800000,  # +inf
    0xFF800000,  # -inf
    0x7FC00000,  # quiet NaN
    0xFFC00000,  # negative quiet NaN
    0x7F800001,  # signalling NaN
    0xFFFFFFFF,  # negative NaN, all-ones payload
    0x00000001,  # smallest denormal
    0x80000001,
    0x007FFFFF,  # largest denormal
    0x807FFFFF,
    0x7F7FFFFF,  # FLT_MAX
    0xFF7FFFFF,  # -FLT_MAX
    0x3F800000,  # 1.0
    0xBF800000,  # -1.0
]
POISON_BITS = 0x7E61CEB8  # 7.5e37: big enough to change an answer if read

bits_strategy = st.one_of(st.sampled_from(SPECIAL_BITS), st.integers(0, 2**32 - 1))
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def logits_matrix(draw, rows: int, max_width: int = 40):
    """float32 ``[rows, width]``: a view of a poisoned arena, possibly with a row stride."""
    width = draw(st.integers(0, max_width))
    pool = draw(st.lists(bits_strategy, min_size=1, max_size=4))
    elements = st.one_of(st.sampled_from(pool), bits_strategy)
    bits = draw(st.lists(elements, min_size=rows * width, max_size=rows * width))
    pad = draw(st.integers(0, 5))
    arena = np.full((rows, width + pad), POISON_BITS, np.uint32)
    arena[:, :width] = np.array(bits, np.uint32).reshape(rows, width)
    return arena.view(np.float32)[:, :width]


def _same_values(values: np.ndarray, logits, starts, indices) -> bool:
    return np.array_equal(values.view(np.uint32), gather_values(logits, starts, indices))


def _compare(logits, starts, lengths, k, sorted_mode, run_oracle, run_engine, check):
    expected = sort_topk(logits, starts, lengths, k, sorted_mode)
    got_o, val_o = run_oracle(sorted=sorted_mode, return_values=True)
    got_e, val_e = run_engine(sorted=sorted_mode, return_values=True)
    assert got_o.dtype == np.int32 and got_e.dtype == np.int32
    np.testing.assert_array_equal(got_o, expected)
    np.testing.assert_array_equal(got_e, expected)
    assert _same_values(val_o, logits, starts, expected)
    assert _same_values(val_e, logits, starts, expected)
    check(got_e, val_e).raise_if_failed()


@SETTINGS
@given(data=st.data(), sorted_mode=st.booleans(), deterministic=st.booleans())
def test_dense(data, sorted_mode, deterministic):
    rows = data.draw(st.integers(0, 4))
    logits = data.draw(logits_matrix(rows))
    width = logits.shape[1]
    k = data.draw(st.integers(1, width + 6))
    if data.draw(st.booleans()):
        lengths = np.array(
            data.draw(st.lists(st.integers(0, width + 3), min_size=rows, max_size=rows)), np.int32
        )
        eff = [min(int(n), width) for n in lengths]
    else:
        lengths, eff = None, [width] * rows
    opts = {"deterministic": deterministic}
    _compare(
        logits,
        [0] * rows,
        eff,
        k,
        sorted_mode,
        lambda **kw: oracle.topk_dense(logits, k, lengths, **opts, **kw),
        lambda **kw: cpu_engine.dense(logits, k, lengths, **opts, **kw),
        lambda i, v: validate.check_dense(logits, k, i, lengths, values=v),
    )


@SETTINGS
@given(data=st.data(), sorted_mode=st.booleans())
def test_decode(data, sorted_mode):
    next_n = data.draw(st.integers(1, 3))
    batch = data.draw(st.integers(0, 3))
    cr = data.draw(st.sampled_from([1, 2, 4]))
    logits = data.draw(logits_matrix(batch * next_n))
    width = logits.shape[1]
    kv = data.draw(
        st.lists(st.integers(0, width * cr + next_n + 2), min_size=batch, max_size=batch)
    )
    kv_lens = np.array(kv, np.int32)
    k = data.draw(st.integers(1, width + 6))
    lengths = decode_lengths(kv_lens, next_n, cr, width)
    opts = {"next_n": next_n, "compress_ratio": cr}
    _compare(
        logits,
        [0] * len(lengths),
        lengths,
        k,
        sorted_mode,
        lambda **kw: oracle.topk_decode(logits, kv_lens, k, **opts, **kw),
        lambda **kw: cpu_engine.decode(logits, kv_lens, k, **opts, **kw),
        lambda i, v: validate.check_decode(logits, kv_lens, k, i, **opts, values=v),
    )


@SETTINGS
@given(data=st.data(), sorted_mode=st.booleans())
def test_prefill(data, sorted_mode):
    rows = data.draw(st.integers(0, 4))
    logits = data.draw(logits_matrix(rows))
    width = logits.shape[1]
    starts, ends = [], []
    for _ in range(rows):
        a = data.draw(st.integers(0, width))
        b = data.draw(st.integers(a, width))
        starts.append(a)
        ends.append(b)
    row_starts, row_ends = np.array(starts, np.int32), np.array(ends, np.int32)
    k = data.draw(st.integers(1, width + 6))
    _compare(
        logits,
        starts,
        [b - a for a, b in zip(starts, ends, strict=True)],
        k,
        sorted_mode,
        lambda **kw: oracle.topk_prefill(logits, row_starts, row_ends, k, **kw),
        lambda **kw: cpu_engine.prefill(logits, row_starts, row_ends, k, **kw),
        lambda i, v: validate.check_prefill(logits, row_starts, row_ends, k, i, values=v),
    )


LONG_KS = [1, 5, 64, 257, 512, 1500]


@st.composite
def long_rows(draw):
    """Two rows long enough for the engine's sampled path (n >= 4096, n >= 8 k), built with
    numpy from a drawn seed: a gaussian base plus drawn amounts of ties, NaN, +-inf, -0.0,
    denormals, or a row that is all negative or all one value."""
    seed = draw(st.integers(0, 2**32 - 1))
    n = draw(st.integers(4096, 24000))
    k = draw(st.sampled_from([x for x in LONG_KS if 8 * x <= n]))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, n), dtype=np.float32)
    shape = draw(st.sampled_from(["plain", "negative", "ties", "specials", "constant", "mixed"]))
    if shape == "negative":
        x = -np.abs(x)
    elif shape == "ties":
        x = np.round(x * draw(st.sampled_from([1, 4, 32]))).astype(np.float32)
    elif shape == "constant":
        x[:] = draw(st.sampled_from([0.0, -0.0, 1.0, -np.inf, np.nan]))
    elif shape in ("specials", "mixed"):
        for bits in draw(st.lists(st.sampled_from(SPECIAL_BITS), min_size=1, max_size=4)):
            count = draw(st.sampled_from([1, k - 1 if k > 1 else 1, k, k + 1, 3 * k, n // 2]))
            pos = rng.choice(n, size=min(count, n), replace=False)
            x[rng.integers(0, 2), pos] = np.uint32(bits).view(np.float32)
        if shape == "mixed":
            x = -np.abs(x)
    return x, k


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=long_rows(), sorted_mode=st.booleans())
def test_engine_long_rows(case, sorted_mode):
    logits, k = case
    expected = sort_topk(logits, [0, 0], [logits.shape[1]] * 2, k, sorted_mode)
    got, values = cpu_engine.dense(logits, k, sorted=sorted_mode, return_values=True)
    np.testing.assert_array_equal(got, expected)
    assert _same_values(values, logits, [0, 0], expected)
    validate.assert_dense(logits, k, got, values=values)


@pytest.mark.parametrize("width", [4096, 5000, 70001])
def test_engine_strided_long_rows_match_oracle(width):
    rng = np.random.default_rng(width)
    arena = rng.standard_normal((9, width + 7), dtype=np.float32)
    arena[:, width:] = np.inf  # poison past the width
    logits = arena[:, :width]
    for k in (1, 100, 512, width // 8):
        np.testing.assert_array_equal(cpu_engine.dense(logits, k), oracle.topk_dense(logits, k))
