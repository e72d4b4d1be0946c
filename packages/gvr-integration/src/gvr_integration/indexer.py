"""The lightning indexer of DSA and the decode row lengths it is read with.

DeepSeek-V3.2's indexer scores every cached key ``s`` for query token ``t``:

    I[t, s] = sum_h w[t, h] * relu(q[t, h] . k[s])

(the paper's equation 1). Here it is plain torch in float32 on the tensors' device; positions
at or past a row's length get ``-inf``, as the reference model masks them before its top-K.

The indexer can also write the maximum of every block of ``block`` columns beside the scores
(:func:`block_maxima`, ``lightning_indexer(..., block_max=)``): the producer side of
block-skip, whose contract (each bound at least every score of its block, NaN above ``+inf``)
is ``gvr_reference.blockskip``'s; block size 32 as TensorRT-LLM's draft block-skip
(PR #18122).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gvr_dispatch.validation import check_disjoint, check_not_grad

__all__ = ["lightning_indexer", "decode_row_lengths", "block_maxima", "BLOCK"]

#: Columns per block of the block maxima (``gvr_reference.blockskip.BLOCK``).
BLOCK = 32


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
    block_max: torch.Tensor | None = None,
    block: int = BLOCK,
) -> torch.Tensor:
    """Indexer scores of ``T`` query rows against ``S`` cached keys.

    Args:
        q: float32 ``[T, H, d]`` indexer queries (RoPE applied).
        weights: float32 ``[T, H]`` per-row head weights.
        keys: float32 ``[S, d]`` cached indexer keys (one key head shared by all query heads).
        lengths: optional int ``[T]``: row ``t`` is ``-inf`` from column ``lengths[t]`` on.
        out: optional float32 ``[T, S]`` buffer to write into (any row stride).
        block_max: optional float32 ``[T, ceil(S / block)]`` buffer: also write each block's
            largest score there (:func:`block_maxima`, after the length mask).
        block: columns per block of ``block_max`` (a power of two).

    Returns:
        float32 ``[T, S]`` scores (``out`` when given).

    Raises:
        TypeError: ``q``, ``weights``, ``keys`` or ``out`` is not a float32 tensor,
            ``lengths`` is not an integer tensor, or ``block`` is not an int.
        ValueError: a tensor of the wrong rank, shapes that do not fit together, tensors on
            different devices, a bad ``block`` / ``block_max``, ``out`` and ``block_max``
            sharing memory, or a buffer that requires grad while grad mode is on. Every
            check runs before anything is computed or written.
    """
    _check_indexer_inputs(q, weights, keys, lengths, out, block_max, block)
    t, h, d = q.shape
    dots = torch.matmul(q.reshape(t * h, d), keys.t()).view(t, h, keys.shape[0]).relu_()
    scores = torch.bmm(weights.unsqueeze(1), dots).squeeze(1)
    if lengths is not None:
        col = torch.arange(keys.shape[0], device=keys.device)
        scores.masked_fill_(col.unsqueeze(0) >= lengths.unsqueeze(1), float("-inf"))
    if block_max is not None:
        block_maxima(scores, block, out=block_max)
    if out is None:
        return scores
    out.copy_(scores)
    return out


def _float32_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        got = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{name} must be a float32 tensor, got {got}")


def _check_indexer_inputs(q, weights, keys, lengths, out, block_max, block) -> None:
    """:func:`lightning_indexer`'s argument checks (TypeError / ValueError naming the
    argument), all before any score is computed."""
    for name, x, rank in (("q", q, 3), ("weights", weights, 2), ("keys", keys, 2)):
        _float32_tensor(name, x)
        if x.dim() != rank:
            raise ValueError(f"{name} must be {rank}-D, got shape {tuple(x.shape)}")
    t, h, d = q.shape
    if tuple(weights.shape) != (t, h) or keys.shape[1] != d:
        raise ValueError(
            f"shapes do not fit: q {tuple(q.shape)} [T, H, d] needs weights [T, H] and keys "
            f"[S, d], got weights {tuple(weights.shape)}, keys {tuple(keys.shape)}"
        )
    for name, x in (("weights", weights), ("keys", keys)):
        if x.device != q.device:
            raise ValueError(f"{name} is on {x.device}, q on {q.device}")
    s = keys.shape[0]
    if lengths is not None:
        if (
            not isinstance(lengths, torch.Tensor)
            or lengths.dtype.is_floating_point
            or lengths.dtype.is_complex
            or lengths.dtype == torch.bool
        ):
            got = lengths.dtype if isinstance(lengths, torch.Tensor) else type(lengths).__name__
            raise TypeError(f"lengths must be an integer tensor, got {got}")
        if tuple(lengths.shape) != (t,):
            raise ValueError(
                f"lengths must have shape ({t},) (one per row), got {tuple(lengths.shape)}"
            )
        if lengths.device != q.device:
            raise ValueError(f"lengths is on {lengths.device}, q on {q.device}")
    if out is not None:
        _float32_tensor("out", out)
        if tuple(out.shape) != (t, s) or out.device != q.device:
            raise ValueError(
                f"out must be a float32 [{t}, {s}] tensor on {q.device}, got "
                f"{tuple(out.shape)} on {out.device}"
            )
        check_not_grad(out, "out")
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"block must be an int, got {type(block).__name__} {block!r}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 1, got {block!r}")
    if block_max is not None:
        _check_block_max(block_max, t, -(-s // block), q.device)
        if out is not None:
            # The maxima are written before the scores are copied into out.
            check_disjoint(out, "out", block_max, "block_max")


def _check_block_max(out, t: int, nb: int, device) -> None:
    _float32_tensor("block_max", out)
    if (
        tuple(out.shape) != (t, nb)
        or out.device != device
        or out.stride(1) != 1
        or (t > 1 and out.stride(0) < nb)
    ):
        raise ValueError(
            f"block_max must be a float32 [{t}, {nb}] tensor with unit inner stride on "
            f"{device}, got {tuple(out.shape)} strides {tuple(out.stride())} on {out.device}"
        )
    check_not_grad(out, "block_max")


def block_maxima(
    scores: torch.Tensor, block: int = BLOCK, *, out: torch.Tensor | None = None
) -> torch.Tensor:
    """The largest score of every block of ``block`` consecutive columns of each row: the
    bounds block-skip reads (``gvr_reference.blockskip``: an entry must be at least every
    score of its block in order-key terms). A block holding a NaN gets NaN (``torch.amax``
    propagates it, and NaN ranks above ``+inf``); the columns past the width count as
    ``-inf``; ``-0.0`` and ``+0.0`` are equal keys, so either is a valid bound for the other.

    Args:
        scores: float32 ``[T, S]`` (any row stride; unit column stride not required).
        block: columns per block, a power of two ``>= 1``.
        out: optional float32 ``[T, ceil(S / block)]`` buffer to write into, with unit
            inner stride (any row stride, as the top-K calls read it).

    Returns:
        float32 ``[T, ceil(S / block)]`` on ``scores``' device (``out`` when given).

    Raises:
        TypeError: ``scores`` or ``out`` is not a float32 tensor, or ``block`` is not an int.
        ValueError: ``scores`` is not 2-D, ``block`` is not a power of two, ``out`` has the
            wrong shape, device or layout, or requires grad while grad mode is on.
    """
    _float32_tensor("scores", scores)
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D [T, S], got shape {tuple(scores.shape)}")
    if isinstance(block, bool) or not isinstance(block, int):
        raise TypeError(f"block must be an int, got {type(block).__name__} {block!r}")
    if block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 1, got {block!r}")
    t, s = scores.shape
    nb = -(-s // block)
    if out is not None:
        _check_block_max(out, t, nb, scores.device)
    if t == 0 or s == 0:
        return out if out is not None else scores.new_empty((t, nb))
    # One max-pooling pass (windows of ``block``, the last one partial: ``ceil_mode``); it
    # propagates NaN on both devices. On the H200 it reads 0.8-1.0 TB/s, about twice what a
    # reshape and ``torch.amax`` over 32 columns does (0.5 TB/s); a producer that pays for
    # itself writes the maxima in the scores' own epilogue (docs/kernels.md, block-skip).
    res = F.max_pool1d(scores.unsqueeze(1), block, ceil_mode=True).squeeze(1)
    if out is None:
        return res
    out.copy_(res)
    return out
