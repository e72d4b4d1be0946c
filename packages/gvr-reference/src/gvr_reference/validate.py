"""The validator every GVR test uses: is a top-K answer exact?

For every row ``r`` with window length ``n`` and ``m = min(k, n)``, the answer must have:

- ``indices``: int32 ``[rows, k]`` (codes ``"dtype"``, ``"shape"``);
- in slots ``0 .. m-1``: indices inside ``[0, n)`` (``"out_of_window"``; a ``-1`` there is
  ``"padding"``), no index twice (``"duplicate"``);
- in slots ``m .. k-1``: exactly ``-1`` (``"padding"``);
- the multiset of order keys of the selected elements equal to the oracle's top-``m`` key
  multiset (``"wrong_multiset"``). This is tie-agnostic (any member of the K-th value's tie
  class may be chosen), NaN-aware and treats -0.0 and +0.0 as one value, exactly like the
  order key;
- with ``values``: float32 ``[rows, k]``, ``values[r, j]`` bit-equal to the logit at the
  selected index for ``j < m`` (``"values_mismatch"``) and exactly ``-FLT_MAX`` for
  ``j >= m`` (``"values_padding"``).

How the multiset test is done without sorting the row: let ``S`` be the ``m`` distinct selected
indices and ``t`` the smallest key among them. ``S`` is a top-``m`` set iff no element outside
``S`` has a key above ``t``, i.e. iff the row has exactly as many keys ``> t`` as ``S`` has.
(If ``S`` is a top-``m`` set, an outside key ``> t`` would outrank the member with key ``t``;
conversely the row's keys ``> t`` then all lie in ``S``, so every outside key is ``<= t <=``
every member key.) The top-``m`` key multiset is unique, so this is the same as comparing
multisets with the oracle. One vectorized pass over the row, rows in parallel with numba.
The test is made on rows whose first ``m`` slots are structurally valid; other rows have
already failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numba
import numpy as np
from numba import prange

from . import _checks
from ._numba_core import PAD_VALUE_BITS, count_key_at_least, flat_rows, key_of
from .keys import key_format, key_to_float, order_key
from .windows import RowWindows, decode_windows, dense_windows, prefill_row_windows

__all__ = [
    "FAILURE_CODES",
    "ValidationReport",
    "check_topk",
    "check_decode",
    "check_prefill",
    "check_dense",
    "assert_topk",
    "assert_decode",
    "assert_prefill",
    "assert_dense",
]

logger = logging.getLogger(__name__)

FAILURE_CODES = (
    "shape",
    "dtype",
    "duplicate",
    "out_of_window",
    "padding",
    "wrong_multiset",
    "values_mismatch",
    "values_padding",
)
"""The fixed vocabulary of per-row failure codes."""

_DUPLICATE = 1
_OUT_OF_WINDOW = 2
_PADDING = 4
_WRONG_MULTISET = 8
_VALUES_MISMATCH = 16
_VALUES_PADDING = 32
_BIT_CODES = (
    (_DUPLICATE, "duplicate"),
    (_OUT_OF_WINDOW, "out_of_window"),
    (_PADDING, "padding"),
    (_WRONG_MULTISET, "wrong_multiset"),
    (_VALUES_MISMATCH, "values_mismatch"),
    (_VALUES_PADDING, "values_padding"),
)
_DETAIL_ROWS = 8  # rows that get a readable explanation


@dataclass
class ValidationReport:
    """Result of a validation.

    Attributes:
        ok: True iff every row passed.
        rows_checked: number of rows examined.
        failures: row -> failure codes (from :data:`FAILURE_CODES`), failing rows only.
        details: row -> readable explanations, for the first few failing rows.
        notes: whole-answer remarks (e.g. the dtype that was found).
    """

    ok: bool
    rows_checked: int
    failures: dict[int, list[str]] = field(default_factory=dict)
    details: dict[int, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def failed_rows(self) -> list[int]:
        """Sorted indices of the failing rows."""
        return sorted(self.failures)

    def summary(self, max_rows: int = 8) -> str:
        """A readable account: counts per code, then the first ``max_rows`` failing rows."""
        if self.ok:
            return f"top-K exact: {self.rows_checked} rows checked, all passed"
        rows = self.failed_rows()
        counts: dict[str, int] = {}
        for codes in self.failures.values():
            for code in codes:
                counts[code] = counts.get(code, 0) + 1
        per_code = ", ".join(f"{code}: {counts[code]}" for code in FAILURE_CODES if code in counts)
        lines = [f"top-K NOT exact: {len(rows)} of {self.rows_checked} rows failed ({per_code})"]
        lines += [f"  note: {note}" for note in self.notes]
        for r in rows[:max_rows]:
            lines.append(f"  row {r}: {', '.join(self.failures[r])}")
            lines += [f"    {d}" for d in self.details.get(r, [])]
        if len(rows) > max_rows:
            lines.append(f"  ... and {len(rows) - max_rows} more rows")
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        """Raise ``AssertionError`` with :meth:`summary` unless ``ok``."""
        if not self.ok:
            raise AssertionError(self.summary())

    def __bool__(self) -> bool:
        return self.ok


@numba.njit(cache=True, nogil=True)
def _check_row(srow, row, k, idx_row, val_row, has_values, pad_bits):
    """Failure bit mask of one row (see the module doc)."""
    n = row.shape[0]
    m = min(k, n)
    code = 0
    for j in range(m, k):
        if idx_row[j] != -1:
            code |= _PADDING
    structure_ok = True
    seen = np.empty(m, np.int64)
    c = 0
    for j in range(m):
        v = idx_row[j]
        if v == -1:
            code |= _PADDING
            structure_ok = False
        elif v < 0 or v >= n:
            code |= _OUT_OF_WINDOW
            structure_ok = False
        else:
            seen[c] = v
            c += 1
    if c > 1:
        seen = np.sort(seen[:c])
        for j in range(1, c):
            if seen[j] == seen[j - 1]:
                code |= _DUPLICATE
                structure_ok = False
                break
    if structure_ok and m < n:
        t = np.int64(0xFFFFFFFF)
        for j in range(m):
            t = min(t, key_of(row[idx_row[j]]))
        selected_above = 0
        for j in range(m):
            selected_above += key_of(row[idx_row[j]]) > t
        row_above = 0 if t == 0xFFFFFFFF else count_key_at_least(srow, row, t + 1)
        if row_above != selected_above:
            code |= _WRONG_MULTISET
    if has_values:
        for j in range(k):
            if j >= m:
                if val_row[j] != pad_bits:
                    code |= _VALUES_PADDING
            else:
                v = idx_row[j]
                if v >= 0 and v < n and val_row[j] != row[v]:
                    code |= _VALUES_MISMATCH
    return code


@numba.njit(parallel=True, cache=True)
def _check_rows(sbits, flat, row_stride, starts, lengths, k, idx, vals, has_values, pad_bits):
    rows = starts.shape[0]
    codes = np.zeros(rows, np.int32)
    for r in prange(rows):
        lo = r * row_stride + starts[r]
        hi = lo + lengths[r]
        codes[r] = _check_row(sbits[lo:hi], flat[lo:hi], k, idx[r], vals[r], has_values, pad_bits)
    return codes


def _fmt(x: np.float32) -> str:
    bits = int(np.asarray(x, np.float32).view(np.uint32))
    return f"{float(x)!r} (0x{bits:08X})"


def _explain_row(
    segment: np.ndarray,
    k: int,
    idx_row: np.ndarray,
    val_row: np.ndarray | None,
    codes: list,
    pad_bits: int = PAD_VALUE_BITS,
) -> list[str]:
    """Readable explanations of one failing row (pure numpy; only a few rows get one)."""
    n = segment.shape[0]
    m = min(k, n)
    out: list[str] = []
    head = idx_row[:m]
    if "padding" in codes:
        due = np.flatnonzero(head == -1)[:4]
        if due.size:
            out.append(f"padding: -1 at slots {due.tolist()} where an index is due (n={n})")
        bad = np.flatnonzero(idx_row[m:] != -1)[:4] + m
        if bad.size:
            got = idx_row[bad].tolist()
            out.append(f"padding: slots {bad.tolist()} must be -1 (n={n}, k={k}), got {got}")
    if "out_of_window" in codes:
        bad = np.flatnonzero((head != -1) & ((head < 0) | (head >= n)))[:4]
        out.append(
            f"out_of_window: slots {bad.tolist()} hold {head[bad].tolist()}, window is [0, {n})"
        )
    if "duplicate" in codes:
        vals, counts = np.unique(head[(head >= 0) & (head < n)], return_counts=True)
        dup = vals[counts > 1][:4]
        slots = [np.flatnonzero(head == d).tolist() for d in dup]
        out.append(f"duplicate: indices {dup.tolist()} at slots {slots}")
    if "wrong_multiset" in codes:
        keys = order_key(np.ascontiguousarray(segment))
        expected = np.sort(np.partition(keys, n - m)[n - m :])
        got = np.sort(keys[head.astype(np.int64)])
        missing = key_to_float(np.array(_multiset_minus(expected, got), np.uint32))
        extra = key_to_float(np.array(_multiset_minus(got, expected), np.uint32))
        kth = key_to_float(expected[:1])[0]
        out.append(
            f"wrong_multiset: the K-th value should be {_fmt(kth)}; missing "
            f"{[_fmt(x) for x in missing]}, extra {[_fmt(x) for x in extra]}"
        )
    if val_row is not None and "values_mismatch" in codes:
        ok_idx = (head >= 0) & (head < n)
        want = np.where(ok_idx, segment.view(np.uint32)[np.where(ok_idx, head, 0)], 0)
        bad = np.flatnonzero(ok_idx & (val_row[:m].view(np.uint32) != want))[:4]
        for j in bad:
            out.append(
                f"values_mismatch: slot {int(j)} (index {int(head[j])}) holds "
                f"{_fmt(val_row[j])}, logit is {_fmt(segment[head[j]])}"
            )
    if val_row is not None and "values_padding" in codes:
        bad = np.flatnonzero(val_row[m:].view(np.uint32) != pad_bits)[:4] + m
        pad = _fmt(np.uint32(pad_bits).view(np.float32))
        out.append(
            f"values_padding: slots {bad.tolist()} must be {pad} (the pad), got "
            f"{[_fmt(val_row[j]) for j in bad]}"
        )
    return out


def _multiset_minus(a: np.ndarray, b: np.ndarray, limit: int = 4) -> list[int]:
    """Up to ``limit`` elements of ``a`` left over after removing ``b`` (as multisets)."""
    ub, cb = np.unique(b, return_counts=True)
    have = dict(zip(ub.tolist(), cb.tolist(), strict=True))
    ua, ca = np.unique(a, return_counts=True)
    left: list[int] = []
    for x, count in zip(ua.tolist(), ca.tolist(), strict=True):
        left += [x] * min(limit - len(left), max(0, count - have.get(x, 0)))
        if len(left) >= limit:
            break
    return left


def check_topk(
    logits: np.ndarray,
    windows: RowWindows,
    k: int,
    indices: np.ndarray,
    values: np.ndarray | None = None,
    dtype: str = "float32",
) -> ValidationReport:
    """Validate a top-K answer against row windows.

    Args:
        logits: float32 ``[rows, width]``, any strides: the input the answer was computed on.
        windows: :class:`~gvr_reference.windows.RowWindows` of the call.
        k: the requested K, int >= 1.
        indices: the answer, a numpy array (int32 ``[rows, k]`` expected; any other dtype or
            shape is reported, not raised).
        values: the optional values answer (float32 ``[rows, k]`` expected).
        dtype: the score format the call read (``"float32"``, or ``"bfloat16"`` / ``"float16"``
            with ``logits`` and ``values`` their exact float32 widening): the values' pad
            beside ``-1`` is that format's most negative finite value.

    Returns:
        a :class:`ValidationReport`.

    Raises:
        TypeError, ValueError: bad ``logits``/``windows``/``k`` or a non-array answer (the
            caller's error, not the answer's).
    """
    rows, width = _checks.check_logits(logits)
    k = _checks.check_k(k)
    pad_bits = key_format(dtype).neg_max_widened_bits
    if not isinstance(windows, RowWindows):
        raise TypeError(f"windows must be a RowWindows, got {type(windows).__name__}")
    _checks.check_windows_fit(windows.starts, windows.lengths, rows, width)
    for name, arr in (("indices", indices), ("values", values)):
        if arr is not None and not isinstance(arr, np.ndarray):
            raise TypeError(
                f"{name} must be a numpy ndarray (convert tensors with .cpu().numpy()), "
                f"got {type(arr).__name__}"
            )

    whole: list[str] = []
    notes: list[str] = []
    idx = None
    if indices.shape != (rows, k):
        whole.append("shape")
        notes.append(f"indices has shape {indices.shape}, expected {(rows, k)}")
    else:
        if indices.dtype != np.int32:
            whole.append("dtype")
            notes.append(f"indices has dtype {indices.dtype}, expected int32")
        if np.issubdtype(indices.dtype, np.integer):
            idx = np.ascontiguousarray(indices, dtype=np.int64)
    vals = None
    if values is not None:
        if values.shape != (rows, k):
            whole.append("shape")
            notes.append(f"values has shape {values.shape}, expected {(rows, k)}")
        elif values.dtype != np.float32:
            whole.append("dtype")
            notes.append(f"values has dtype {values.dtype}, expected float32")
        else:
            vals = np.ascontiguousarray(values).view(np.uint32)

    failures: dict[int, list[str]] = {}
    if whole:
        for r in range(rows) if rows else [-1]:
            failures[r] = list(dict.fromkeys(whole))
    if idx is not None and rows:
        flat, row_stride = flat_rows(logits)
        has_values = vals is not None
        vbits = vals if has_values else np.zeros((rows, 0), np.uint32)
        codes = _check_rows(
            flat.view(np.int32),
            flat,
            row_stride,
            windows.starts,
            windows.lengths,
            k,
            idx,
            vbits,
            has_values,
            np.uint32(pad_bits),
        )
        for r in np.flatnonzero(codes).tolist():
            found = [name for bit, name in _BIT_CODES if codes[r] & bit]
            failures[r] = failures.get(r, []) + found

    details: dict[int, list[str]] = {}
    if idx is not None:
        for r in sorted(failures)[:_DETAIL_ROWS]:
            if r < 0:
                continue
            start, n = int(windows.starts[r]), int(windows.lengths[r])
            val_row = None if vals is None else vals[r].view(np.float32)
            details[r] = _explain_row(
                logits[r, start : start + n], k, idx[r], val_row, failures[r], pad_bits
            )
    report = ValidationReport(
        ok=not failures, rows_checked=rows, failures=failures, details=details, notes=notes
    )
    if not report.ok:
        logger.debug("%s", report.summary())
    return report


def check_decode(
    logits: np.ndarray,
    kv_lens: np.ndarray,
    k: int,
    indices: np.ndarray,
    *,
    next_n: int = 1,
    compress_ratio: int = 1,
    values: np.ndarray | None = None,
) -> ValidationReport:
    """Validate a decode answer (see :func:`gvr_reference.oracle.topk_decode` for the call).

    Args:
        logits: float32 ``[batch * next_n, width]``, any strides.
        kv_lens: int32 ``[batch]``: total (uncompressed) KV length per request, ``>= 0``.
        k: the requested K, int ``>= 1``.
        indices: the answer, a numpy array (int32 ``[rows, k]`` expected, row-local; another
            dtype or shape is reported, not raised).
        next_n: rows per request, ``>= 1``.
        compress_ratio: KV compression ratio, a power of two.
        values: the optional values answer (float32 ``[rows, k]``).

    Returns:
        a :class:`ValidationReport` (as :func:`check_topk`).

    Raises:
        TypeError, ValueError: bad call arguments.
    """
    rows, width = _checks.check_logits(logits)
    next_n = _checks.check_next_n(next_n)
    compress_ratio = _checks.check_compress_ratio(compress_ratio)
    _checks.check_kv_lens(kv_lens, rows, next_n)
    windows = decode_windows(kv_lens, next_n, compress_ratio, width)
    return check_topk(logits, windows, k, indices, values)


def check_prefill(
    logits: np.ndarray,
    row_starts: np.ndarray,
    row_ends: np.ndarray,
    k: int,
    indices: np.ndarray,
    values: np.ndarray | None = None,
) -> ValidationReport:
    """Validate a prefill answer (window-local indices over ``[row_starts, row_ends)``).

    Args:
        logits: float32 ``[rows, width]``, any strides.
        row_starts, row_ends: int32 ``[rows]``, ``0 <= row_starts <= row_ends <= width``.
        k: the requested K, int ``>= 1``.
        indices: the answer, a numpy array (int32 ``[rows, k]`` expected, window-local).
        values: the optional values answer (float32 ``[rows, k]``).

    Returns:
        a :class:`ValidationReport` (as :func:`check_topk`).

    Raises:
        TypeError, ValueError: bad call arguments.
    """
    rows, width = _checks.check_logits(logits)
    _checks.check_row_bounds(row_starts, row_ends, rows, width)
    return check_topk(logits, prefill_row_windows(row_starts, row_ends, width), k, indices, values)


def check_dense(
    logits: np.ndarray,
    k: int,
    indices: np.ndarray,
    lengths: np.ndarray | None = None,
    values: np.ndarray | None = None,
) -> ValidationReport:
    """Validate a dense answer over ``[0, lengths[r])`` (full rows when ``lengths`` is None).

    Args:
        logits: float32 ``[rows, width]``, any strides.
        k: the requested K, int ``>= 1``.
        indices: the answer, a numpy array (int32 ``[rows, k]`` expected).
        lengths: optional int32 ``[rows]`` valid columns per row, ``>= 0`` (clamped to
            ``width``).
        values: the optional values answer (float32 ``[rows, k]``).

    Returns:
        a :class:`ValidationReport` (as :func:`check_topk`).

    Raises:
        TypeError, ValueError: bad call arguments.
    """
    rows, width = _checks.check_logits(logits)
    return check_topk(logits, dense_windows(rows, width, lengths), k, indices, values)


def assert_topk(logits, windows, k, indices, values=None) -> ValidationReport:
    """:func:`check_topk` (same arguments, shapes and dtypes), raising ``AssertionError`` with
    the report's summary when the answer is wrong; returns the report when it is right.

    Raises:
        AssertionError: the answer fails validation.
        TypeError, ValueError: bad call arguments (as :func:`check_topk`).
    """
    report = check_topk(logits, windows, k, indices, values)
    report.raise_if_failed()
    return report


def assert_decode(
    logits, kv_lens, k, indices, *, next_n=1, compress_ratio=1, values=None
) -> ValidationReport:
    """:func:`check_decode` (same arguments, shapes and dtypes), raising ``AssertionError`` with
    the report's summary when the answer is wrong; returns the report when it is right.

    Raises:
        AssertionError: the answer fails validation.
        TypeError, ValueError: bad call arguments (as :func:`check_decode`).
    """
    report = check_decode(
        logits, kv_lens, k, indices, next_n=next_n, compress_ratio=compress_ratio, values=values
    )
    report.raise_if_failed()
    return report


def assert_prefill(logits, row_starts, row_ends, k, indices, values=None) -> ValidationReport:
    """:func:`check_prefill` (same arguments, shapes and dtypes), raising ``AssertionError`` with
    the report's summary when the answer is wrong; returns the report when it is right.

    Raises:
        AssertionError: the answer fails validation.
        TypeError, ValueError: bad call arguments (as :func:`check_prefill`).
    """
    report = check_prefill(logits, row_starts, row_ends, k, indices, values)
    report.raise_if_failed()
    return report


def assert_dense(logits, k, indices, lengths=None, values=None) -> ValidationReport:
    """:func:`check_dense` (same arguments, shapes and dtypes), raising ``AssertionError`` with
    the report's summary when the answer is wrong; returns the report when it is right.

    Raises:
        AssertionError: the answer fails validation.
        TypeError, ValueError: bad call arguments (as :func:`check_dense`).
    """
    report = check_dense(logits, k, indices, lengths, values)
    report.raise_if_failed()
    return report
