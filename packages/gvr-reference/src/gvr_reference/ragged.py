"""How a ragged split launch hands its CTAs to rows: the CPU model of the streaming family's
in-kernel assignment (``StreamingConfig.ragged``).

A split launch has a capture-stable grid of ``grid`` CTAs (``Route.grid`` from the router).
Without ``ragged`` every row gets ``parts`` of them, whatever its length. With it, every CTA
reads the lengths of all rows and computes the same assignment:

1. Each row is measured in units of :data:`UNIT` scores, ``u_r = ceil(n_r / UNIT)``.
2. The CTAs beyond one per row, ``extra = grid - rows``, are shared out by length: row ``r``
   gets ``p_r = min(1 + floor(u_r * extra / sum(u)), max(1, floor(u_r * UNIT / min_part)))``
   CTAs: one, plus its share of the extra CTAs, at most one per ``min_part`` scores. Then
   ``sum(p) <= rows + extra * sum(u) / sum(u) = grid``: every row gets its CTAs, whatever the
   lengths (integer arithmetic, no rounding), and equally long rows get ``1 + floor(extra /
   rows)`` each: the static split's ``parts`` when ``extra`` is a multiple of the rows, one CTA
   each when ``extra < rows`` (the ragged split of many rows).
3. CTAs ``[0, S)`` serve the rows with ``p_r > 1`` in row order (``S = sum`` of their parts),
   so the long rows start first when the grid takes more than one wave; the rows with
   ``p_r = 1`` take the next CTAs, in row order; the last CTAs of the grid have no work
   (they exit at once, after the CTAs with work were scheduled).

A row with ``p_r = 1`` runs as on one CTA per row (the retry rung included); a row with
``p_r > 1`` meets through the split workspace as in a static split launch, in row slot ``r``
when ``rows <= extra``, else in slot ``first_r // 2`` (``first_r``: its first CTA;
:func:`ragged_slots`), so a launch needs ``min(rows, extra)`` slots.
"""

from __future__ import annotations

import numpy as np

__all__ = ["UNIT", "MIN_PART", "ragged_parts", "ragged_blocks", "ragged_slots"]

#: Scores of the unit rows are measured in (keeps the sums in 32 bits on the device).
UNIT = 256
#: Fewest scores a part of a split row is given (static and ragged split launches alike:
#: ``gvr_kernels.routing.MIN_PART_ELEMS``); a multiple of :data:`UNIT`.
MIN_PART = 8192


def ragged_parts(lengths, grid: int, min_part: int) -> np.ndarray:
    """CTAs each row gets in a ragged split launch.

    Args:
        lengths: int [rows], the rows' valid lengths (clamped windows, ``>= 0``).
        grid: CTAs in the launch (``>= rows``).
        min_part: fewest scores a part of a split row is given (a multiple of :data:`UNIT`).

    Returns:
        int64 [rows], each ``>= 1``, summing to at most ``grid``.

    Raises:
        ValueError: ``grid < rows`` or a negative length.
    """
    n = np.asarray(lengths, dtype=np.int64)
    rows = n.size
    if grid < rows:
        raise ValueError(f"grid must be >= rows ({rows}), got {grid}")
    if rows and n.min() < 0:
        raise ValueError(f"lengths must be >= 0, got {int(n.min())}")
    units = (n + UNIT - 1) // UNIT
    share = units * (grid - rows) // max(int(units.sum()), 1)
    return np.minimum(1 + share, np.maximum(1, units // (min_part // UNIT)))


def ragged_blocks(lengths, grid: int, min_part: int) -> np.ndarray:
    """The work of every CTA of a ragged split launch.

    Returns:
        int64 [grid, 3]: ``(row, part, parts)`` per CTA; ``(-1, 0, 0)`` for a CTA with no work.
    """
    parts = ragged_parts(lengths, grid, min_part)
    blocks = np.tile(np.array([-1, 0, 0], np.int64), (grid, 1))
    at = 0
    for r in np.flatnonzero(parts > 1):
        p = int(parts[r])
        blocks[at : at + p] = np.stack([np.full(p, r), np.arange(p), np.full(p, p)], axis=1)
        at += p
    singles = np.flatnonzero(parts == 1)
    blocks[at + np.arange(singles.size)] = np.stack(
        [singles, np.zeros_like(singles), np.ones_like(singles)], axis=1
    )
    return blocks


def ragged_slots(lengths, grid: int, min_part: int) -> np.ndarray:
    """The workspace row slot each row of a ragged split launch meets in.

    A row of several CTAs meets in slot ``r`` (its row) when ``rows <= extra``, else in slot
    ``first_r // 2``, half its first CTA: the split rows' CTA ranges are consecutive from CTA
    0 and each at least two long, so their first CTAs are at least two apart, and they sum to
    at most ``2 * extra`` (each split row's share is at least one, and the shares sum to at
    most ``extra``), so the slots are distinct and below ``extra``.

    Returns:
        int64 [rows]: the slot of each row of several CTAs, ``-1`` for a row of one CTA.
    """
    parts = ragged_parts(lengths, grid, min_part)
    rows = parts.size
    extra = grid - rows
    slots = np.full(rows, -1, np.int64)
    split = np.flatnonzero(parts > 1)
    first = np.concatenate([[0], np.cumsum(parts[split])[:-1]]).astype(np.int64)
    slots[split] = split if rows <= extra else first[: split.size] // 2
    return slots
