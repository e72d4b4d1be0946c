"""Key-space radix pieces: bit lengths and the crossing-bin search over a 256-bin histogram.

A *crossing bin* for a target ``t`` is the highest bin ``b`` whose suffix count (bin ``b`` and
every bin above it) reaches ``t``. Every radix level of every path (sample rungs, the selection
over staged survivors, the whole-row rescue) uses this one search.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from . import warp

RADIX_BITS = 8
NUM_BINS = 1 << RADIX_BITS
BINS_PER_LANE = NUM_BINS // 32


@cute.jit
def bitlen(x: Uint32) -> Int32:
    """Number of significant bits of ``x`` (0 for 0)."""
    return Int32(32) - Int32(cute.arch.clz(x))


@cute.jit
def level_shift(lo: Uint32, hi: Uint32) -> Uint32:
    """Shift that maps every key of ``[lo, hi]`` to ``(key - lo) >> shift`` in ``[0, 255]``."""
    return Uint32(cutlass.max(bitlen(hi - lo) - Int32(RADIX_BITS), Int32(0)))


@cute.jit
def find_crossing(hist: cute.Tensor, target: Int32):
    """Crossing-bin search by one full warp; clears the histogram as it reads it.

    Lane ``l`` owns bins ``[8l, 8l + 8)``. A suffix scan over lanes finds the highest lane whose
    suffix reaches ``target``; that lane walks its bins from the top.

    Args:
        hist: shared Int32 [256]; zeroed on return.
        target: ``1 <= target <= total``.

    Returns:
        ``(b, above, count_b)`` on every lane: the crossing bin, the count strictly above it, and
        its own count. ``suffix(b) = above + count_b >= target > above``.
    """
    lane = cute.arch.lane_idx()
    h = [Int32(0)] * BINS_PER_LANE
    for j in cutlass.range_constexpr(BINS_PER_LANE):
        h[j] = hist[lane * BINS_PER_LANE + j]
    for j in cutlass.range_constexpr(BINS_PER_LANE):
        hist[lane * BINS_PER_LANE + j] = Int32(0)
    own = Int32(0)
    for j in cutlass.range_constexpr(BINS_PER_LANE):
        own = own + h[j]
    suffix = warp.suffix_sum(own)
    ballot = cute.arch.vote_ballot_sync(suffix >= target)
    src = cutlass.max(Int32(31) - Int32(cute.arch.clz(ballot)), Int32(0))
    # above[j]: count in this lane's bins above j plus every higher lane's bins.
    above_j = [Int32(0)] * BINS_PER_LANE
    acc = suffix - own
    for jj in cutlass.range_constexpr(BINS_PER_LANE):
        j = BINS_PER_LANE - 1 - jj
        above_j[j] = acc
        acc = acc + h[j]
    # suffix(j) = above_j[j] + h[j] is non-increasing in j: the last hit is the highest bin.
    b = Int32(0)
    above = Int32(0)
    count_b = Int32(0)
    for j in cutlass.range_constexpr(BINS_PER_LANE):
        if above_j[j] + h[j] >= target:
            b = lane * BINS_PER_LANE + j
            above = above_j[j]
            count_b = h[j]
    b = warp.broadcast(b, src)
    above = warp.broadcast(above, src)
    count_b = warp.broadcast(count_b, src)
    return b, above, count_b
