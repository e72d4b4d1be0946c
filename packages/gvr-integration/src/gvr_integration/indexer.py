"""The lightning indexer of DSA and the decode row lengths it is read with.

DeepSeek-V3.2's indexer scores every cached key ``s`` for query token ``t``:

    I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s])

(the paper's equation 1). Here it is plain torch in float32 on the tensors' device; positions
at or past a row's length get ``-inf``, as the reference model masks them before its top-K.
"""

from __future__ import annotations

import torch

__all__ = ["lightning_indexer", "decode_row_lengths"]


def decode_row_lengths(
    kv_lens: torch.Tensor, next_n: int, compress_ratio: int = 1, width: int | None = None
) -> torch.Tensor:
    """Valid columns of every decode row, computed on ``kv_lens``' device.

    Row ``r`` of request ``r // next_n`` has
    ``max(0, (kv_lens[r // next_n] - next_n + r % next_n + 1) // compress_ratio)`` columns,
    clamped to ``width`` when given.

    Args:
        kv_lens: int ``[batch]``: total KV length per request, uncompressed tokens.
        next_n: rows per request, ``>= 1``.
        compress_ratio: KV compression ratio, ``>= 1``.
        width: optional logits width to clamp to.

    Returns:
        int64 ``[batch * next_n]``.

    Raises:
        ValueError: ``next_n < 1`` or ``compress_ratio < 1``.
    """
    if next_n < 1 or compress_ratio < 1:
        raise ValueError(
            f"need next_n >= 1 and compress_ratio >= 1, got {next_n}, {compress_ratio}"
        )
    kv = kv_lens.to(torch.int64).repeat_interleave(next_n)
    offset = torch.arange(kv.shape[0], device=kv.device) % next_n
    n = (kv - next_n + offset + 1).clamp_min(0) // compress_ratio
    return n if width is None else n.clamp_max(width)


def lightning_indexer(
    q: torch.Tensor,
    weights: torch.Tensor,
    keys: torch.Tensor,
    lengths: torch.Tensor | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Indexer scores of ``T`` query rows against ``S`` cached keys.

    Args:
        q: float32 ``[T, H, d]`` indexer queries (RoPE applied).
        weights: float32 ``[T, H]`` per-row head weights.
        keys: float32 ``[S, d]`` cached indexer keys (one key head shared by all query heads).
        lengths: optional int ``[T]``: row ``t`` is ``-inf`` from column ``lengths[t]`` on.
        out: optional float32 ``[T, S]`` buffer to write into (any row stride).

    Returns:
        float32 ``[T, S]`` scores (``out`` when given).

    Raises:
        ValueError: shapes that do not fit together.
    """
    t, h, d = q.shape
    if weights.shape != (t, h) or keys.dim() != 2 or keys.shape[1] != d:
        raise ValueError(
            f"shapes do not fit: q {tuple(q.shape)}, weights {tuple(weights.shape)}, "
            f"keys {tuple(keys.shape)}"
        )
    dots = torch.matmul(q.reshape(t * h, d), keys.t()).view(t, h, -1).relu_()
    scores = torch.bmm(weights.unsqueeze(1), dots).squeeze(1)
    if lengths is not None:
        col = torch.arange(keys.shape[0], device=keys.device)
        scores.masked_fill_(col.unsqueeze(0) >= lengths.unsqueeze(1), float("-inf"))
    if out is None:
        return scores
    out.copy_(scores)
    return out
