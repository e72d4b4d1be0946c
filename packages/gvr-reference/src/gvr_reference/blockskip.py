"""Block-skip on producer block maxima: the reference producer, the contract check and the CPU
model of the path the kernels are to take (design stage: no kernel reads ``block_max`` yet).

The producer of the indexer scores (the indexer GEMM's epilogue) also writes, for every block
of ``B`` consecutive columns of a logits row, a value at least as large as every score of the
block. The top-K then reads only the blocks whose bound can reach a threshold ``T``, and is
exact whenever the bounds hold:

- **Contract** (checked by :func:`contract_violations`, the debug mode's reference): in
  order-key terms (``gvr_reference.keys.order_key``: NaN above ``+inf``, ``-0.0 == +0.0``),
  ``key(block_max[r, j]) >= key(x)`` for every score ``x`` in columns ``[j * B, (j + 1) * B)``
  of row ``r``. An upper bound, equality not required; a block holding a NaN needs a NaN
  bound. Blocks are of the physical row (columns), so a prefill window covers partial blocks
  at its ends.
- **Invariant** (what makes the path exact): every score with ``key >= T`` lies in a block
  whose bound has ``key >= T``, so staging the scores ``>= T`` of those blocks stages every
  score ``>= T`` of the window. If at least ``k`` were staged, the K-th largest key of the
  window is ``>= T``, so the top-K is among the staged scores: an exact selection over them is
  the answer. Otherwise (fewer than ``k``, or more than the staging holds) nothing is
  concluded from the bounds and the row takes the normal path.
- **Threshold**: the ``r``-th largest bound among the blocks that meet the window, for the
  ranks of a short ladder (``k // 16``, ``k // 4``, then ``k``): with exact maxima of blocks
  inside the window, the ``k``-th largest bound leaves at least ``k`` scores ``>= T`` (one per
  block), so the last rung succeeds unless the staging overflows; the first ones read a
  sixteenth or a quarter of those blocks and succeed where the winners cluster (attention
  sinks, the recent window, topic locality: many winners per block), the case block-skip
  exists for. Loose bounds only cost reads or a fallback, never exactness.

Block size: :data:`BLOCK` = 32, as TensorRT-LLM's draft block-skip (PR #18122) uses.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._checks import check_logits
from .keys import order_key

__all__ = [
    "BLOCK",
    "GATE_64THS",
    "SKIPPED",
    "block_maxima",
    "contract_violations",
    "SkipTrace",
    "simulate_block_skip",
    "sample_gate",
    "MASK_BLOCKS",
    "kernel_skips",
]

#: Columns per block (the draft upstream block-skip's size).
BLOCK = 32

#: The streaming kernel's block-skip gate, per score format: the row skips blocks when at most
#: ``GATE_64THS / 64`` of its sample runs (``4 * vec`` consecutive scores, 64 bytes) hold a
#: key at or above the pass threshold. A block of 32 float32 scores is two runs, so 29 / 64
#: puts about ``1 - (1 - 29/64)**2 = 0.70`` of the blocks live at the gate on rows whose
#: survivors do not cluster; a 16-bit block is one run (45 / 64 = 0.70). Above that the
#: bounds (1/32 of a float32 row, 1/16 of a 16-bit one) and the scattered reads would cost
#: more than they save, so the row streams every block.
GATE_64THS = {"float32": 29, "bfloat16": 45, "float16": 45}

#: Bit or-ed into a recorded path code (``gvr_reference.model.Path``) when the row's pass
#: skipped blocks.
SKIPPED = 64


def _check_block(block: int) -> None:
    if isinstance(block, bool) or not isinstance(block, int) or block < 1 or block & (block - 1):
        raise ValueError(f"block must be a power of two >= 1, got {block!r}")


def block_maxima(logits: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """The reference producer: each block's largest score, float32 ``[rows, ceil(width /
    block)]``; a block holding a NaN gets NaN (NaN ranks highest), the columns past the width
    count as ``-inf``.

    Raises:
        TypeError: ``logits`` is not a float32 numpy array.
        ValueError: ``logits`` is not 2-D, or ``block`` is not a power of two.
    """
    rows, width = check_logits(logits)
    x = logits
    _check_block(block)
    nb = -(-width // block)
    pad = np.full((rows, nb * block), -np.inf, dtype=np.float32)
    pad[:, :width] = x
    blocks = pad.reshape(rows, nb, block)
    out = blocks.max(axis=2)  # numpy's max propagates NaN
    return out.astype(np.float32)


def contract_violations(logits: np.ndarray, block_max: np.ndarray, block: int = BLOCK):
    """``(row, block)`` pairs whose bound is below some score of the block in order-key terms
    (empty when the contract holds), as an int64 ``[m, 2]`` array.

    Raises:
        TypeError: ``logits`` or ``block_max`` is not a float32 numpy array.
        ValueError: one is not 2-D, ``block`` is not a power of two, or ``block_max`` has not
            ``ceil(width / block)`` columns and one row per logits row.
    """
    check_logits(logits)
    check_logits(block_max, "block_max")
    x, b = logits, block_max
    _check_block(block)
    need = (x.shape[0], -(-x.shape[1] // block))
    if b.shape != need:
        raise ValueError(f"block_max must have shape {need}, got {b.shape}")
    true_max = order_key(block_maxima(x, block))
    bound = order_key(b)
    return np.argwhere(bound < true_max).astype(np.int64)


@dataclass(frozen=True)
class SkipTrace:
    """What the block-skip path does with one row window.

    Attributes:
        path: ``"skip"`` (answered from the candidate blocks) or ``"fallback"`` (the normal
            path: too few blocks, too few scores at or above every rung, or a staging
            overflow).
        rung: the ladder rank whose threshold answered the row (``None`` on fallback).
        threshold: that rung's key ``T`` (``None`` on fallback).
        blocks_read: blocks whose scores were read, summed over the rungs tried.
        blocks: blocks meeting the window.
        count: scores staged at the answering rung (``None`` on fallback).
        indices: the exact top-K, window-local int64, in no particular order.
    """

    path: str
    rung: int | None
    threshold: int | None
    blocks_read: int
    blocks: int
    count: int | None
    indices: np.ndarray


def simulate_block_skip(
    row: np.ndarray,
    bound_row: np.ndarray,
    k: int,
    start: int = 0,
    n: int | None = None,
    capacity: int = 16384,
    block: int = BLOCK,
) -> SkipTrace:
    """The block-skip path on one row window ``[start, start + n)`` of a physical row.

    Args:
        row: float32 ``[width]``, the physical logits row.
        bound_row: float32 ``[ceil(width / block)]``, its block bounds (the contract must hold;
            see the module docstring: with a violated contract the answer may be wrong, which
            is what the debug check exists for).
        k: top-K size, ``1 <= k``.
        start, n: the window (default: the whole row).
        capacity: staging capacity; more survivors than this fall back.
        block: columns per block.

    Returns:
        The :class:`SkipTrace`, whose ``indices`` are exact (``n <= k``: the whole window).
    """
    width = row.shape[0]
    n = width - start if n is None else n
    if not 0 <= start <= width or not 0 <= n <= width - start:
        raise ValueError(f"window [{start}, {start} + {n}) is not inside a row of {width}")
    keys = order_key(np.ascontiguousarray(row[start : start + n], dtype=np.float32))
    if n <= k:
        return SkipTrace("skip", None, None, 0, 0, n, np.arange(n, dtype=np.int64))
    j0, j1 = start // block, (start + n - 1) // block + 1
    bkeys = order_key(np.ascontiguousarray(bound_row[j0:j1], dtype=np.float32))
    nblocks = j1 - j0
    read = 0
    for rank in dict.fromkeys((max(k // 16, 1), max(k // 4, 1), k)):
        if rank > nblocks:
            break
        t = int(np.partition(bkeys, nblocks - rank)[nblocks - rank])  # rank-th largest
        cand = np.flatnonzero(bkeys >= t)
        read += cand.size
        # window positions of the candidate blocks
        cols = (j0 + cand)[:, None] * block + np.arange(block)[None, :]
        pos = cols.reshape(-1) - start
        pos = pos[(pos >= 0) & (pos < n)]
        staged = pos[keys[pos] >= t]
        if staged.size > capacity:
            break
        if staged.size >= k:
            top = staged[np.argsort(keys[staged], kind="stable")[::-1][:k]]
            return SkipTrace("skip", rank, t, read, nblocks, int(staged.size), top)
    top = np.argsort(keys, kind="stable")[::-1][:k].astype(np.int64)
    return SkipTrace("fallback", None, None, read, nblocks, None, top)


#: Blocks one CTA's live-block mask holds (``gvr_kernels.streaming.config.SKIP_MASK_WORDS``
#: words of 32 bits): a chunk meeting more blocks streams every block.
MASK_BLOCKS = 264 * 32


def sample_gate(sample_keys: np.ndarray, t_pass: int, dtype: str = "float32") -> bool:
    """The streaming kernel's block-skip gate on a row's sample: at most ``GATE_64THS[dtype]
    / 64`` of the sample runs (``4 * vec`` consecutive keys, in order) hold a key ``>=
    t_pass`` (the pass threshold, in the format's key space), and there is a run.

    Args:
        sample_keys: uint32 order keys of the sample, in sample order
            (``gvr_reference.model`` samples runs of four 16-byte vectors).
        t_pass: the key the pass stages from.
        dtype: the logits format (``vec``: 4 scores a vector for float32, 8 for 16-bit).
    """
    run = 4 * (4 if dtype == "float32" else 8)
    runs = sample_keys.size // run
    if runs == 0:
        return False
    hit = (sample_keys[: runs * run].reshape(runs, run) >= t_pass).any(axis=1)
    return int(hit.sum()) * 64 <= runs * GATE_64THS[dtype]


def kernel_skips(values: np.ndarray, k: int, cfg, lead: int = 0, chunk_blocks: int = 0) -> bool:
    """Whether the streaming kernel's first pass over a row skips blocks
    (``StreamingConfig.block_skip``): the row is sampled, and :func:`sample_gate` opens at the
    first pass's threshold (the rung, or one above a crowded rung), and the CTA's chunk meets
    at most :data:`MASK_BLOCKS` blocks (``chunk_blocks``; 0: not checked).

    Args:
        values: float32 ``[n]``, the row's valid window (16-bit formats: their values).
        k: top-K size.
        cfg: the ``gvr_reference.model.ModelConfig`` of the kernel.
        lead: window start modulo ``vec``.
        chunk_blocks: blocks the CTA's chunk meets.
    """
    from .keys import format_keys, key_format
    from .ladder import row_plan
    from .model import _sample_keys, simulate_row

    t = simulate_row(values, k, cfg, lead)
    if t.t1 is None or t.sample_size == 0 or chunk_blocks > MASK_BLOCKS:
        return False
    fmt = key_format(cfg.dtype)
    keys = format_keys(np.ascontiguousarray(values, dtype=np.float32), fmt)
    plan = row_plan(int(values.shape[0]), k, lead, cfg.params)
    sample = _sample_keys(keys, plan, lead, cfg.params.vec)
    return sample_gate(sample, int(t.t1) + int(t.crowded), cfg.dtype)
