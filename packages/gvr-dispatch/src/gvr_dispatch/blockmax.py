"""The optional ``block_max`` argument of the top-K calls: its validation and the debug check of
its contract.

``block_max`` is the producer's float32 ``[rows, ceil(width / 32)]`` tensor (unit inner stride,
any row stride) of block bounds: entry ``[r, j]`` is at least every score of columns
``[32 * j, 32 * j + 32)`` of logits row ``r`` that the call selects from (an upper bound,
equality not required; a block holding a NaN needs a NaN bound). Block-skip launches read only
the blocks whose bound reaches the row's pass threshold, and are exact whenever the contract
holds (``gvr_reference.blockskip``). A bound below a score of its block may lose that score.

Debug mode (``GVR_CHECK_BLOCK_MAX=1`` in the environment): every call with ``block_max``
first checks the contract on the scores it selects from (the rows' windows) and raises
``ValueError`` naming the first violations; it reads the device (a synchronisation), so it
refuses CUDA-graph capture.
"""

from __future__ import annotations

import os

import torch
from gvr_reference.blockskip import BLOCK

__all__ = ["BLOCK", "check_block_max", "debug_enabled", "contract_violations"]

#: The environment variable that turns the contract check on.
DEBUG_ENV = "GVR_CHECK_BLOCK_MAX"


def debug_enabled() -> bool:
    """Whether ``GVR_CHECK_BLOCK_MAX`` asks for the contract check: ``1``, ``true``, ``yes``
    or ``on`` (any case) turn it on; unset, empty, ``0``, ``false``, ``no`` and ``off`` leave
    it off.

    Raises:
        ValueError: any other value (naming the variable and the value).
    """
    raw = os.environ.get(DEBUG_ENV, "")
    value = raw.strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{DEBUG_ENV} must be one of 1/true/yes/on or 0/false/no/off, got {raw!r}")


def check_block_max(block_max: object, device: torch.device, rows: int, width: int) -> None:
    """Raise unless ``block_max`` is a float32 ``[rows, ceil(width / 32)]`` tensor on
    ``device`` with unit inner stride.

    Raises:
        TypeError: not a tensor, or not float32.
        ValueError: wrong shape, device or inner stride.
    """
    if not isinstance(block_max, torch.Tensor):
        raise TypeError(f"block_max must be a torch.Tensor or None, got {type(block_max).__name__}")
    if block_max.dtype != torch.float32:
        raise TypeError(f"block_max must be float32, got {block_max.dtype}")
    need = (rows, -(-width // BLOCK))
    if tuple(block_max.shape) != need:
        raise ValueError(
            f"block_max must have shape {need} (rows, ceil(width / {BLOCK})), got "
            f"{tuple(block_max.shape)}"
        )
    if block_max.device != device:
        raise ValueError(
            f"block_max must be on {device} (the logits device), got {block_max.device}"
        )
    if block_max.stride(1) != 1:
        raise ValueError(
            f"block_max must have a unit inner stride, got strides {block_max.stride()}"
        )


def _keys(x: torch.Tensor) -> torch.Tensor:
    """int64 order keys of float32 scores (``gvr_reference.keys.order_key``: NaN above
    ``+inf``, ``-0.0 == +0.0``)."""
    b = x.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    key = torch.where(b >= 0x80000000, b ^ 0xFFFFFFFF, b | 0x80000000)
    key = torch.where(torch.isnan(x), torch.full_like(key, 0xFFFFFFFF), key)
    return torch.where(b == 0x80000000, torch.full_like(key, 0x80000000), key)


def contract_violations(
    logits: torch.Tensor, block_max: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor
) -> torch.Tensor:
    """``(row, block)`` pairs (int64 ``[m, 2]``) whose bound is below, in order-key terms, a
    score of the block inside the row's window ``[starts[r], starts[r] + lengths[r])``.

    Args:
        logits: float32 / bfloat16 / float16 ``[rows, width]`` (16-bit scores are compared
            through their exact float32 widening).
        block_max: float32 ``[rows, ceil(width / 32)]``.
        starts, lengths: int64 ``[rows]`` windows, inside ``[0, width]``.
    """
    rows, width = logits.shape
    nb = -(-width // BLOCK)
    col = torch.arange(nb * BLOCK, device=logits.device)
    inside = (col[None, :] >= starts[:, None]) & (col[None, :] < (starts + lengths)[:, None])
    x = torch.zeros((rows, nb * BLOCK), dtype=torch.float32, device=logits.device)
    x[:, :width] = logits.float()
    key = torch.where(inside, _keys(x), torch.zeros_like(inside, dtype=torch.int64))
    top = key.view(rows, nb, BLOCK).amax(dim=2)
    return torch.nonzero(_keys(block_max.float()) < top)


def raise_on_violations(logits, block_max, starts, lengths) -> None:
    """The debug check: ``ValueError`` naming the first violated blocks, if any."""
    bad = contract_violations(logits, block_max, starts.long(), lengths.long())
    if bad.shape[0]:
        first = ", ".join(f"(row {int(r)}, block {int(j)})" for r, j in bad[:4].tolist())
        raise ValueError(
            f"block_max breaks its contract ({DEBUG_ENV} check): {bad.shape[0]} block bound(s) "
            f"below a score of their {BLOCK} columns, first {first}; block-skip would lose "
            f"those scores"
        )
