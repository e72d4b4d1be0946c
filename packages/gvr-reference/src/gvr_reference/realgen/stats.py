"""Properties of score rows that matter to top-K selection (numpy only).

For each row (valid part only) and each K:

- ``distinct``: distinct values / row length;
- ``ties@K``: elements equal to the K-th largest value, itself included (1 = no tie at K);
- ``rank0``: elements strictly greater than the value at column 0 (the ``<bos>`` sink, or the
  pooled group holding it); 0 means column 0 is the row maximum;
- ``recent@K``: fraction of the top-K columns among the row's last ``window`` columns (2048
  tokens: 2048 columns of a plain row, ``2048 // c`` of a row over keys compressed by ``c``).
  Ties at the K-th value are broken toward the lower column (a stable descending sort), as
  ``torch.topk`` does not promise any order; with ``ties@K == 1`` the fraction is exact.

Rows no longer than K have ``ties@K``/``recent@K`` reported as ``None`` (the whole row is
selected).
"""

from __future__ import annotations

import numpy as np

__all__ = ["row_properties", "summarize"]

RECENT_WINDOW = 2048


def row_properties(
    row: np.ndarray, ks: tuple[int, ...] = (512, 1024, 2048), window: int = RECENT_WINDOW
) -> dict:
    """Measure one valid row.

    Args:
        row: float32 ``[L]`` (the finite part of a score row).
        ks: the K values.
        window: columns counted as recent by ``recent@K``.

    Returns:
        Dict with ``length``, ``distinct``, ``zeros`` (fraction of exact zeros), ``rank0``,
        ``max``, ``median`` and, per K, ``ties@K`` and ``recent@K``.
    """
    row = np.asarray(row, dtype=np.float32)
    n = row.size
    out: dict = {
        "length": n,
        "distinct": np.unique(row).size / n,
        "zeros": float(np.mean(row == 0)),
        "rank0": int(np.sum(row > row[0])),
        "max": float(row.max()),
        "median": float(np.median(row)),
    }
    order = np.argsort(-row, kind="stable")
    for k in ks:
        if n <= k:
            out[f"ties@{k}"] = None
            out[f"recent@{k}"] = None
            continue
        kth = row[order[k - 1]]
        out[f"ties@{k}"] = int(np.sum(row == kth))
        out[f"recent@{k}"] = float(np.mean(order[:k] >= n - window))
    return out


def summarize(
    logits: np.ndarray,
    lengths: np.ndarray,
    ks: tuple[int, ...] = (512, 1024, 2048),
    window: int = RECENT_WINDOW,
) -> list[dict]:
    """:func:`row_properties` of every row of ``logits`` ``[rows, width]`` cut at ``lengths``."""
    return [row_properties(logits[i, : int(lengths[i])], ks, window) for i in range(len(logits))]
