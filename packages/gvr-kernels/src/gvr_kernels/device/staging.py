"""Warp-aggregated staging of selected candidates into shared memory."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

from . import warp
from .layout import Ctl

__all__ = ["stage_selected", "selection_masks", "warp_slots", "packed_warp_slots"]


@cute.jit
def stage_selected(capacity: cutlass.Constexpr, sh, elems):
    """Stage a per-thread list of ``(value, pos, selected)`` into ``sh.stage_bits`` /
    ``sh.stage_idx``, counting them in ``ctl[Ctl.CNT]``.

    ``value`` is the word staged (a score's raw bits, or its order key); it may be a
    trace-time function that computes it, called only for a selected candidate (so the value
    need not stay live from the test to the write). Slots come from one shared atomic per
    warp; every candidate is counted, but a lane whose run of slots would end past
    ``capacity`` writes none of it (one test per lane, not per candidate): the count then
    exceeds the capacity, and an overflowing staging is never read (the callers' overflow
    paths select from the row or the registers instead). No running maximum is kept: no
    caller reads one (the streaming family takes the largest staged key from one read of the
    staging after its pass; the register family selects between the row's ends it reduced
    before staging).
    """
    masks, cnt, anyone = selection_masks([e[2] for e in elems])
    if cute.arch.vote_any_sync(anyone != Uint32(0)):
        slot = warp_slots(sh.ctl.iterator + Ctl.CNT, cnt)
        fits = slot + cnt <= capacity
        for w in cutlass.range_constexpr(len(masks)):
            masks[w] = Uint32(cutlass.select_(fits, masks[w], Uint32(0)))
        for i in cutlass.range_constexpr(len(elems)):
            value, pos, _sel = elems[i]
            if (masks[i // 32] & Uint32(1 << (i % 32))) != Uint32(0):
                sh.stage_bits[slot] = _materialize(value)
                sh.stage_idx[slot] = pos
                slot = slot + 1


def _materialize(value):
    """A candidate's value: ``value`` itself, or what the trace-time function returns."""
    return value() if callable(value) else value


@cute.jit
def selection_masks(flags):
    """A per-thread list of selection predicates as bit masks of 32 (a predicate per
    candidate would not stay in the seven predicate registers until the writes): one
    instruction per candidate, one popc per mask. Returns ``(masks, count, any_bits)``."""
    masks = []
    for w in cutlass.range_constexpr((len(flags) + 31) // 32):
        m = Uint32(0)
        for i in cutlass.range_constexpr(32 * w, min(32 * w + 32, len(flags))):
            m = m | Uint32(cutlass.select_(flags[i], Uint32(1 << (i % 32)), Uint32(0)))
        masks.append(m)
    cnt = Int32(0)
    anyone = Uint32(0)
    for m in masks:
        cnt = cnt + Int32(cute.arch.popc(m))
        anyone = anyone | m
    return masks, cnt, anyone


@cute.jit
def warp_slots(cursor, cnt: Int32, scope: cutlass.Constexpr = None) -> Int32:
    """This lane's first slot of ``cnt`` consecutive ones taken from the shared counter at
    ``cursor`` by the whole warp (called by all 32 lanes): one atomic per warp, lanes in
    order. ``scope="cluster"`` for a counter in another CTA's shared memory (a DSMEM
    pointer)."""
    lane = cute.arch.lane_idx()
    incl = warp.inclusive_sum(cnt)
    total = warp.broadcast(incl, Int32(31))
    slot0 = Int32(0)
    if lane == 31:
        slot0 = cute.arch.atomic_add(cursor, total, scope=scope)
    return warp.broadcast(slot0, Int32(31)) + incl - cnt


@cute.jit
def packed_warp_slots(cursor, cnt_lo: Int32, cnt_hi: Int32, scope: cutlass.Constexpr = None):
    """This lane's first slots of two runs (``cnt_lo`` and ``cnt_hi`` consecutive ones) taken
    from two counters packed in the shared word at ``cursor`` (low and high 16 bits): one
    :func:`warp_slots` on the packed counts. Exact while the low counter's total over the
    CTA stays below ``2**16`` (no carry into the high half) and the high one's below
    ``2**16``: the callers count at most K (<= 2048) and one row's keys (< 2**16).
    ``scope``: as in :func:`warp_slots`."""
    first = warp_slots(cursor, cnt_lo | (cnt_hi << 16), scope=scope)
    return first & Int32(0xFFFF), Int32(Uint32(first) >> Uint32(16))
