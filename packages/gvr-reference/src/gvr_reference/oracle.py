"""The exact top-K oracle: plain numpy, one row at a time, written to be obviously correct.

Semantics (shared by every GVR path, see ``docs/reference.md``):

- Ordering is the integer order of :func:`gvr_reference.keys.order_key`: NaN above +inf,
  ``-0.0`` and ``+0.0`` one tie class, denormals exact.
- Row ``r`` selects from its window ``[start_r, start_r + n_r)`` and reports window-local
  int32 indices. Only columns inside the window are read.
- ``n_r <= k``: the identity ``0 .. n_r - 1`` then ``-1``; ``n_r == 0``: all ``-1``.
- ``values`` (optional): float32, bit-exact copies of the selected logits; ``-FLT_MAX`` at ``-1``
  slots.
- Ties at the K-th value go to the smallest indices (the oracle is always deterministic).
- ``sorted=False``: valid entries in ascending index order. ``sorted=True``: descending value,
  ties by ascending index (NaN first).

Algorithm per row: the K-th largest key ``t`` by ``np.partition``, then every index with key
``> t`` plus the first ``k - #(> t)`` indices with key ``== t``. It is O(width) per row, so 1,024
rows x 262,144 columns take a few seconds.
"""

from __future__ import annotations

import numpy as np

from . import _checks
from .keys import key_format, order_key
from .windows import RowWindows, decode_windows, dense_windows, prefill_row_windows

__all__ = ["topk_windows", "topk_decode", "topk_prefill", "topk_dense", "PAD_INDEX", "PAD_VALUE"]

PAD_INDEX = -1
"""Index written to slots past a short row's length."""

PAD_VALUE = np.finfo(np.float32).min
"""Value written to ``-1`` slots of the ``values`` output: ``-FLT_MAX``."""


def _select_row(keys: np.ndarray, k: int, sort_desc: bool) -> np.ndarray:
    """Window-local indices (int64) of the deterministic top-``k`` of one row of keys."""
    n = keys.shape[0]
    if n <= k:
        sel = np.arange(n, dtype=np.int64)
    else:
        kth = np.partition(keys, n - k)[n - k]
        above = np.flatnonzero(keys > kth)
        ties = np.flatnonzero(keys == kth)[: k - above.shape[0]]
        sel = np.sort(np.concatenate([above, ties]))
    if sort_desc and sel.shape[0] > 1:
        # lexsort sorts by the last key first: descending key, then ascending index.
        sel = sel[np.lexsort((sel, -keys[sel].astype(np.int64)))]
    return sel


