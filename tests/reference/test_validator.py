"""Mutation tests of the validator: every corruption of a correct answer is flagged with the
right code, and every answer that is still exact (another member of a tie class, another
order) is accepted."""

from __future__ import annotations

import numpy as np
import pytest
from gvr_reference import oracle, validate
from gvr_reference.validate import FAILURE_CODES, ValidationReport
from gvr_reference.windows import RowWindows

K = 16
FLT_MAX = np.finfo(np.float32).max


def _f32(bits: int) -> np.float32:
    return np.array([bits], np.uint32).view(np.float32)[0]


@pytest.fixture
def case():
    """Three rows of width 100 with a poisoned tail: a long row, a short row (n < K) and an
    empty row. Row 0 has 4 top values, then a tie class of 20 at the K-th value of which the
    answer takes 12."""
    rng = np.random.default_rng(7)
    arena = rng.standard_normal((3, 104), dtype=np.float32)
    arena[:, 100:] = 3e38
    logits = arena[:, :100]
    logits[0] = np.minimum(logits[0], 2.0)
    logits[0, 30:34] = 9.0
    logits[0, 10:30] = 2.5  # the K-th value's tie class
    logits[0, 40:45] = -7.0
    lengths = np.array([100, 9, 0], np.int32)
    logits[1, 9:] = 3e38  # poison past the short row
    indices, values = oracle.topk_dense(logits, K, lengths, return_values=True)
    return logits, lengths, indices, values


def _check(case, indices=None, values=None) -> ValidationReport:
    """Validate ``indices`` (default: the correct ones) with ``values`` (default: none, so an
    index mutation is not also a values mismatch)."""
    logits, lengths, good_i, _ = case
    return validate.check_dense(
        logits, K, good_i if indices is None else indices, lengths, values=values
    )


def _expect(report: ValidationReport, row: int, code: str) -> None:
    assert not report.ok
    assert row in report.failures, report.summary()
    assert code in report.failures[row], report.summary()
    assert code in report.summary()
    with pytest.raises(AssertionError, match=code):
        report.raise_if_failed()


def test_correct_answer_passes(case):
    assert _check(case, values=case[3]).ok
    report = _check(case)
    assert report.ok and report.rows_checked == 3 and report.failed_rows() == []
    report.raise_if_failed()
    assert "all passed" in report.summary()


def test_duplicate_index(case):
    indices = case[2].copy()
    indices[0, 3] = indices[0, 7]
    _expect(_check(case, indices), 0, "duplicate")


@pytest.mark.parametrize("bad", [100, 101, 5000, -2, 0x7FFFFFFF, -0x80000000])
def test_out_of_window_index(case, bad):
    indices = case[2].copy()
    indices[0, 5] = bad
    _expect(_check(case, indices), 0, "out_of_window")


def test_index_past_short_row_length(case):
    indices = case[2].copy()
    indices[1, 0] = 9  # the poisoned element just past n = 9
    _expect(_check(case, indices), 1, "out_of_window")


def test_smaller_value_swapped_in(case):
    logits, lengths, indices, _ = case
    indices = indices.copy()
    chosen = set(indices[0].tolist())
    row = logits[0]
    outside = [i for i in range(100) if i not in chosen]
    smaller = min(outside, key=lambda i: row[i])
    indices[0, 0] = smaller
    report = _check(case, indices)
    _expect(report, 0, "wrong_multiset")
    assert "missing" in report.summary()


@pytest.mark.parametrize("stale", [0x7FFFFFFF, 0, 95, "previous"])
def test_unwritten_slot(case, stale):
    """A slot left as the sentinel of an uninitialised buffer, a zeroed buffer, or an index
    left over from an earlier answer (here: the same buffer one row up)."""
    indices = case[2].copy()
    indices[0, -1] = indices[0, 0] if stale == "previous" else stale
    report = _check(case, indices)
    assert not report.ok and 0 in report.failures
    assert set(report.failures[0]) <= {"out_of_window", "duplicate", "wrong_multiset"}


def test_missing_pad(case):
    indices = case[2].copy()
    indices[1, 12] = 0  # slot past n = 9 must be -1
    _expect(_check(case, indices), 1, "padding")


