"""CPU tensors: the numba engine of ``gvr_reference``, or ``torch.topk`` where that is faster.

The output tensors are filled in place through their numpy views, so a caller's ``out`` /
``values`` buffers receive the answer without a copy. Row windows follow the kernels' clamping
rules exactly (negative lengths are empty rows; prefill windows are clamped to
``[0, width]``), so the CPU and CUDA paths answer the same call the same way.

Which engine runs a call (:func:`cpu_route`):

- the numba engine (``gvr_reference.cpu_engine``) by default. Its ties at the K-th value always
  go to the smallest indices, so it serves ``deterministic=True``, and its output is already
  in index order, or sorted for ``sorted=True``;
- ``torch.topk`` for dense rows (``topk`` without ``lengths``) of fewer than
  :data:`TORCH_MAX_WIDTH` scores, with ``deterministic=False`` and ``sorted=False``: there the
  numba engine's fixed cost per row (a histogram of 2048 bins, three passes) loses to torch's
  selection (``benchmarks/results/cpu/``). ``torch.topk`` is exact in the contract's sense
  (the selected value multiset; NaN above ``+inf``), but it may pick any members of the K-th
  value's tie class, which is what ``deterministic=False`` allows.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import torch
from gvr_reference import cpu_engine
from gvr_reference.windows import RowWindows, decode_windows

__all__ = [
    "TORCH_MAX_WIDTH",
    "FullRows",
    "cpu_route",
    "outputs",
    "decode_windows_of",
    "prefill_windows_of",
    "dense_windows_of",
    "run_cpu",
]

logger = logging.getLogger("gvr.cpu")

#: Dense rows shorter than this (and wider than K) go to ``torch.topk`` when the call allows
#: it; measured on 2 cores with ``benchmarks/bench_cpu_engine.py`` (the numba engine wins
#: from 8,192 scores up at every batch measured, torch.topk below 4,096).
TORCH_MAX_WIDTH = 4096

_i64 = torch.int64


class FullRows(RowWindows):
    """Windows that are every row whole (``topk`` without ``lengths``): ``starts = 0``,
    ``lengths = width``. Marks the calls ``torch.topk`` can answer directly."""

    @property
    def width(self) -> int:
        """The row length (every window's)."""
        return int(self.lengths[0]) if self.lengths.shape[0] else 0


_full_cache: dict[tuple[int, int], FullRows] = {}
_full_lock = threading.Lock()

#: Per-thread temporaries of the torch route (int64 indices, values nobody asked for), kept
#: for shapes up to this many elements so that a decode loop allocates nothing.
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
    """Dense windows ``[0, clamp(lengths, 0, width))``, or whole rows (a shared, read-only
    :class:`FullRows` per shape)."""
    if lengths is not None:
        n = np.clip(lengths.numpy().astype(np.int64), 0, width)
        return RowWindows(np.zeros(rows, np.int64), n)
    key = (rows, width)
    w = _full_cache.get(key)
    if w is None:
        starts = np.zeros(rows, np.int64)
        n = np.full(rows, width, np.int64)
        starts.flags.writeable = False
        n.flags.writeable = False
        w = FullRows(starts, n)
        with _full_lock:
            if len(_full_cache) >= 256:  # shapes of a long-running process: keep it bounded
                _full_cache.clear()
            _full_cache[key] = w
    return w


def outputs(
    rows: int, k: int, out: torch.Tensor | None, values: torch.Tensor | None, want_values: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The call's output buffers: the caller's, or new int32 / float32 ``[rows, k]`` tensors.

    Raises:
        MemoryError: the new buffers do not fit in memory (the message gives their size).
    """
    try:
        if out is None:
            out = torch.empty((rows, k), dtype=torch.int32)
        if want_values and values is None:
            values = torch.empty((rows, k), dtype=torch.float32)
    except RuntimeError as e:  # torch's allocator: "can't allocate memory"
        nbytes = rows * k * (8 if want_values else 4)
        raise MemoryError(
            f"the outputs [rows={rows}, k={k}] need {nbytes / 2**30:.1f} GiB, which cannot be "
            f"allocated; pass a smaller k (a k beyond the row width only adds -1 padding)"
        ) from e
    return out, values


def cpu_route(windows: RowWindows, k: int, deterministic: bool, sorted: bool) -> str:
    """The engine that serves a CPU call: ``"torch"`` (``torch.topk``) or ``"numba"``.

    Args:
        windows: the call's row windows (:class:`FullRows` for whole dense rows).
        k: top-K size.
        deterministic, sorted: the call's flags (either one needs the numba engine).
    """
    if deterministic or sorted or not isinstance(windows, FullRows):
        return "numba"
    width = windows.width
    if k < width < TORCH_MAX_WIDTH:
        return "torch"
    return "numba"


def run_cpu(
    logits: torch.Tensor,
    windows: RowWindows,
    k: int,
    out: torch.Tensor,
    values: torch.Tensor | None,
    sorted: bool,
    deterministic: bool = True,
) -> None:
    """Fill ``out`` (int32 ``[rows, k]``) and ``values`` (float32 ``[rows, k]`` or None) in
    place with the exact top-K of every row window, on the engine :func:`cpu_route` picks.

    The caller has checked every argument and built ``windows`` inside the logits.
    """
    x = logits.detach()
    if cpu_route(windows, k, deterministic, sorted) == "torch":
        shape = (out.shape[0], out.shape[1])
        idx = _temporary(shape, _i64)
        vals = values if values is not None else _temporary(shape, x.dtype)
        torch.topk(x, k, dim=1, largest=True, sorted=False, out=(vals, idx))
        out.copy_(idx)
        return
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
