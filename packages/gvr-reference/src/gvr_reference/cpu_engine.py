"""The numba CPU engine: exact top-K on the CPU, the embedded default when no GPU is present.

Same call shapes and semantics as :mod:`gvr_reference.oracle` (``decode``, ``prefill``,
``dense``, ``topk_windows``), plus caller-provided ``out`` / ``values`` buffers filled in place.
Every argument is validated before anything is written.

Algorithm: an exact radix select on the uint32 order keys (see
:mod:`gvr_reference._select_kernels`), rows in parallel with ``numba.prange`` for calls of
more than :data:`SERIAL_WORK` scores, on the calling thread otherwise. Ties at the K-th value
always go to the smallest indices, so the result is deterministic whatever
``deterministic`` says. The kernels are compiled on first use and cached on disk.

:func:`topk_at` is the same engine for callers that hold their buffers as raw addresses (the
dispatcher's CPU torch tensors): it converts nothing and checks nothing.
"""

from __future__ import annotations

import logging
import os

import numba
import numpy as np

from . import _checks
from ._numba_core import flat_rows
from ._select_kernels import (
    SAMPLE_MIN_RATIO,
    SAMPLE_MIN_ROW,
    SAMPLE_SHORT_RATIO,
    SAMPLE_SHORT_ROW,
    SERIAL_WORK,
    WINDOW_DECODE,
    WINDOW_FULL,
    WINDOW_LENGTHS,
    WINDOW_PREFILL,
    WINDOW_SPANS,
    _addresses,
    topk_rows_at,
    topk_rows_at_serial,
)
from .windows import RowWindows, decode_lengths_unchecked

__all__ = [
    "decode",
    "prefill",
    "dense",
    "topk_windows",
    "topk_at",
    "topk_at_parallel",
    "topk_rows_at_serial",
    "row_method",
    "warmup",
    "SERIAL_WORK",
    "WINDOW_FULL",
    "WINDOW_LENGTHS",
    "WINDOW_DECODE",
    "WINDOW_PREFILL",
    "WINDOW_SPANS",
]

logger = logging.getLogger(__name__)

# SERIAL_WORK (2**18, defined by the kernels' module, which needs it as a compile-time
# constant): calls with at most this many elements in all their windows run on the calling
# thread. Such a call takes a few hundred microseconds on one core; waking the thread pool
# would save little of that, and when another process holds the other cores the pool's
# barrier can wait a whole scheduler time slice (about 10 ms) for a descheduled worker.


_announced = False


def _kernels_on_disk() -> bool:
    """Whether numba's on-disk cache holds the row loops already (then the first call only
    loads them, well under a second). Reads numba's cache index paths; on any surprise in
    numba's internals it answers False, so the notice errs on the side of being shown."""
    try:
        return all(
            os.path.exists(f._cache._cache_file._index_path)
            for f in (topk_rows_at_serial, topk_rows_at)
        )
    except Exception:  # noqa: BLE001 - numba internals moved: assume a compile
        return False


def _announce_compile() -> None:
    """Say once per process, before the first call that compiles, that numba compiles now."""
    global _announced
    _announced = True
    if not _kernels_on_disk():
        logger.warning(
            "gvr: compiling the numba CPU engine on its first use in this environment (about "
            "10-60 s, once); later calls and processes load it from numba's on-disk cache"
        )


