"""Workload generators: every family produces the property it promises; the batch builders
lay out windows, strides and poison as documented; everything is reproducible from a seed."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference import cpu_engine, oracle, workloads
from gvr_reference.keys import order_key
from gvr_reference.workloads import FAMILIES, POISON

ROWS, WIDTH, K = 6, 4000, 64
FLT_MIN_NORMAL = np.finfo(np.float32).tiny


def _family(name: str, rows: int = ROWS, width: int = WIDTH, k: int = K, seed: int = 0):
    return FAMILIES[name](np.random.default_rng(seed), rows, width, k)


def _kth(row: np.ndarray, k: int) -> np.float32:
    """The K-th largest value of a row (by the order key)."""
    keys = order_key(np.ascontiguousarray(row))
    kth_key = np.sort(keys)[-k]
    return row[np.flatnonzero(keys == kth_key)[0]]


def _tie_count(row: np.ndarray, value: np.float32) -> int:
    keys = order_key(np.ascontiguousarray(row))
    return int((keys == order_key(np.array([value], np.float32))[0]).sum())


@pytest.mark.parametrize("name", workloads.family_names())
def test_family_shape_dtype_and_seed(name):
    a = _family(name, seed=1)
    b = _family(name, seed=1)
    c = _family(name, seed=2)
    assert a.shape == (ROWS, WIDTH) and a.dtype == np.float32
    np.testing.assert_array_equal(a.view(np.uint32), b.view(np.uint32))
    assert not np.array_equal(a.view(np.uint32), c.view(np.uint32)) or name == "constant"


@pytest.mark.parametrize("name", workloads.family_names())
def test_family_respects_lengths(name):
    lengths = np.array([0, 1, K - 1, K + 1, 1000, WIDTH])
    x = FAMILIES[name](np.random.default_rng(3), 6, WIDTH, K, lengths=lengths)
    assert x.shape == (6, WIDTH)


def test_gaussian():
    x = _family("gaussian")
    assert np.isfinite(x).all() and 0.9 < x.std() < 1.1


def test_dsa_like():
    x = _family("dsa_like", rows=8)
    assert np.isfinite(x).all()
    top = oracle.topk_dense(x, K)
    for r in range(0, 8, 2):  # positive head weights
        assert (x[r] == 0).sum() > K, "a ReLU zero tie class"
        assert (x[r] >= 0).all()
        assert np.mean(top[r] >= 0.9 * WIDTH) > 0.25, "recency: mass at the end"
    assert (x[1::2] < 0).any(), "signed head weights"


def test_tie_flood():
    x = _family("tie_flood", width=20 * K)
    for row in x:
        kth = _kth(row, K)
        assert _tie_count(row, kth) >= 4 * K
        assert np.unique(row).size <= 4


def test_two_valued():
    x = _family("two_valued")
    for row in x:
        values = np.unique(row)
        assert values.size == 2
        assert 0.5 * K - 1 <= (row == values[1]).sum() <= 1.5 * K + 1


def test_constant():
    x = _family("constant")
    for row in x:
        assert np.unique(row.view(np.uint32)).size == 1
    assert np.signbit(x[1, 0]) and x[1, 0] == 0  # the -0.0 row


def test_hidden_peaks():
    x = _family("hidden_peaks")
    top = oracle.topk_dense(x, K)
    for r in range(ROWS):
        assert top[r].min() > WIDTH // 2 and top[r].max() < 0.95 * WIDTH
        assert top[r].max() - top[r].min() < 2 * K
        assert (x[r] >= 10).sum() >= K


def test_position_skew():
    x = _family("position_skew")
    top = oracle.topk_dense(x, K)
    assert (top >= WIDTH - 3 * K).all()


def test_pos_inf():
    x = _family("pos_inf")
    counts = np.isposinf(x).sum(axis=1)
    assert (counts[0::3] < K).all() and (counts[0::3] >= 1).all()
    assert (counts[1::3] > K).all()
    assert (counts[2::3] == K).all()


def test_neg_inf():
    x = _family("neg_inf")
    assert 0.05 * WIDTH < np.isneginf(x[0]).sum() < 0.2 * WIDTH
    tail = np.isneginf(x[1])
    first = np.flatnonzero(tail)[0]
    assert tail[first:].all() and first < 0.7 * WIDTH
    for r in (2, 5):
        assert np.isneginf(_kth(x[r], K))
        assert np.isfinite(x[r]).sum() < K


def test_denormals():
    x = _family("denormals")
    nonzero = x[x != 0]
    assert (np.abs(nonzero) < FLT_MIN_NORMAL).all()
    assert (nonzero > 0).any() and (nonzero < 0).any()
    for row in x:
        kth = _kth(row, K)
        assert kth != 0 and abs(kth) < FLT_MIN_NORMAL
    assert np.signbit(x[x == 0]).any() and (~np.signbit(x[x == 0])).any()


def test_signed_zero():
    x = _family("signed_zero")
    for row in x:
        assert _kth(row, K) == 0
        zeros = row[row == 0]
        assert zeros.size >= 2 * K
        assert np.signbit(zeros).any() and (~np.signbit(zeros)).any()


def test_nan():
    x = _family("nan")
    counts = np.isnan(x).sum(axis=1)
    assert (counts[0::3] < K).all() and (counts[1::3] > K).all() and (counts[2::3] == K).all()
    patterns = np.unique(x.view(np.uint32)[np.isnan(x)])
    assert patterns.size >= 3 and (patterns >= 0x80000000).any()


def test_quantized():
    x = _family("quantized")
    assert (x[0::2].view(np.uint32) & 0xFFFF == 0).all()
    assert (x[1::2].view(np.uint32) & 0xFFFFF == 0).all()
    assert max(np.unique(row).size for row in x[0::2]) < WIDTH / 2
    assert max(np.unique(row).size for row in x[1::2]) < 300
    for row in x:
        assert _tie_count(row, _kth(row, K)) > 1


def test_near_flt_max():
    x = _family("near_flt_max")
    assert (x[0::2] >= 3.4e38).mean() > 0.85
    assert (x[1::2] <= -3.4e38).all()
    assert (np.isfinite(x)).all()


# --------------------------------------------------------------------------------------------
# Batch builders
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("lengths", ["ragged", "full", "edge"])
@pytest.mark.parametrize("stride", [None, 1030])
def test_decode_batch_layout_and_poison(lengths, stride):
    b = workloads.make_decode_batch(
        5,
        batch=14,
        next_n=3,
        compress_ratio=4,
        k=K,
        width=1001,
        row_stride=stride,
        family="gaussian",
        lengths=lengths,
    )
    assert b.logits.shape == (42, 1001) and b.kv_lens.dtype == np.int32
    assert b.kv_lens.shape == (14,) and b.rows == 42
    assert b.arena.shape == (42, stride or 1001)
    assert b.logits.strides[0] == 4 * (stride or 1001) and np.shares_memory(b.logits, b.arena)
    for r in range(42):
        n = int(b.windows.lengths[r])
        assert (b.arena[r, n:] == POISON).all()
        assert not (b.arena[r, :n] == POISON).any()
    if lengths == "full":
        assert (b.windows.lengths == 1001).all()
    got = cpu_engine.decode(b.logits, b.kv_lens, K, next_n=3, compress_ratio=4)
    assert b.check(got).ok


def test_decode_edge_lengths():
    b = workloads.make_decode_batch(
        1, batch=16, next_n=2, compress_ratio=4, k=K, width=999, lengths="edge"
    )
    last = b.windows.lengths[1::2]
    for target in (K - 1, K, K + 1, 0, 1, 999):
        assert target in last
    assert (b.kv_lens < 2).any()


def test_prefill_batch_windows_and_poison():
    b = workloads.make_prefill_batch(2, rows=40, k=K, width=997, row_stride=1000)
    rs, re = b.row_starts.astype(int), b.row_ends.astype(int)
    assert ((0 <= rs) & (rs <= re) & (re <= 997)).all()
    fits = (re - rs) <= 997 - 4  # a misaligned start is possible
    assert (rs[fits] % 4 != 0).all()
    for r in range(40):
        outside = np.ones(1000, bool)
        outside[rs[r] : re[r]] = False
        assert (b.arena[r, outside] == POISON).all()
        assert not (b.arena[r, rs[r] : re[r]] == POISON).any()
        assert (b.arena[r, max(0, rs[r] - 3) : rs[r]] == POISON).all()
    got = cpu_engine.prefill(b.logits, b.row_starts, b.row_ends, K)
    np.testing.assert_array_equal(got, b.reference())


@pytest.mark.parametrize("lengths", ["full", "edge"])
def test_prefill_modes(lengths):
    b = workloads.make_prefill_batch(3, rows=14, k=K, width=500, lengths=lengths)
    n = b.row_ends - b.row_starts
    if lengths == "full":
        assert (n >= 497).all() and (b.row_starts % 4 != 0).all()
    else:
        assert {K - 1, K, K + 1, 0, 1} <= set(n.tolist())


@pytest.mark.parametrize("lengths", [None, "ragged", "edge"])
def test_dense_batch(lengths):
    b = workloads.make_dense_batch(4, rows=9, k=K, width=2001, lengths=lengths, row_stride=2048)
    if lengths is None:
        assert b.lengths is None and (b.windows.lengths == 2001).all()
    else:
        assert b.lengths.dtype == np.int32
    got = cpu_engine.dense(b.logits, K, b.lengths)
    assert b.check(got).ok


def test_no_poison():
    b = workloads.make_dense_batch(4, rows=3, k=K, width=300, lengths="ragged", poison=False)
    assert not (b.arena == POISON).any()


def test_batches_are_reproducible():
    a = workloads.make_decode_batch(9, batch=4, k=K, width=777, family="nan", next_n=2)
    b = workloads.make_decode_batch(9, batch=4, k=K, width=777, family="nan", next_n=2)
    np.testing.assert_array_equal(a.arena.view(np.uint32), b.arena.view(np.uint32))
    np.testing.assert_array_equal(a.kv_lens, b.kv_lens)


def test_poison_changes_an_answer_when_read():
    """The poison is a real trap: reading one element past a row changes the top-K."""
    b = workloads.make_dense_batch(0, rows=4, k=K, width=3000, lengths="ragged")
    for r in range(4):
        n = int(b.windows.lengths[r])
        if 0 < n < 3000:
            wider = oracle.topk_dense(b.logits[r : r + 1], K, np.array([n + 1], np.int32))
            assert n in wider[0]
