"""Warp-level scans and broadcasts."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32


@cute.jit
def inclusive_sum(value: Int32) -> Int32:
    """Inclusive prefix sum over the 32 lanes of a full warp (lane 0 first)."""
    lane = cute.arch.lane_idx()
    for i in cutlass.range_constexpr(5):
        offset = 1 << i
        # mask_and_clamp = 0: lanes below `offset` read their own value and skip the add.
        other = cute.arch.shuffle_sync_up(value, offset=offset, mask_and_clamp=0)
        if lane >= offset:
            value = value + other
    return value


@cute.jit
def suffix_sum(value: Int32) -> Int32:
    """Inclusive suffix sum over a full warp: lane ``l`` gets the sum of lanes ``>= l``."""
    lane = cute.arch.lane_idx()
    for i in cutlass.range_constexpr(5):
        offset = 1 << i
        other = cute.arch.shuffle_sync_down(value, offset=offset)
        if lane + offset < 32:
            value = value + other
    return value


@cute.jit
def broadcast(value: Int32, src_lane: Int32) -> Int32:
    """``value`` of lane ``src_lane`` on every lane."""
    return cute.arch.shuffle_sync(value, offset=src_lane)