def _run(
    logits: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    k: int,
    out: np.ndarray | None,
    values: np.ndarray | None,
    deterministic: bool,
    sorted: bool,
    return_values: bool,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Check the options and buffers, then run the kernels on windows the caller has already
    checked (int64 ``starts``/``lengths`` inside the logits); nothing is written before every
    check has passed."""
    rows = logits.shape[0]
    _checks.check_flag(deterministic, "deterministic")
    sort_desc = _checks.check_flag(sorted, "sorted")
    return_values = _checks.check_flag(return_values, "return_values")
    if out is not None:
        _checks.check_out_buffer(out, "out", rows, k, np.int32)
    if values is not None:
        _checks.check_out_buffer(values, "values", rows, k, np.float32)
    _checks.check_apart(logits, out, values)
    want_values = values is not None or return_values
    if not _announced:
        _announce_compile()

    idx = out if out is not None and out.flags.c_contiguous else np.empty((rows, k), np.int32)
    if want_values:
        if values is not None and values.flags.c_contiguous:
            vbits = values.view(np.uint32)
        else:
            vbits = np.empty((rows, k), np.uint32)
    else:
        vbits = np.empty((rows, 0), np.uint32)

    if rows:
        flat, row_stride = flat_rows(logits)
        x_at, starts_at, lengths_at, idx_at, vals_at = _addresses(flat, starts, lengths, idx, vbits)
        topk_at(
            x_at, row_stride, rows, logits.shape[1], WINDOW_SPANS, starts_at, lengths_at, 1, 0,
            k, idx_at, vals_at if want_values else 0, sort_desc,
        )  # fmt: skip

    if out is not None and idx is not out:
        out[...] = idx
    if want_values:
        if values is None:
            values = vbits.view(np.float32)
        elif not values.flags.c_contiguous:
            values.view(np.uint32)[...] = vbits
        return idx if out is None else out, values
    return idx if out is None else out


def row_method(n: int, k: int) -> str:
    """How the engine selects from a window of ``n`` scores (the rule of ``topk_row``):
    ``"identity"`` (``n <= k``: ``0 .. n-1``, then ``-1``), ``"sampled"`` (``n >= 8 k`` and
    ``n >= 32768``, or ``n >= 16384`` and ``n >= 128 k``) or ``"radix"``."""
    if n <= k:
        return "identity"
    if n >= SAMPLE_MIN_RATIO * k and (
        n >= SAMPLE_MIN_ROW or (n >= SAMPLE_SHORT_ROW and n >= SAMPLE_SHORT_RATIO * k)
    ):
        return "sampled"
    return "radix"


def _parallel(kernel, rows: int, *args) -> None:
    """Run a ``prange`` kernel over ``rows`` rows. Rows are handed out in small chunks instead
    of being split evenly up front: row costs vary (short rows, fallbacks), and a thread that
    loses its core to another process then holds up only its current chunk."""
    chunk = rows // (16 * numba.get_num_threads()) + 1
    previous = numba.set_parallel_chunksize(chunk)
    try:
        kernel(*args)
    finally:
        numba.set_parallel_chunksize(previous)


def topk_at(
    x_address: int,
    row_stride: int,
    rows: int,
    width: int,
    mode: int,
    a_address: int,
    b_address: int,
    next_n: int,
    cr_shift: int,
    k: int,
    out_address: int,
    values_address: int,
    sorted: bool,
) -> None:
    """The engine on raw addresses: exact top-K of every row window into caller buffers.

    Same answer as :func:`topk_windows` (ties to the smallest indices, ascending index order,
    or descending value with ties by ascending index when ``sorted``), with each row's window
    computed from ``mode`` and the int32 arrays at ``a_address`` / ``b_address``:

    - ``WINDOW_FULL``: ``[0, width)``;
    - ``WINDOW_LENGTHS``: ``[0, clamp(a[r], 0, width))``;
    - ``WINDOW_DECODE``: ``[0, min(max(0, a[r // next_n] - next_n + r % next_n + 1)
      >> cr_shift, width))`` (``a``: kv_lens, ``rows // next_n`` entries);
    - ``WINDOW_PREFILL``: ``[s, e)`` with ``s = clamp(a[r], 0, width)``,
      ``e = clamp(b[r], s, width)``;
    - ``WINDOW_SPANS``: ``[a[r], a[r] + b[r])`` with int64 ``a`` / ``b`` of ``rows`` entries,
      every window inside its row (unchecked: the numpy API's checked windows).

    Args:
        x_address: address of ``logits[0, 0]``: float32, unit inner stride, ``row_stride``
            elements between rows.
        rows, width: the logits shape, both ``>= 1``.
        mode, a_address, b_address, next_n, cr_shift: the windows (int32 arrays but for
            ``WINDOW_SPANS``; the addresses of unused arrays are 0; ``next_n = 1``,
            ``cr_shift = 0`` outside decode).
        k: indices per row, ``>= 1``.
        out_address: int32 ``[rows, k]``, contiguous, written.
        values_address: float32 ``[rows, k]``, contiguous, written bit for bit (``-FLT_MAX``
            beside ``-1``), or 0.
        sorted: descending value order.

    Nothing is checked: every address must point at live memory of the stated shape. Calls
    with more than one row and more than :data:`SERIAL_WORK` scores in all windows run their
    rows on the thread pool (:func:`topk_at_parallel`). A caller that has made one call can
    call ``topk_rows_at_serial`` (same arguments; it returns -1, having written nothing, where
    this function goes on with :func:`topk_at_parallel`) directly.
    """
    if not _announced:
        _announce_compile()
    status = topk_rows_at_serial(
        x_address, row_stride, rows, width, mode, a_address, b_address, next_n, cr_shift, k,
        out_address, values_address, sorted,
    )  # fmt: skip
    if status < 0:
        topk_at_parallel(
            x_address, row_stride, rows, width, mode, a_address, b_address, next_n, cr_shift,
            k, out_address, values_address, sorted,
        )  # fmt: skip


def topk_at_parallel(*args) -> None:
    """:func:`topk_at` with the rows on the thread pool, whatever the work (same arguments)."""
    _parallel(topk_rows_at, args[2], *args)


def topk_windows(
    logits: np.ndarray,
    windows: RowWindows,
    k: int,
    *,
    out: np.ndarray | None = None,
    values: np.ndarray | None = None,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
    checked_windows: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact top-K of every row window.

    Args:
        logits: float32 ``[rows, width]``, any strides (a unit inner stride avoids a copy).
        windows: :class:`~gvr_reference.windows.RowWindows` with ``rows`` entries.
        k: indices per row, int >= 1.
        out: optional int32 ``[rows, k]`` buffer for the indices, filled in place.
        values: optional float32 ``[rows, k]`` buffer for the values, filled in place
            (bit-exact copies of the logits; ``-FLT_MAX`` at ``-1`` slots).
        deterministic: accepted for API parity; ties always go to the smallest indices.
        sorted: descending value order per row (ties by ascending index); else index order.
        return_values: return values even without a ``values`` buffer.
        checked_windows: the caller guarantees that every window lies inside its row
            (``0 <= starts``, ``0 <= lengths``, ``starts + lengths <= width``), as a caller
            that clamps its windows does; the O(rows) window check is then skipped. A window
            outside its row with this flag reads out of bounds: never pass unchecked input.

    Returns:
        ``indices`` (int32 ``[rows, k]``, window-local, ``-1`` padded), or
        ``(indices, values)`` when ``values`` is given or ``return_values`` is true.

    Raises:
        TypeError, ValueError: bad arguments; nothing is written to ``out``/``values``.
    """
    rows, width = _checks.check_logits(logits)
    k = _checks.check_k(k)
    if not isinstance(windows, RowWindows):
        raise TypeError(f"windows must be a RowWindows, got {type(windows).__name__}")
    if checked_windows is not True:
        _checks.check_windows_fit(windows.starts, windows.lengths, rows, width)
    elif windows.starts.shape[0] != rows:
        raise ValueError(
            f"windows must describe logits.shape[0] = {rows} rows, got {windows.starts.shape[0]}"
        )
    return _run(
        logits,
        windows.starts,
        windows.lengths,
        k,
        out,
        values,
        deterministic,
        sorted,
        return_values,
    )


def decode(
    logits: np.ndarray,
    kv_lens: np.ndarray,
    k: int,
    *,
    next_n: int = 1,
    compress_ratio: int = 1,
    out: np.ndarray | None = None,
    values: np.ndarray | None = None,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact decode top-K (row ``r`` selects from ``[0, n_r)``, see
    :func:`gvr_reference.windows.decode_row_lengths`).

    Args:
        logits: float32 ``[batch * next_n, width]``, any strides.
        kv_lens: int32 ``[batch]``, total (uncompressed) KV length per request, >= 0.
        k: indices per row, int >= 1.
        next_n: rows per request, >= 1.
        compress_ratio: power of two >= 1.
        out, values, deterministic, sorted, return_values: see :func:`topk_windows`.

    Returns:
        int32 ``[rows, k]`` indices, or ``(indices, values)``.

    Raises:
        TypeError, ValueError: bad arguments; nothing is written to ``out``/``values``.
    """
    rows, width = _checks.check_logits(logits)
    next_n = _checks.check_next_n(next_n)
    compress_ratio = _checks.check_compress_ratio(compress_ratio)
    _checks.check_kv_lens(kv_lens, rows, next_n)
    k = _checks.check_k(k)
    lengths = decode_lengths_unchecked(kv_lens, next_n, compress_ratio, width)
    starts = np.zeros(rows, np.int64)
    return _run(logits, starts, lengths, k, out, values, deterministic, sorted, return_values)


def prefill(
    logits: np.ndarray,
    row_starts: np.ndarray,
    row_ends: np.ndarray,
    k: int,
    *,
    out: np.ndarray | None = None,
    values: np.ndarray | None = None,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact prefill top-K over ``[row_starts[r], row_ends[r])``, window-local indices.

    Args:
        logits: float32 ``[rows, width]``, any strides.
        row_starts, row_ends: int32 ``[rows]``, ``0 <= row_starts <= row_ends <= width``.
        k: indices per row, int >= 1.
        out, values, deterministic, sorted, return_values: see :func:`topk_windows`.

    Returns:
        int32 ``[rows, k]`` indices, or ``(indices, values)``.

    Raises:
        TypeError, ValueError: bad arguments; nothing is written to ``out``/``values``.
    """
    rows, width = _checks.check_logits(logits)
    _checks.check_row_bounds(row_starts, row_ends, rows, width)
    k = _checks.check_k(k)
    starts = row_starts.astype(np.int64)
    lengths = row_ends.astype(np.int64) - starts
    return _run(logits, starts, lengths, k, out, values, deterministic, sorted, return_values)


def dense(
    logits: np.ndarray,
    k: int,
    lengths: np.ndarray | None = None,
    *,
    out: np.ndarray | None = None,
    values: np.ndarray | None = None,
    deterministic: bool = True,
    sorted: bool = False,
    return_values: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Exact dense top-K over ``[0, lengths[r])`` (or the full width).

    Args:
        logits: float32 ``[rows, width]``, any strides.
        k: indices per row, int >= 1.
        lengths: optional int32 ``[rows]``, >= 0, clamped to the width.
        out, values, deterministic, sorted, return_values: see :func:`topk_windows`.

    Returns:
        int32 ``[rows, k]`` indices, or ``(indices, values)``.

    Raises:
        TypeError, ValueError: bad arguments; nothing is written to ``out``/``values``.
    """
    rows, width = _checks.check_logits(logits)
    k = _checks.check_k(k)
    if lengths is None:
        n = np.full(rows, width, np.int64)
    else:
        n = np.minimum(_checks.check_lengths(lengths, rows), width).astype(np.int64)
    starts = np.zeros(rows, np.int64)
    return _run(logits, starts, n, k, out, values, deterministic, sorted, return_values)


def warmup() -> str:
    """Compile (or load from the on-disk cache) every kernel the engine uses: the serial and
    the parallel row loops (one compiled function each serves values or none, sorted or
    not). The first call in a fresh environment compiles (10-60 s, announced by a
    warning-level log record); later processes load the cache.

    Returns:
        Where the row loops came from: ``"memory"`` (this process had them already),
        ``"disk"`` (numba's on-disk cache) or ``"compiled"``.
    """
    loops = (topk_rows_at_serial, topk_rows_at)
    if all(f.signatures for f in loops):
        source = "memory"
    else:
        source = "disk" if _kernels_on_disk() else "compiled"
    if not _announced:
        _announce_compile()
    x = np.zeros((SERIAL_WORK // 4096 + 1, 4096), np.float32)
    for rows in (1, x.shape[0]):  # one row: the serial loop; all rows: the parallel one
        dense(x[:rows], 4, sorted=True, return_values=True)
        dense(x[:rows], 4)
    logger.debug("cpu engine kernels ready (%s)", source)
    return source
