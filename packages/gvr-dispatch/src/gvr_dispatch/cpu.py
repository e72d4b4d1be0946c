"""CPU tensors: the numba CPU engine of ``gvr_reference``, run on the tensors' own memory, or
``torch.topk`` where that is measured faster.

Two ways in:

- the **direct path** (:func:`direct`), for the common call: float32 logits with a unit inner
  stride, int32 index tensors, ``out`` / ``values`` absent or contiguous of the right dtype.
  It checks those facts on the tensors' metadata (about two microseconds) and hands the
  engine raw addresses (:func:`gvr_reference.cpu_engine.topk_at`): no numpy views, no window
  arrays, no int64 copies of ``kv_lens``; the engine computes each row's window itself with
  the rules below and fills the caller's buffers in place (or calls ``torch.topk``, see
  below). Anything else returns None, and the dispatcher takes
- the **general path** (:func:`run_cpu`): every argument validated with explained errors,
  windows built with numpy, the engine called through its checked numpy API. It serves every
  layout (a copy for a non-unit inner stride) and raises the errors; it always runs the
  engine.

Row windows follow the kernels' clamping rules exactly (negative lengths are empty rows;
prefill windows are clamped to ``[0, width]``), so the CPU and CUDA paths answer the same call
the same way.

Which method serves a call (:func:`cpu_route`; measured with ``benchmarks/bench_cpu_engine.py``
on 2 cores, ``benchmarks/results/cpu/cpu_engine.md`` and ``cpu_wide.md``):

- ``torch.topk``, for whole dense rows (``topk`` without ``lengths``) with
  ``deterministic=False`` and ``sorted=False``, in calls of at least 64 rows of ``n`` scores
  with ``k <= 8 < n <= 4096`` (``k < n`` for the smallest K): there torch's partial sort, on
  every core, beats the engine's fixed cost per row. It is exact in the contract's sense (the
  selected value multiset, NaN above ``+inf``, ``-0.0`` tied with ``+0.0``, values bit for
  bit), but picks any members of the K-th value's tie class, which ``deterministic=False``
  allows; its int64 indices are copied into the int32 ``out``;
- everything else runs the numba engine, which picks by row length ``n``:

  - ``n <= k``: ``"identity"``, no selection: ``0 .. n-1``, then ``-1`` (values: the row,
    then ``-FLT_MAX``), written by the engine in the same call (cheaper than two torch fills);
  - ``n >= 8 k`` and (``n >= 32768``, or ``n >= 16384`` and ``n >= 128 k``): ``"sampled"``
    (a threshold from a sample, one filtering pass, a radix select among the candidates; the
    radix path when the sample misleads);
  - every other row: ``"radix"`` (the order keys into a scratch array, a histogram of their
    top 11 bits, a radix select among the crossing bin's keys, one emit pass), about 2 ns
    per score on one core;

  and calls with more than one row and more than ``gvr_reference.cpu_engine.SERIAL_WORK``
  (2**18) scores in all windows run their rows on numba's thread pool; smaller calls run on
  the calling thread.

The engine is exact in the strong sense in every mode: its ties at the K-th value always go to
the smallest indices (so ``deterministic=True`` costs nothing), values are copied bit for bit,
NaN ranks above ``+inf``, ``-0.0`` and ``+0.0`` are one value, and its rows come out in
ascending index order (descending value, ties by ascending index, with ``sorted=True``).
Ragged rows (``lengths``, decode, prefill) always run the engine, which reads each window
itself: ``torch.topk`` on a padded batch would not be exact when a window's own values tie
with the padding.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import torch
from gvr_reference import cpu_engine
from gvr_reference.cpu_engine import WINDOW_DECODE, WINDOW_FULL, WINDOW_LENGTHS, WINDOW_PREFILL
from gvr_reference.windows import RowWindows, decode_windows

from .validation import shares_storage

__all__ = [
    "cpu_route",
    "torch_serves",
    "TORCH_MIN_ROWS",
    "TORCH_MAX_K",
    "TORCH_MAX_WIDTH",
    "WINDOW_FULL",
    "WINDOW_LENGTHS",
    "WINDOW_DECODE",
    "WINDOW_PREFILL",
    "direct",
    "outputs",
    "decode_windows_of",
    "prefill_windows_of",
    "dense_windows_of",
    "run_cpu",
]

logger = logging.getLogger("gvr.cpu")

_Tensor = torch.Tensor
_f32 = torch.float32
_i32 = torch.int32
_i64 = torch.int64
_CPU_MAX_K = (1 << 31) - 1
#: compress_ratio -> log2(compress_ratio), for the powers of two.
_SHIFTS = {1 << i: i for i in range(31)}
_serial_at = cpu_engine.topk_rows_at_serial
_parallel_at = cpu_engine.topk_at_parallel


#: ``torch.topk`` serves whole dense rows (``topk`` without ``lengths``, ``deterministic`` and
#: ``sorted`` False) in calls of at least this many rows of ``n`` scores with
#: ``k <= TORCH_MAX_K < n <= TORCH_MAX_WIDTH``: there its partial sort, on every core, beats
#: the engine's fixed cost per row (measured, ``benchmarks/results/cpu/cpu_wide.md``).
TORCH_MIN_ROWS = 64
TORCH_MAX_K = 8
TORCH_MAX_WIDTH = 4096


def torch_serves(rows: int, n: int, k: int, deterministic: bool, sorted: bool) -> bool:
    """Whether ``torch.topk`` serves a call of ``rows`` whole dense rows of ``n`` scores (the
    rule of :data:`TORCH_MIN_ROWS`)."""
    return (
        not deterministic
        and not sorted
        and rows >= TORCH_MIN_ROWS
        and k <= TORCH_MAX_K
        and k < n <= TORCH_MAX_WIDTH
    )


def cpu_route(
    rows: int, n: int, k: int, deterministic: bool = False, sorted: bool = False,
    whole_rows: bool = True,
) -> str:  # fmt: skip
    """How the CPU path serves ``rows`` windows of ``n`` scores each with top-``k`` (the rule
    in this module's docstring): ``"torch"`` (``torch.topk``, whole dense rows only), or the
    engine's row method (``"identity"``, ``"radix"`` or ``"sampled"``), with ``" x pool"``
    when the rows run on the thread pool."""
    if whole_rows and torch_serves(rows, n, k, deterministic, sorted):
        return "torch"
    method = cpu_engine.row_method(n, k)
    return method + (" x pool" if rows > 1 and rows * n > cpu_engine.SERIAL_WORK else "")


#: Per-thread temporaries of the torch route (int64 indices, values nobody asked for), kept
#: for shapes up to this many elements so that a loop of calls allocates nothing.
_SCRATCH_MAX = 1 << 20
_scratch = threading.local()


def _temporary(shape: tuple[int, int], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``shape`` and ``dtype`` whose contents the caller overwrites at once
    (reused per thread for small shapes)."""
    if shape[0] * shape[1] > _SCRATCH_MAX:
        return torch.empty(shape, dtype=dtype)
    bufs = getattr(_scratch, "bufs", None)
    if bufs is None:
        bufs = _scratch.bufs = {}
    key = (shape, dtype)
    t = bufs.get(key)
    if t is None:
        if len(bufs) >= 32:
            bufs.clear()
        t = bufs[key] = torch.empty(shape, dtype=dtype)
    return t


def _index_entries(x) -> int:
    """Entries of a CPU int32 1-D contiguous index tensor, or -1 when it is anything else
    (tensor subclasses included: the direct path takes plain tensors only)."""
    if type(x) is not _Tensor or x.dtype is not _i32 or not x.is_cpu or x.dim() != 1:
        return -1
    n = x.shape[0]
    if n > 1 and x.stride(0) != 1:
        return -1
    return n


def direct(
    mode, logits, a, b, k, next_n, compress_ratio, out, values, return_values, deterministic,
    sorted,
):  # fmt: skip
    """Answer a CPU call on the direct path, or return None (nothing written) when any
    argument is not of the common kind; the general path then validates and answers.

    Args:
        mode: ``WINDOW_FULL`` (``topk`` without lengths), ``WINDOW_LENGTHS`` (``topk`` with
            ``a = lengths``), ``WINDOW_DECODE`` (``a = kv_lens``), ``WINDOW_PREFILL``
            (``a = row_starts``, ``b = row_ends``).
        logits, k, next_n, compress_ratio, out, values, return_values, deterministic, sorted:
            the call's arguments (``deterministic`` changes nothing but must be a bool: the
            engine's ties always go to the smallest indices).

    Every condition is one the general path checks too, so this path accepts a subset of what
    that one accepts and gives the same answer for it. Call it once the engine has run in the
    process (the dispatcher sends its first CPU call through the general path, which
    announces the engine's compile).
    """
    if type(logits) is not _Tensor or logits.dtype is not _f32 or not logits.is_cpu:
        return None
    shape = logits.shape
    if len(shape) != 2:
        return None
    rows, width = shape
    if not rows or not width:
        return None
    if (
        (return_values is not False and return_values is not True)
        or (sorted is not False and sorted is not True)
        or (deterministic is not False and deterministic is not True)
    ):
        return None
    if type(k) is not int:
        if k is not None:
            return None
        buf = out if out is not None else values
        if type(buf) is not _Tensor or buf.dim() != 2:
            return None
        k = buf.shape[1]
    if not 0 < k <= _CPU_MAX_K:
        return None
    cr_shift = 0
    if mode == WINDOW_DECODE:
        if type(next_n) is not int or next_n < 1 or type(compress_ratio) is not int:
            return None
        cr_shift = _SHIFTS.get(compress_ratio)
        if cr_shift is None:
            return None
        entries = _index_entries(a)
        if entries < 0 or entries * next_n != rows:
            return None
    elif mode != WINDOW_FULL:
        if _index_entries(a) != rows:
            return None
        if mode == WINDOW_PREFILL and _index_entries(b) != rows:
            return None
    # The output buffers: plain CPU tensors of the dtype, [rows, k], contiguous (inline: a
    # helper call costs as much as a check here).
    if out is not None and (
        type(out) is not _Tensor
        or out.dtype is not _i32
        or not out.is_cpu
        or out.shape != (rows, k)
        or not out.is_contiguous()
    ):
        return None
    if values is not None and (
        type(values) is not _Tensor
        or values.dtype is not _f32
        or not values.is_cpu
        or values.shape != (rows, k)
        or not values.is_contiguous()
        or (values.requires_grad and torch.is_grad_enabled())  # refused by the general path
    ):
        return None
    # The negative bit (a lazily negated view, e.g. the .imag of a conjugated complex
    # tensor) would make the raw memory differ from the tensor's values: the general path
    # serves it. int32 tensors cannot carry it through any public operation.
    if logits.is_neg() or (values is not None and values.is_neg()):
        return None
    # Buffers in one allocation (with each other or with the logits): the general path
    # checks that they are disjoint.
    if out is not None and values is not None and shares_storage(out, values):
        return None
    for buf in (out, values):
        if buf is not None and shares_storage(buf, logits):
            return None
        # (an output over an index input would overwrite lengths not yet read)
        for t in (a, b):
            if buf is not None and t is not None and shares_storage(buf, t):
                return None
    try:  # tensors without strided storage (sparse, mkldnn) raise here
        s0, s1 = logits.stride()
        x_address = logits.data_ptr()
        a_address = 0 if a is None else a.data_ptr()
        b_address = 0 if b is None else b.data_ptr()
        out_address = 0 if out is None else out.data_ptr()
        values_address = 0 if values is None else values.data_ptr()
    except RuntimeError:
        return None
    if s1 != 1 and width > 1:
        return None
    if rows == 1:
        s0 = width
    want_values = return_values or values is not None
    if mode == WINDOW_FULL and torch_serves(rows, width, k, deterministic, sorted):
        out, values = outputs(rows, k, out, values, want_values)
        idx = _temporary((rows, k), _i64)
        vals = values if values is not None else _temporary((rows, k), _f32)
        x = logits.detach() if logits.requires_grad else logits
        torch.topk(x, k, dim=1, largest=True, sorted=False, out=(vals, idx))
        out.copy_(idx)
        return (out, values) if want_values else out
    if out is None or (want_values and values is None):
        out, values = outputs(rows, k, out, values, want_values)
        out_address = out.data_ptr()
        if values is not None:
            values_address = values.data_ptr()
    # The engine has run once in this process (the caller's contract), so its compile is
    # announced and done: call its serial loop, and the thread pool where that declines.
    status = _serial_at(
        x_address, s0, rows, width, mode, a_address, b_address, next_n, cr_shift, k,
        out_address, values_address, sorted,
    )  # fmt: skip
    if status < 0:
        _parallel_at(
            x_address, s0, rows, width, mode, a_address, b_address, next_n, cr_shift, k,
            out_address, values_address, sorted,
        )  # fmt: skip
    return (out, values) if want_values else out


def decode_windows_of(kv_lens: torch.Tensor, next_n: int, cr_shift: int, width: int) -> RowWindows:
    """Decode row windows; a negative ``kv_lens`` entry is an empty request."""
    kv = kv_lens.numpy()
    if kv.size and kv.min() < 0:
        kv = np.maximum(kv, 0).astype(np.int32)
    return decode_windows(kv, next_n, 1 << cr_shift, width)


def prefill_windows_of(row_starts: torch.Tensor, row_ends: torch.Tensor, width: int) -> RowWindows:
    """Prefill windows ``[s, e)`` with ``s = clamp(row_starts, 0, width)`` and
    ``e = clamp(row_ends, s, width)``."""
    s = np.clip(row_starts.numpy().astype(np.int64), 0, width)
    e = np.clip(row_ends.numpy().astype(np.int64), s, width)
    return RowWindows(s, e - s)


def dense_windows_of(lengths: torch.Tensor | None, rows: int, width: int) -> RowWindows:
    """Dense windows ``[0, clamp(lengths, 0, width))``, or whole rows."""
    if lengths is not None:
        n = np.clip(lengths.numpy().astype(np.int64), 0, width)
    else:
        n = np.full(rows, width, np.int64)
    return RowWindows(np.zeros(rows, np.int64), n)


def outputs(
    rows: int, k: int, out: torch.Tensor | None, values: torch.Tensor | None, want_values: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The call's output buffers: the caller's, or new int32 / float32 ``[rows, k]`` tensors.

    Raises:
        MemoryError: the new buffers do not fit in memory (the message gives their size).
    """
    try:
        if out is None:
            out = torch.empty((rows, k), dtype=_i32)
        if want_values and values is None:
            values = torch.empty((rows, k), dtype=_f32)
    except RuntimeError as e:  # torch's allocator: "can't allocate memory"
        nbytes = rows * k * (8 if want_values else 4)
        raise MemoryError(
            f"the outputs [rows={rows}, k={k}] need {nbytes / 2**30:.1f} GiB, which cannot be "
            f"allocated; pass a smaller k (a k beyond the row width only adds -1 padding)"
        ) from e
    return out, values


def run_cpu(
    logits: torch.Tensor,
    windows: RowWindows,
    k: int,
    out: torch.Tensor,
    values: torch.Tensor | None,
    sorted: bool,
) -> None:
    """The general path: fill ``out`` (int32 ``[rows, k]``) and ``values`` (float32
    ``[rows, k]`` or None) in place with the exact top-K of every row window, through the
    engine's numpy API (any logits layout).

    The caller has checked every argument and built ``windows`` inside the logits. A lazily
    negated view is materialised first (its raw memory holds the un-negated values).
    """
    x = logits.detach().resolve_neg()
    cpu_engine.topk_windows(
        x.numpy(),
        windows,
        k,
        out=out.numpy(),
        values=None if values is None else values.detach().numpy(),
        deterministic=True,
        sorted=sorted,
        checked_windows=True,
    )
