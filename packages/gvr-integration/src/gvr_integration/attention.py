"""Sparse attention over selected KV positions, and the ``torch.topk`` selection it is compared
with.

DSA attends, for each query row, only to the K positions its indexer selected: a softmax over
those positions alone, with the real values. Padding slots (``-1``) are left out.
"""

from __future__ import annotations

import math

import torch

__all__ = ["sparse_attention", "torch_topk_selection"]


def sparse_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    indices: torch.Tensor,
    *,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of each query row over its selected KV positions.

    ``o[t, h] = sum_j p[t, h, j] * values[indices[t, j]]`` with
    ``p[t, h] = softmax_j(scale * q[t, h] . keys[indices[t, j]])`` over the slots with
    ``indices[t, j] >= 0``. A row without any selected position gives zeros.

    Args:
        q: float32 ``[T, H, d]`` attention queries.
        keys, values: float32 ``[S, d]`` and ``[S, dv]``, the KV cache (one KV head).
        indices: int ``[T, K]`` selected positions, ``-1`` for padding.
        scale: softmax scale, default ``1 / sqrt(d)``.

    Returns:
        float32 ``[T, H, dv]``.
    """
    t, h, d = q.shape
    k = indices.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    valid = indices >= 0
    flat = indices.clamp_min(0).reshape(-1).long()
    k_sel = keys.index_select(0, flat).view(t, k, d)  # gather the selected keys
    v_sel = values.index_select(0, flat).view(t, k, values.shape[1])
    logits = torch.bmm(q, k_sel.transpose(1, 2)).mul_(scale)  # [T, H, K]
    logits.masked_fill_(~valid.unsqueeze(1), float("-inf"))
    probs = torch.softmax(logits, dim=-1).nan_to_num_(0.0)
    return torch.bmm(probs, v_sel)


def torch_topk_selection(scores: torch.Tensor, lengths: torch.Tensor, k: int) -> torch.Tensor:
    """The top-``k`` of every row by ``torch.topk``, in GVR's output convention.

    Columns at or past a row's length are excluded (they hold ``-inf`` in indexer scores;
    they are masked here anyway), and slots a short row cannot fill are ``-1``.

    Args:
        scores: float32 ``[T, S]``, ``k <= S``.
        lengths: int ``[T]`` valid columns per row.
        k: K.

    Returns:
        int32 ``[T, k]``.
    """
    col = torch.arange(scores.shape[1], device=scores.device)
    masked = scores.masked_fill(col.unsqueeze(0) >= lengths.unsqueeze(1), float("-inf"))
    idx = torch.topk(masked, k, dim=-1, sorted=False).indices
    return torch.where(idx < lengths.unsqueeze(1), idx, -1).to(torch.int32)
