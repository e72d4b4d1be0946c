"""Row windows: the decode length formula (int64, clamped), prefill and dense windows."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference import oracle, windows
from gvr_reference.windows import RowWindows
from topk_sortref import decode_lengths


@pytest.mark.parametrize("next_n", [1, 2, 3, 4])
@pytest.mark.parametrize("cr", [1, 4, 128])
def test_decode_row_lengths_formula(next_n, cr):
    rng = np.random.default_rng(next_n * cr)
    width = 1000
    kv = rng.integers(0, width * cr + 2 * next_n, 50).astype(np.int32)
    kv[:4] = [0, next_n - 1, next_n, next_n + cr]
    got = windows.decode_row_lengths(kv, next_n, cr, width)
    assert got.dtype == np.int32 and got.shape == (50 * next_n,)
    assert got.tolist() == decode_lengths(kv, next_n, cr, width)


def test_decode_row_lengths_near_int32_max():
    kv = np.array([2**31 - 1, 2**31 - 2], np.int32)
    got = windows.decode_row_lengths(kv, 4, 1, 2**31 - 1)
    assert got.tolist() == decode_lengths(kv, 4, 1, 2**31 - 1)
    assert got[3] == 2**31 - 1
    assert (windows.decode_row_lengths(kv, 4, 2, 10**9) == 10**9).all()
    small = windows.decode_row_lengths(kv, 4, 2, 100)
    assert (small == 100).all()


def test_decode_short_requests_are_empty():
    got = windows.decode_row_lengths(np.array([0, 1, 2], np.int32), 3, 1, 50)
    assert got.tolist() == [0, 0, 0, 0, 0, 1, 0, 1, 2]


def test_mtp_rows_grow_by_one():
    got = windows.decode_row_lengths(np.array([100], np.int32), 4, 1, 1000)
    assert got.tolist() == [97, 98, 99, 100]


def test_decode_windows_start_at_zero():
    w = windows.decode_windows(np.array([10, 20], np.int32), 2, 1, 15)
    assert isinstance(w, RowWindows) and w.rows == 4
    assert w.starts.dtype == np.int64 and w.lengths.dtype == np.int64
    assert (w.starts == 0).all() and w.lengths.tolist() == [9, 10, 15, 15]


def test_prefill_windows():
    starts, lengths = windows.prefill_windows(
        np.array([0, 3, 7], np.int32), np.array([5, 3, 10], np.int32), 10
    )
    assert starts.dtype == np.int64 and lengths.dtype == np.int64
    assert starts.tolist() == [0, 3, 7] and lengths.tolist() == [5, 0, 3]


def test_dense_windows_clamp_lengths_to_width():
    w = windows.dense_windows(3, 8, np.array([0, 8, 100], np.int32))
    assert w.lengths.tolist() == [0, 8, 8]
    assert windows.dense_windows(2, 8).lengths.tolist() == [8, 8]


def test_dense_lengths_above_width_are_clamped_by_the_oracle():
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    got = oracle.topk_dense(x, 3, np.array([50, 2], np.int32))
    assert got.tolist() == [[3, 4, 5], [0, 1, -1]]


def test_row_windows_coerce_to_int64():
    w = RowWindows([1, 2], np.array([3, 4], np.int32))
    assert w.starts.dtype == np.int64 and w.lengths.dtype == np.int64 and w.rows == 2
