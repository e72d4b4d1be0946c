"""CPU tensors: the numba engine of ``gvr_reference``, on numpy views of the torch tensors.

The output tensors are filled in place through their numpy views, so a caller's ``out`` /
``values`` buffers receive the answer without a copy. Row windows follow the kernels' clamping
rules exactly (negative lengths are empty rows; prefill windows are clamped to
``[0, width]``), so the CPU and CUDA paths answer the same call the same way. Ties always go to
the smallest indices on the CPU, whatever ``deterministic`` says.
"""

from __future__ import annotations

import numpy as np
import torch
from gvr_reference import cpu_engine
from gvr_reference.windows import RowWindows, decode_windows

__all__ = ["decode_windows_of", "prefill_windows_of", "dense_windows_of", "run_cpu"]


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
    if lengths is None:
        n = np.full(rows, width, np.int64)
    else:
        n = np.clip(lengths.numpy().astype(np.int64), 0, width)
    return RowWindows(np.zeros(rows, np.int64), n)


def run_cpu(
    logits: torch.Tensor,
    windows: RowWindows,
    k: int,
    out: torch.Tensor,
    values: torch.Tensor | None,
    sorted: bool,
) -> None:
    """Fill ``out`` (and ``values``) in place with the exact top-K of every row window."""
    cpu_engine.topk_windows(
        logits.detach().numpy(),
        windows,
        k,
        out=out.numpy(),
        values=None if values is None else values.detach().numpy(),
        deterministic=True,
        sorted=sorted,
    )
