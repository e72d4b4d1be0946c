"""Argument validation shared by the oracle, the validator and the CPU engine.

Every check raises before any output is written:

- ``TypeError`` for a wrong Python type or numpy dtype,
- ``ValueError`` for a wrong shape or value,

and the message names the argument and the offending value, e.g.
``ValueError("next_n must be >= 1, got 0")``.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "check_logits",
    "check_index_array",
    "check_k",
    "check_next_n",
    "check_compress_ratio",
    "check_flag",
    "check_kv_lens",
    "check_row_bounds",
    "check_lengths",
    "check_windows_fit",
    "check_out_buffer",
]


def _type_name(x: object) -> str:
    if isinstance(x, np.ndarray):
        return f"ndarray of dtype {x.dtype}"
    return type(x).__name__


def check_logits(logits: object, name: str = "logits") -> tuple[int, int]:
    """Check that ``logits`` is a 2-D float32 numpy array (any strides).

    Returns:
        ``(rows, width)``.

    Raises:
        TypeError: not a numpy array, or not float32.
        ValueError: not 2-D.
    """
    if not isinstance(logits, np.ndarray):
        raise TypeError(f"{name} must be a numpy ndarray, got {_type_name(logits)}")
    if logits.dtype != np.float32:
        raise TypeError(f"{name} must be a float32 array, got {logits.dtype}")
    if logits.ndim != 2:
        raise ValueError(f"{name} must be 2-D [rows, width], got shape {logits.shape}")
    return int(logits.shape[0]), int(logits.shape[1])


def check_index_array(arr: object, name: str, dtype: type = np.int32) -> np.ndarray:
    """Check that ``arr`` is a 1-D numpy array of ``dtype`` (int32 by default).

    Raises:
        TypeError: not a numpy array, or the wrong dtype.
        ValueError: not 1-D.
    """
    want = np.dtype(dtype)
    if not isinstance(arr, np.ndarray):
        raise TypeError(f"{name} must be a numpy ndarray, got {_type_name(arr)}")
    if arr.dtype != want:
        raise TypeError(f"{name} must be an {want.name} array, got {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    return arr


def _check_int(value: object, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {_type_name(value)} {value!r}")
    return int(value)


def check_k(k: object) -> int:
    """Check that ``k`` is an int >= 1 and return it as a Python int.

    Raises:
        TypeError: ``k`` is not an integer (``bool`` is rejected).
        ValueError: ``k < 1``.
    """
    k = _check_int(k, "k")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return k


def check_next_n(next_n: object) -> int:
    """Check that ``next_n`` (rows per request) is an int >= 1.

    Raises:
        TypeError: not an integer.
        ValueError: ``next_n < 1``.
    """
    next_n = _check_int(next_n, "next_n")
    if next_n < 1:
        raise ValueError(f"next_n must be >= 1, got {next_n}")
    return next_n


#: The largest KV compression ratio: ``kv_lens`` are int32, so a larger ratio could only leave
#: every row empty (and the kernels take its log2 as an int32 shift).
MAX_COMPRESS_RATIO = 1 << 30


def check_compress_ratio(compress_ratio: object) -> int:
    """Check that ``compress_ratio`` is a power of two in ``[1, MAX_COMPRESS_RATIO]``.

    Raises:
        TypeError: not an integer.
        ValueError: not a power of two in that range.
    """
    cr = _check_int(compress_ratio, "compress_ratio")
    if cr < 1 or cr & (cr - 1) or cr > MAX_COMPRESS_RATIO:
        raise ValueError(
            f"compress_ratio must be a power of two in [1, {MAX_COMPRESS_RATIO}], got {cr}"
        )
    return cr


def check_flag(value: object, name: str) -> bool:
    """Check that an option is a bool (``True``/``False``/``np.bool_``).

    Raises:
        TypeError: anything else.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {_type_name(value)} {value!r}")
    return bool(value)