def test_pad_where_index_due(case):
    indices = case[2].copy()
    indices[1, 4] = -1
    _expect(_check(case, indices), 1, "padding")


def test_empty_row_must_be_all_pad(case):
    indices = case[2].copy()
    indices[2, 0] = 0
    _expect(_check(case, indices), 2, "padding")


def test_wrong_value(case):
    values = case[3].copy()
    values[0, 3] = np.nextafter(values[0, 3], np.float32(np.inf))
    _expect(_check(case, values=values), 0, "values_mismatch")


def test_values_sign_of_zero_must_match(case):
    logits, lengths, _, _ = case
    logits = logits.copy()
    logits[0, 50] = np.float32(-0.0)
    logits[0, :] = np.where(np.arange(100) == 50, logits[0], -np.abs(logits[0]) - 1)
    indices, values = oracle.topk_dense(logits, K, lengths, return_values=True)
    slot = int(np.flatnonzero(indices[0] == 50)[0])
    values[0, slot] = np.float32(0.0)  # equal as floats, not bit-equal
    report = validate.check_dense(logits, K, indices, lengths, values=values)
    _expect(report, 0, "values_mismatch")


@pytest.mark.parametrize("pad", [0.0, -np.inf, np.nan, -3.4e38])
def test_wrong_values_pad(case, pad):
    values = case[3].copy()
    values[1, 10] = pad
    _expect(_check(case, values=values), 1, "values_padding")


def test_values_with_wrong_dtype_and_shape(case):
    report = _check(case, values=case[3].astype(np.float64))
    assert "dtype" in report.failures[0]
    report = _check(case, values=case[3][:, :-1])
    assert "shape" in report.failures[0]


def test_indices_dtype_and_shape(case):
    report = _check(case, case[2].astype(np.int64))
    assert not report.ok and set(report.failures) == {0, 1, 2}
    assert report.failures[0] == ["dtype"] and "int64" in report.summary()
    report = _check(case, case[2][:, :-1])
    assert report.failures[1] == ["shape"]
    report = _check(case, case[2].astype(np.float32))
    assert report.failures[0] == ["dtype"]


def test_any_order_accepted(case):
    logits, lengths, indices, values = case
    indices, values = indices.copy(), values.copy()
    rng = np.random.default_rng(0)
    for r, n in enumerate(lengths):
        m = min(K, int(n))
        perm = rng.permutation(m)
        indices[r, :m] = indices[r, perm]
        values[r, :m] = values[r, perm]
    assert _check(case, indices, values).ok


def test_tie_member_swap_accepted(case):
    logits, lengths, indices, values = case
    row = indices[0].tolist()
    tied_in = [i for i in range(10, 30) if i in row]
    tied_out = [i for i in range(10, 30) if i not in row]
    assert len(tied_in) == 12 and len(tied_out) == 8
    indices = indices.copy()
    for a, b in zip(tied_in[:5], tied_out[:5], strict=True):
        indices[0, row.index(a)] = b
    assert _check(case, indices).ok


def _tie_case(bits_a: int, bits_b: int, top: float, rest: float):
    """A row whose K-th value's tie class holds both bit patterns: K-1 ``top`` values, then
    ``bits_a`` at index K-1 (selected) and ``bits_b`` at index 30 (not selected), the rest
    ``rest`` (which may belong to the tie class too)."""
    logits = np.full((1, 40), rest, np.float32)
    logits[0, : K - 1] = top
    logits[0, K - 1] = _f32(bits_a)
    logits[0, 30] = _f32(bits_b)
    indices, values = oracle.topk_dense(logits, K, return_values=True)
    assert K - 1 in indices[0] and 30 not in indices[0]
    swapped = indices.copy()
    swapped[0, np.flatnonzero(indices[0] == K - 1)[0]] = 30
    return logits, indices, values, swapped