def topk_windows(
    logits: np.ndarray,
    windows: RowWindows,
    k: int,
    *,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
    dtype: str = "float32",
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact top-K of every row window (the core the three call shapes share).

    Args:
        logits: float32 ``[rows, width]``, any strides (e.g. ``arena[:, :width]``).
        windows: :class:`RowWindows` with ``rows`` entries; every window inside ``[0, width]``.
        k: number of indices per row, any int >= 1 (may exceed the width).
        deterministic: accepted for API parity; the oracle always gives ties to the smallest
            indices.
        sorted: order each row's valid entries by descending value (ties by ascending index).
        return_values: also return the selected values.
        dtype: the score format of the rows (``"float32"``, or ``"bfloat16"`` / ``"float16"``
            with ``logits`` their exact float32 widening): the values are padded with that
            format's most negative finite value. The selection itself is the same (widening
            keeps the order).

    Returns:
        ``indices`` int32 ``[rows, k]`` (window-local, ``-1`` padded), or
        ``(indices, values)`` with values float32 ``[rows, k]`` (``-FLT_MAX`` padded, or the
        16-bit format's most negative finite value).

    Raises:
        TypeError: wrong array types or dtypes, or non-bool options.
        ValueError: wrong shapes, ``k < 1``, or windows outside the logits.
    """
    rows, width = _checks.check_logits(logits)
    k = _checks.check_k(k)
    _checks.check_flag(deterministic, "deterministic")
    sorted = _checks.check_flag(sorted, "sorted")
    return_values = _checks.check_flag(return_values, "return_values")
    if not isinstance(windows, RowWindows):
        raise TypeError(f"windows must be a RowWindows, got {type(windows).__name__}")
    _checks.check_windows_fit(windows.starts, windows.lengths, rows, width)

    indices = np.full((rows, k), PAD_INDEX, dtype=np.int32)
    pad = np.uint32(key_format(dtype).neg_max_widened_bits).view(np.float32)
    values = np.full((rows, k), pad, dtype=np.float32) if return_values else None
    for r in range(rows):
        start, n = int(windows.starts[r]), int(windows.lengths[r])
        if n == 0:
            continue
        segment = logits[r, start : start + n]
        sel = _select_row(order_key(segment), k, sorted)
        indices[r, : sel.shape[0]] = sel
        if values is not None:
            values[r, : sel.shape[0]] = segment[sel]
    return (indices, values) if return_values else indices


def topk_decode(
    logits: np.ndarray,
    kv_lens: np.ndarray,
    k: int,
    *,
    next_n: int = 1,
    compress_ratio: int = 1,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact decode top-K.

    Row ``r`` serves request ``r // next_n`` and selects from columns ``[0, n_r)`` with
    ``n_r = max(0, (kv_lens[r // next_n] - next_n + r % next_n + 1) // compress_ratio)``
    clamped to the width.

    Args:
        logits: float32 ``[batch * next_n, width]``, any strides.
        kv_lens: int32 ``[batch]``, total (uncompressed) KV length per request, >= 0.
        k: indices per row, int >= 1.
        next_n: rows per request, >= 1.
        compress_ratio: power of two >= 1.
        deterministic, sorted, return_values: see :func:`topk_windows`.

    Returns:
        int32 ``[rows, k]`` indices, or ``(indices, values)``.

    Raises:
        TypeError, ValueError: bad arguments, e.g. ``len(kv_lens) * next_n != rows``.
    """
    rows, width = _checks.check_logits(logits)
    next_n = _checks.check_next_n(next_n)
    compress_ratio = _checks.check_compress_ratio(compress_ratio)
    _checks.check_kv_lens(kv_lens, rows, next_n)
    k = _checks.check_k(k)
    windows = decode_windows(kv_lens, next_n, compress_ratio, width)
    return topk_windows(
        logits,
        windows,
        k,
        deterministic=deterministic,
        sorted=sorted,
        return_values=return_values,
    )


def topk_prefill(
    logits: np.ndarray,
    row_starts: np.ndarray,
    row_ends: np.ndarray,
    k: int,
    *,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact prefill top-K over windows ``[row_starts[r], row_ends[r])``.

    Args:
        logits: float32 ``[rows, width]``, any strides.
        row_starts, row_ends: int32 ``[rows]``, ``0 <= row_starts <= row_ends <= width``.
        k: indices per row, int >= 1.
        deterministic, sorted, return_values: see :func:`topk_windows`.

    Returns:
        window-local int32 ``[rows, k]`` indices, or ``(indices, values)``.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    rows, width = _checks.check_logits(logits)
    _checks.check_row_bounds(row_starts, row_ends, rows, width)
    k = _checks.check_k(k)
    windows = prefill_row_windows(row_starts, row_ends, width)
    return topk_windows(
        logits,
        windows,
        k,
        deterministic=deterministic,
        sorted=sorted,
        return_values=return_values,
    )


def topk_dense(
    logits: np.ndarray,
    k: int,
    lengths: np.ndarray | None = None,
    *,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact dense top-K over columns ``[0, lengths[r])`` (or the full width).

    Args:
        logits: float32 ``[rows, width]``, any strides.
        k: indices per row, int >= 1.
        lengths: optional int32 ``[rows]``, >= 0; values above the width are clamped to it.
        deterministic, sorted, return_values: see :func:`topk_windows`.

    Returns:
        int32 ``[rows, k]`` indices, or ``(indices, values)``.

    Raises:
        TypeError, ValueError: bad arguments.
    """
    rows, width = _checks.check_logits(logits)
    k = _checks.check_k(k)
    windows = dense_windows(rows, width, lengths)
    return topk_windows(
        logits,
        windows,
        k,
        deterministic=deterministic,
        sorted=sorted,
        return_values=return_values,
    )
