"""Row windows: which columns of each logits row a top-K call may select from.

All three call shapes reduce to one description, :class:`RowWindows`: row ``r`` selects from
columns ``[starts[r], starts[r] + lengths[r])`` of ``logits[r]`` and reports indices relative to
``starts[r]`` (the local frame).

- decode: ``starts = 0`` and the length comes from the request's total KV length, the MTP row
  offset and the compression ratio (:func:`decode_row_lengths`);
- prefill: ``[row_starts[r], row_ends[r])`` (:func:`prefill_windows`);
- dense: ``starts = 0``, ``lengths`` given or the full width (:func:`dense_windows`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _checks
from ._checks import MAX_COMPRESS_RATIO

__all__ = [
    "MAX_COMPRESS_RATIO",
    "RowWindows",
    "decode_row_lengths",
    "decode_windows",
    "prefill_windows",
    "prefill_row_windows",
    "dense_windows",
]


@dataclass(frozen=True)
class RowWindows:
    """Per-row selection windows.

    Attributes:
        starts: int64 ``[rows]``, first column of each row's window (0 for decode and dense).
        lengths: int64 ``[rows]``, number of columns in each window (``n_r``).
    """

    starts: np.ndarray
    lengths: np.ndarray

    def __post_init__(self) -> None:
        starts = np.ascontiguousarray(self.starts, dtype=np.int64)
        lengths = np.ascontiguousarray(self.lengths, dtype=np.int64)
        if starts.ndim != 1 or lengths.ndim != 1 or starts.shape != lengths.shape:
            raise ValueError(
                f"RowWindows starts and lengths must be 1-D of one length, "
                f"got shapes {starts.shape} and {lengths.shape}"
            )
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "lengths", lengths)

    @property
    def rows(self) -> int:
        """Number of rows."""
        return int(self.starts.shape[0])


def decode_row_lengths(
    kv_lens: np.ndarray, next_n: int, compress_ratio: int, width: int
) -> np.ndarray:
    """Valid length of every decode row.

    Row ``r`` belongs to request ``r // next_n`` and has
    ``n_r = max(0, (kv_lens[r // next_n] - next_n + r % next_n + 1) // compress_ratio)``,
    clamped to ``width``. The arithmetic is int64, so no int32 overflow.

    Args:
        kv_lens: int32 ``[batch]``, total (uncompressed) KV length per request, >= 0.
        next_n: rows per request (MTP draft tokens + 1), >= 1.
        compress_ratio: KV compression ratio, a power of two in ``[1, MAX_COMPRESS_RATIO]``.
        width: logits width (columns), >= 0.

    Returns:
        int32 ``[batch * next_n]``.

    Raises:
        TypeError, ValueError: bad arguments (see :mod:`gvr_reference._checks`).
    """
    next_n = _checks.check_next_n(next_n)
    compress_ratio = _checks.check_compress_ratio(compress_ratio)
    width = _check_width(width)
    kv_lens = _checks.check_index_array(kv_lens, "kv_lens")
    _checks.check_kv_lens(kv_lens, kv_lens.shape[0] * next_n, next_n)
    return decode_lengths_unchecked(kv_lens, next_n, compress_ratio, width).astype(np.int32)


def decode_lengths_unchecked(
    kv_lens: np.ndarray, next_n: int, compress_ratio: int, width: int
) -> np.ndarray:
    """:func:`decode_row_lengths` as int64, for arguments already checked."""
    rows = kv_lens.shape[0] * next_n
    r = np.arange(rows, dtype=np.int64)
    kv = kv_lens.astype(np.int64)[r // next_n]
    n = np.maximum(kv - next_n + r % next_n + 1, 0) // compress_ratio
    return np.minimum(n, width)


def decode_windows(kv_lens: np.ndarray, next_n: int, compress_ratio: int, width: int) -> RowWindows:
    """:class:`RowWindows` of a decode call: starts 0, lengths from
    :func:`decode_row_lengths` (``kv_lens`` int32 ``[batch]``; ``batch * next_n`` rows of a
    ``width``-wide logits array).

    Raises:
        TypeError, ValueError: bad arguments (as :func:`decode_row_lengths`).
    """
    lengths = decode_row_lengths(kv_lens, next_n, compress_ratio, width)
    return RowWindows(np.zeros(lengths.shape[0], np.int64), lengths)


def prefill_windows(
    row_starts: np.ndarray, row_ends: np.ndarray, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Starts and lengths of prefill windows ``[row_starts[r], row_ends[r])``.

    Args:
        row_starts: int32 ``[rows]``, first column of each window.
        row_ends: int32 ``[rows]``, one past the last column; ``row_starts <= row_ends <= width``.
        width: logits width.

    Returns:
        ``(starts, lengths)``, both int64 ``[rows]``.

    Raises:
        TypeError, ValueError: bad arrays or a window outside ``[0, width]``.
    """
    width = _check_width(width)
    rs = _checks.check_index_array(row_starts, "row_starts")
    row_starts, row_ends = _checks.check_row_bounds(rs, row_ends, rs.shape[0], width)
    starts = row_starts.astype(np.int64)
    return starts, row_ends.astype(np.int64) - starts


def prefill_row_windows(row_starts: np.ndarray, row_ends: np.ndarray, width: int) -> RowWindows:
    """:class:`RowWindows` of a prefill call: windows ``[row_starts[r], row_ends[r])`` (as
    :func:`prefill_windows`: int32 ``[rows]`` bounds within ``[0, width]``; int64 starts and
    lengths).

    Raises:
        TypeError, ValueError: bad arrays or a window outside ``[0, width]``.
    """
    return RowWindows(*prefill_windows(row_starts, row_ends, width))


def dense_windows(rows: int, width: int, lengths: np.ndarray | None = None) -> RowWindows:
    """:class:`RowWindows` of a dense call: full rows, or the first ``lengths[r]`` columns
    (clamped to ``width``).

    Args:
        rows: number of rows.
        width: logits width.
        lengths: optional int32 ``[rows]``, >= 0.

    Raises:
        TypeError, ValueError: bad ``lengths``.
    """
    width = _check_width(width)
    if lengths is None:
        n = np.full(rows, width, np.int64)
    else:
        lengths = _checks.check_lengths(lengths, rows)
        n = np.minimum(lengths.astype(np.int64), width)
    return RowWindows(np.zeros(rows, np.int64), n)


def _check_width(width: object) -> int:
    if isinstance(width, (bool, np.bool_)) or not isinstance(width, (int, np.integer)):
        raise TypeError(f"width must be an int, got {type(width).__name__} {width!r}")
    if width < 0:
        raise ValueError(f"width must be >= 0, got {width}")
    return int(width)
