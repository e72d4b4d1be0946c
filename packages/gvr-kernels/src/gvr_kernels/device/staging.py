"""Warp-aggregated staging of selected candidates into shared memory."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from . import warp
from .keys import F32, order_key
from .layout import Ctl

__all__ = ["stage_selected"]


@cute.jit
def stage_selected(
    capacity: cutlass.Constexpr,
    sh,
    elems,
    keys_given: cutlass.Constexpr = False,
    fmt: cutlass.Constexpr = F32,
):
    """Stage a per-thread list of ``(value, pos, selected)`` into ``sh.stage_bits`` /
    ``sh.stage_idx``, counting them in ``ctl[Ctl.CNT]`` and their largest key in
    ``ctl[Ctl.MAXKEY]``.

    ``value`` is a score's raw bits (format ``fmt``), or its order key when ``keys_given``;
    it may be a trace-time function that computes it, called only for a selected candidate
    (so the value need not stay live from the test to the write). Slots come from one
    shared atomic per warp; a slot at or past ``capacity`` is counted but not written, so
    overflow is detected without writing out of bounds.
    """
    lane = cute.arch.lane_idx()
    cnt = Int32(0)
    for _value, _pos, sel in elems:
        cnt = cnt + cutlass.select_(sel, Int32(1), Int32(0))
    if cute.arch.vote_any_sync(cnt > 0):
        incl = warp.inclusive_sum(cnt)
        total = warp.broadcast(incl, Int32(31))
        slot0 = Int32(0)
        if lane == 31:
            slot0 = cute.arch.atomic_add(sh.ctl.iterator + Ctl.CNT, total)
        slot = warp.broadcast(slot0, Int32(31)) + incl - cnt
        top = Uint32(0)
        for i in cutlass.range_constexpr(len(elems)):
            value, pos, sel = elems[i]
            if sel:
                v = _materialize(value)
                if slot < capacity:
                    sh.stage_bits[slot] = v
                    sh.stage_idx[slot] = pos
                slot = slot + 1
                if cutlass.const_expr(keys_given):
                    top = cutlass.max(top, v)
                else:
                    top = cutlass.max(top, order_key(v, fmt))
        if cnt > 0:
            max_ptr = cute.recast_ptr(sh.ctl.iterator + Ctl.MAXKEY, dtype=Uint32)
            cute.arch.atomic_max(max_ptr, top)


def _materialize(value):
    """A candidate's value: ``value`` itself, or what the trace-time function returns."""
    return value() if callable(value) else value