@pytest.mark.parametrize(
    "bits_a, bits_b, top, rest",
    [
        (0x80000000, 0x00000000, 1.0, -5.0),  # -0.0 selected, +0.0 swapped in
        (0x00000000, 0x80000000, 1.0, -5.0),
        (0x7FC00000, 0xFFC00001, np.nan, -5.0),  # NaN vs NaN, other sign and payload
        (0x7F800001, 0x7FFFFFFF, np.nan, np.inf),
        (0x3F800000, 0x3F800000, 2.0, -5.0),  # ordinary equal values
        (0xFF800000, 0xFF800000, 2.0, -np.inf),  # -inf tie class
    ],
)
def test_signed_zero_and_nan_tie_swaps_accepted(bits_a, bits_b, top, rest):
    logits, indices, values, swapped = _tie_case(bits_a, bits_b, top, rest)
    assert validate.check_dense(logits, K, swapped).ok
    # With values, the swapped slot must carry the new element's own bits.
    new_values = values.copy()
    new_values[0, np.flatnonzero(swapped[0] == 30)[0]] = logits[0, 30]
    assert validate.check_dense(logits, K, swapped, values=new_values).ok
    assert not validate.check_dense(logits, K, swapped, values=values).ok or bits_a == bits_b


def test_nan_outranks_inf():
    logits = np.zeros((1, 20), np.float32)
    logits[0, 3] = np.nan
    logits[0, 4] = np.inf
    ok = validate.check_dense(logits, 1, np.array([[3]], np.int32))
    bad = validate.check_dense(logits, 1, np.array([[4]], np.int32))
    assert ok.ok and not bad.ok and bad.failures[0] == ["wrong_multiset"]


def test_denormal_is_not_zero():
    logits = np.zeros((1, 8), np.float32)
    logits[0, 5] = _f32(0x00000001)
    assert validate.check_dense(logits, 1, np.array([[5]], np.int32)).ok
    assert not validate.check_dense(logits, 1, np.array([[0]], np.int32)).ok


def test_windows_and_prefill_frames():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((2, 50), dtype=np.float32)
    rs, re = np.array([5, 0], np.int32), np.array([45, 10], np.int32)
    indices = oracle.topk_prefill(logits, rs, re, 12)
    assert validate.check_prefill(logits, rs, re, 12, indices).ok
    assert not validate.check_prefill(logits, rs, re, 12, indices + rs[:, None]).ok
    windows = RowWindows(rs.astype(np.int64), (re - rs).astype(np.int64))
    assert validate.assert_topk(logits, windows, 12, indices).ok


def test_decode_wrapper_and_assert_forms():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((4, 30), dtype=np.float32)
    kv = np.array([20, 3], np.int32)
    indices = oracle.topk_decode(logits, kv, 8, next_n=2)
    validate.assert_decode(logits, kv, 8, indices, next_n=2)
    bad = indices.copy()
    bad[0, 0] = 19  # row 0 has n = 19
    with pytest.raises(AssertionError, match="out_of_window"):
        validate.assert_decode(logits, kv, 8, bad, next_n=2)
    validate.assert_dense(logits, 8, oracle.topk_dense(logits, 8))
    lengths = np.array([30, 5, 0, 2], np.int32)
    validate.assert_prefill(
        logits, np.zeros(4, np.int32), lengths, 8, oracle.topk_dense(logits, 8, lengths)
    )


def test_summary_lists_first_rows_and_codes():
    logits = np.random.default_rng(5).standard_normal((20, 64), dtype=np.float32)
    indices = oracle.topk_dense(logits, 4)
    indices[:, 0] = indices[:, 1]
    report = validate.check_dense(logits, 4, indices)
    text = report.summary(max_rows=3)
    assert "20 of 20 rows failed" in text and "duplicate: 20" in text
    assert "row 0:" in text and "row 3:" not in text and "17 more rows" in text
    assert all(code in FAILURE_CODES for codes in report.failures.values() for code in codes)


def test_non_array_answer_is_a_type_error():
    logits = np.zeros((1, 4), np.float32)
    with pytest.raises(TypeError, match="indices"):
        validate.check_dense(logits, 2, [[0, 1]])


def test_wide_rows():
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((16, 262_144), dtype=np.float32)
    indices = np.repeat(oracle.topk_dense(logits[:1], 2048), 16, axis=0)
    report = validate.check_dense(logits, 2048, indices)
    # Row 0 holds its own answer; every other row got row 0's.
    assert set(report.failures) == set(range(1, 16))
    assert all(codes == ["wrong_multiset"] for codes in report.failures.values())