def _first_bad(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def check_kv_lens(kv_lens: object, rows: int, next_n: int) -> np.ndarray:
    """Check decode ``kv_lens``: int32 1-D, non-negative, ``len(kv_lens) * next_n == rows``.

    Raises:
        TypeError: not an int32 numpy array.
        ValueError: not 1-D, a negative length, or a row-count mismatch.
    """
    kv_lens = check_index_array(kv_lens, "kv_lens")
    if kv_lens.shape[0] * next_n != rows:
        raise ValueError(
            f"kv_lens.shape[0] * next_n must equal logits.shape[0] = {rows}, got "
            f"{kv_lens.shape[0]} * {next_n} = {kv_lens.shape[0] * next_n}"
        )
    neg = kv_lens < 0
    if neg.any():
        i = _first_bad(neg)
        raise ValueError(f"kv_lens must be >= 0, got {int(kv_lens[i])} at index {i}")
    return kv_lens


def check_row_bounds(
    row_starts: object, row_ends: object, rows: int, width: int
) -> tuple[np.ndarray, np.ndarray]:
    """Check prefill windows: int32 1-D arrays of ``rows`` entries with
    ``0 <= row_starts[r] <= row_ends[r] <= width``.

    Raises:
        TypeError: not int32 numpy arrays.
        ValueError: wrong shapes or an out-of-range window.
    """
    row_starts = check_index_array(row_starts, "row_starts")
    row_ends = check_index_array(row_ends, "row_ends")
    if row_starts.shape != row_ends.shape:
        raise ValueError(
            f"row_starts and row_ends must have the same shape, "
            f"got {row_starts.shape} and {row_ends.shape}"
        )
    if row_starts.shape[0] != rows:
        raise ValueError(
            f"row_starts must have logits.shape[0] = {rows} entries, got {row_starts.shape[0]}"
        )
    for name, arr in (("row_starts", row_starts), ("row_ends", row_ends)):
        bad = (arr < 0) | (arr > width)
        if bad.any():
            i = _first_bad(bad)
            raise ValueError(f"{name} must lie in [0, width={width}], got {int(arr[i])} at row {i}")
    bad = row_starts > row_ends
    if bad.any():
        i = _first_bad(bad)
        raise ValueError(
            f"row_starts must be <= row_ends, got row_starts[{i}]={int(row_starts[i])} > "
            f"row_ends[{i}]={int(row_ends[i])}"
        )
    return row_starts, row_ends


def check_lengths(lengths: object, rows: int) -> np.ndarray:
    """Check dense per-row ``lengths``: int32 1-D, ``rows`` entries, non-negative.

    Raises:
        TypeError: not an int32 numpy array.
        ValueError: wrong shape or a negative length.
    """
    lengths = check_index_array(lengths, "lengths")
    if lengths.shape[0] != rows:
        raise ValueError(
            f"lengths must have logits.shape[0] = {rows} entries, got {lengths.shape[0]}"
        )
    neg = lengths < 0
    if neg.any():
        i = _first_bad(neg)
        raise ValueError(f"lengths must be >= 0, got {int(lengths[i])} at index {i}")
    return lengths


def check_windows_fit(starts: np.ndarray, lengths: np.ndarray, rows: int, width: int) -> None:
    """Check that row windows ``[starts, starts + lengths)`` fit ``rows`` rows of ``width``.

    Raises:
        ValueError: a count mismatch, a negative start or length, or a window past the width.
    """
    if starts.shape[0] != rows:
        raise ValueError(
            f"windows must describe logits.shape[0] = {rows} rows, got {starts.shape[0]}"
        )
    for name, arr in (("windows.starts", starts), ("windows.lengths", lengths)):
        neg = arr < 0
        if neg.any():
            i = _first_bad(neg)
            raise ValueError(f"{name} must be >= 0, got {int(arr[i])} at row {i}")
    over = starts + lengths > width
    if over.any():
        i = _first_bad(over)
        raise ValueError(
            f"windows must end at or before width={width}, got start {int(starts[i])} + "
            f"length {int(lengths[i])} at row {i}"
        )


def check_out_buffer(buf: object, name: str, rows: int, k: int, dtype: type) -> np.ndarray:
    """Check a caller-provided output buffer: a writeable numpy array ``[rows, k]`` of
    ``dtype`` (int32 for indices, float32 for values).

    Raises:
        TypeError: not a numpy array, or the wrong dtype.
        ValueError: the wrong shape, or read-only.
    """
    want = np.dtype(dtype)
    if not isinstance(buf, np.ndarray):
        raise TypeError(f"{name} must be a numpy ndarray, got {_type_name(buf)}")
    if buf.dtype != want:
        raise TypeError(f"{name} must be a {want.name} array, got {buf.dtype}")
    if buf.shape != (rows, k):
        raise ValueError(f"{name} must have shape {(rows, k)}, got {buf.shape}")
    if not buf.flags.writeable:
        raise ValueError(f"{name} must be writeable, got a read-only array")
    return buf


def check_apart(logits: np.ndarray, out: np.ndarray | None, values: np.ndarray | None) -> None:
    """The output buffers must not share memory with each other (both are written) or with
    the logits (read while they are written); compared by the byte ranges their strides
    reach (``np.may_share_memory``).

    Raises:
        ValueError: two of them do (naming both).
    """
    pairs = [(out, "out", values, "values", "both are written")]
    why = "the logits are read while it is written"
    pairs += [(out, "out", logits, "logits", why), (values, "values", logits, "logits", why)]
    for a, name_a, b, name_b, reason in pairs:
        if a is not None and b is not None and np.may_share_memory(a, b):
            raise ValueError(f"{name_a} and {name_b} must not share memory ({reason})")
