"""An independent top-K reference for the tests: Python ``sorted`` on Python floats.

It shares no code with the package: no order keys, no numpy selection. NaN ranks first (any
sign or payload), then values descending (Python compares -0.0 == 0.0, and doubles hold every
fp32 value exactly, denormals included), ties by ascending index.
"""

from __future__ import annotations

import math

import numpy as np


def _rank(values: list[float]):
    def key(i: int):
        x = values[i]
        if math.isnan(x):
            return (0, 0.0, i)
        return (1, -x, i)

    return key


def sort_topk_row(segment: np.ndarray, k: int, sorted_mode: bool = False) -> list[int]:
    """Deterministic top-``k`` of one window (window-local indices), ``-1`` padded to ``k``.

    ``sorted_mode``: descending order (NaN first, ties by index); else ascending index order.
    """
    values = [float(x) for x in np.asarray(segment, np.float32)]
    order = sorted(range(len(values)), key=_rank(values))
    chosen = order[:k]
    if not sorted_mode:
        chosen = sorted(chosen)
    return chosen + [-1] * (k - len(chosen))


def sort_topk(logits: np.ndarray, starts, lengths, k: int, sorted_mode: bool = False) -> np.ndarray:
    """:func:`sort_topk_row` for every row window; int32 ``[rows, k]``."""
    rows = logits.shape[0]
    out = np.full((rows, k), -1, np.int32)
    for r in range(rows):
        s, n = int(starts[r]), int(lengths[r])
        out[r] = sort_topk_row(logits[r, s : s + n], k, sorted_mode)
    return out


def gather_values(logits: np.ndarray, starts, indices: np.ndarray) -> np.ndarray:
    """Bit patterns (uint32) the values output must hold for ``indices``."""
    pad = np.float32(np.finfo(np.float32).min).view(np.uint32)
    out = np.full(indices.shape, pad, np.uint32)
    bits = logits.view(np.uint32) if logits.flags.c_contiguous else None
    for r in range(indices.shape[0]):
        row_bits = (logits[r].view(np.uint32) if bits is None else bits[r]).tolist()
        for j, i in enumerate(indices[r].tolist()):
            if i >= 0:
                out[r, j] = row_bits[int(starts[r]) + i]
    return out


def decode_lengths(kv_lens, next_n: int, compress_ratio: int, width: int) -> list[int]:
    """Row lengths of a decode call, written out from the formula with Python ints."""
    out = []
    for r in range(len(kv_lens) * next_n):
        n = max(0, int(kv_lens[r // next_n]) - next_n + r % next_n + 1) // compress_ratio
        out.append(min(n, width))
    return out
