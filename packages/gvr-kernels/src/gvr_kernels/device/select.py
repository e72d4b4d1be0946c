"""Exact key-space radix selection over a candidate source, and the emission of its result.

One primitive serves every path of a family: the sample rungs (source: the sample), the
selection among staged survivors (source: the staging buffer) and the whole-row rescue
(source: the row, re-read from global memory). Each level histograms 8 key bits of the live
range ``[lo, hi]`` and keeps the crossing bin, so after at most four levels the rule "keys
above ``thr`` plus ``need_eq`` keys equal to it" is exact (``gvr_reference.model.select_rule``
is the CPU twin).

The phases are free functions. They take the CTA's shared arrays (:func:`~.layout.shared_arrays`:
``hist``, ``ctl``, and the source arrays ``sample`` / ``stage_bits`` / ``stage_idx``), the row
:class:`~.layout.Window`, and compile-time settings ``cfg`` (any configuration with ``threads``,
``unroll``, ``with_values`` and ``deterministic``), with named modes for their variants.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Int64, Uint32, const_expr

from . import radix, warp
from .keys import KEY_MAX, format_of, is_tie, order_key, tie_range, vector_bits
from .layout import Action, Ctl, EmitArgs, Goal, HistArgs, Rank, Source
from .memory import load_score, store_score
from .tiles import load_tile

__all__ = [
    "narrow",
    "select_and_emit",
    "emit_rule",
    "position_reader",
    "emit_ties_in_order",
    "visit_row",
]


@cute.jit
def narrow(
    cfg: cutlass.Constexpr,
    sh,
    win,
    src: cutlass.Constexpr,
    rank: cutlass.Constexpr,
    goal: cutlass.Constexpr,
    target: Int32,
    lo: Uint32,
    hi: Uint32,
    eq_key: Uint32,
    count: Int32,
    merge: cutlass.Constexpr = None,
    reach: Int32 = None,
):
    """Radix narrowing over a candidate source, 8 key bits per level.

    ``goal=Goal.RUNG``: returns ``(T, ties, reached)``: a rung ``T`` with
    ``target <= #(keys >= T) = reached <= reach`` (``reach``: ``2 * target`` when None; or a
    single-key bin, then ``reached`` may be larger), and ``ties`` the keys equal to ``T`` when
    the last bin was a single key (else 0), as ``gvr_reference.model.rung_with_ties``.
    ``goal=Goal.SELECT``: returns ``(thr, need_eq, count_thr)``: the top-``target`` candidates
    are the keys above ``thr`` plus ``need_eq`` keys equal to it (``count_thr`` of them exist
    when the last level was a single key), as ``gvr_reference.model.select_rule``.

    ``rank=Rank.BY_INDEX``: candidates are the entries whose key equals ``eq_key``, ranked by
    ``KEY_MAX - index`` (smallest index first), for the deterministic tie mode.

    ``merge``: ``None`` for a CTA-local selection, or a hook ``merge(hist)`` that every thread
    calls once a level's local histogram is complete (after a CTA barrier); it must leave in
    ``hist`` the histogram of the whole candidate set (e.g. summed over a cluster through
    DSMEM, or over the CTAs of a split row) and end with a CTA barrier. Every CTA then finds
    the same crossing bin.
    """
    tid, _, _ = cute.arch.thread_idx()
    warp_id = tid // 32
    lane = cute.arch.lane_idx()
    most = target * 2
    if const_expr(reach is not None):
        most = reach
    done = Boolean(False)
    above = Int32(0)
    need = target
    thr = Uint32(0)
    need_eq = Int32(0)
    count_thr = Int32(0)
    # Whether this level's candidates may crowd one bin (the last crossing bin held at least
    # two per thread): then a bin shared by a warp is counted with one atomic.
    crowd = Boolean(False)
    while not done:
        shift = radix.level_shift(lo, hi)
        ha = HistArgs(rank, lo, hi, shift, eq_key)
        if const_expr(src == Source.SAMPLE or rank == Rank.BY_INDEX):
            _histogram(cfg, sh, win, src, ha, count, False)
        elif crowd:
            _histogram(cfg, sh, win, src, ha, count, True)
        else:
            _histogram(cfg, sh, win, src, ha, count, False)
        cute.arch.barrier()
        if const_expr(merge is not None):
            merge(sh.hist)
        if warp_id == 0:
            want = need
            if const_expr(goal == Goal.RUNG):
                want = target - above
            b, ab, hb = radix.find_crossing(sh.hist, want)
            if lane == 0:
                sh.ctl[Ctl.B] = b
                sh.ctl[Ctl.ABOVE] = ab
                sh.ctl[Ctl.COUNT_B] = hb
        cute.arch.barrier()
        b = Uint32(sh.ctl[Ctl.B])
        ab = sh.ctl[Ctl.ABOVE]
        hb = sh.ctl[Ctl.COUNT_B]
        crowd = hb >= cfg.threads * 2
        lo_b = lo + (b << shift)
        top_bin = (hi - lo) >> shift
        hi_b = Uint32(cutlass.select_(b == top_bin, hi, lo_b + ((Uint32(1) << shift) - Uint32(1))))
        if const_expr(goal == Goal.RUNG):
            reached = above + ab + hb
            if shift == Uint32(0) or reached <= most:
                thr = lo_b
                count_thr = reached
                need_eq = cutlass.select_(shift == Uint32(0), hb, Int32(0))
                done = Boolean(True)
            else:
                above = above + ab
                lo = lo_b
                hi = hi_b
        else:
            need = need - ab
            if shift == Uint32(0):
                thr = lo_b
                need_eq = need
                count_thr = hb
                done = Boolean(True)
            elif need == hb and lo_b > Uint32(0):
                thr = lo_b - Uint32(1)
                need_eq = Int32(0)
                done = Boolean(True)
            else:
                lo = lo_b
                hi = hi_b
    return thr, need_eq, count_thr


@cute.jit
def _histogram(
    cfg: cutlass.Constexpr,
    sh,
    win,
    src: cutlass.Constexpr,
    ha,
    count: Int32,
    aggregate: cutlass.Constexpr,
):
    """One radix level's histogram of the candidates with key in ``[ha.lo, ha.hi]``.

    ``aggregate``: whole warps count together and a bin shared by a warp takes one atomic
    (:func:`_count_key_warp`), for levels of staged or row candidates that may crowd one bin
    (a tie class); otherwise each candidate takes its own atomic, which is cheaper when bins
    are spread. The sample's levels always count an atomic a key."""
    tid, _, _ = cute.arch.thread_idx()
    if const_expr(src == Source.SAMPLE):
        # An atomic a key, crowded bins included: the sample is at most a few keys a thread,
        # and on the H200 a warp-wide test for a shared bin (``_count_key_warp``) cost more
        # than the atomics it saves, on constant rows too (benchmarks/results/h200/NOTES.md).
        for i in cutlass.range(tid, count, cfg.threads):
            _count_key(sh.hist, sh.sample[i], Boolean(True), ha.lo, ha.hi, ha.shift)
    if const_expr(src == Source.STAGE and aggregate):
        for ib in cutlass.range(0, count, cfg.threads):
            i = ib + tid
            ok = i < count
            j = cutlass.select_(ok, i, Int32(0))
            value = sh.stage_bits[j]
            if const_expr(_stages_keys(cfg)):
                _count_key_warp(sh.hist, value, ok, ha.lo, ha.hi, ha.shift)
            else:
                _count_entry(sh.hist, ha, value, sh.stage_idx[j], ok, True, format_of(cfg))
    if const_expr(src == Source.STAGE and not aggregate):
        for i in cutlass.range(tid, count, cfg.threads):
            value = sh.stage_bits[i]
            if const_expr(_stages_keys(cfg)):
                _count_key_or_index(sh.hist, ha, value, sh.stage_idx[i])
            else:
                fmt = format_of(cfg)
                _count_entry(sh.hist, ha, value, sh.stage_idx[i], Boolean(True), False, fmt)
    if const_expr(src == Source.ROW):
        emit = EmitArgs(None, None, Int32(0), Int32(0), Int32(0), Int32(0), Uint32(0), Uint32(0))
        visit_row(cfg, sh, win, Action.HIST_WARP if aggregate else Action.HIST, ha, emit)
    if const_expr(src == Source.REGS):
        regs = win
        for i in cutlass.range_constexpr(len(regs.keys)):
            if const_expr(aggregate):
                _count_key_warp(sh.hist, regs.keys[i], Boolean(True), ha.lo, ha.hi, ha.shift)
            else:
                _count_key_or_index(sh.hist, ha, regs.keys[i], regs.pos(i, cfg))


@cute.jit
def _count_key(hist, key: Uint32, keep: Boolean, lo: Uint32, hi: Uint32, shift: Uint32):
    if keep & (key >= lo) & (key <= hi):
        cute.arch.atomic_add(hist.iterator + Int32((key - lo) >> shift), Int32(1))


@cute.jit
def _count_key_warp(hist, key: Uint32, keep: Boolean, lo: Uint32, hi: Uint32, shift: Uint32):
    """:func:`_count_key` called by all 32 lanes of a warp together. When every counting lane
    falls in one bin (a crowded tie class: constant rows, floods of one value) one atomic adds
    them all, instead of 32 atomics on one shared word that the hardware serialises."""
    take = keep & (key >= lo) & (key <= hi)
    b = Int32((key - lo) >> shift)
    ballot = cute.arch.vote_ballot_sync(take)
    if ballot != Uint32(0):
        first = Int32(cute.arch.popc((ballot & (Uint32(0) - ballot)) - Uint32(1)))
        b0 = warp.broadcast(b, first)
        if cute.arch.vote_all_sync(~take | (b == b0)):
            if cute.arch.lane_idx() == first:
                cute.arch.atomic_add(hist.iterator + b0, Int32(cute.arch.popc(ballot)))
        elif take:
            cute.arch.atomic_add(hist.iterator + b, Int32(1))


def _stages_keys(cfg) -> bool:
    """Whether the family stages order keys (True) or raw score bits (False)."""
    return getattr(cfg, "stages_keys", False)


@cute.jit
def _count_entry(
    hist,
    ha,
    bits: Uint32,
    pos: Int32,
    ok: Boolean,
    warp_wide: cutlass.Constexpr,
    fmt: cutlass.Constexpr,
):
    """One candidate given by its raw bits (format ``fmt``); ``warp_wide``: the whole warp
    calls together, and key levels aggregate a crowded bin (:func:`_count_key_warp`)."""
    key = order_key(bits, fmt)
    if const_expr(ha.rank == Rank.BY_INDEX):
        _count_key(
            hist, Uint32(KEY_MAX) - Uint32(pos), ok & (key == ha.eq_key), ha.lo, ha.hi, ha.shift
        )
    elif const_expr(warp_wide):
        _count_key_warp(hist, key, ok, ha.lo, ha.hi, ha.shift)
    else:
        _count_key(hist, key, ok, ha.lo, ha.hi, ha.shift)


@cute.jit
def _count_key_or_index(hist, ha, key: Uint32, pos: Int32):
    """One candidate given by its key (keys outside the window are 0 and never counted)."""
    if const_expr(ha.rank == Rank.BY_INDEX):
        _count_key(hist, Uint32(KEY_MAX) - Uint32(pos), key == ha.eq_key, ha.lo, ha.hi, ha.shift)
    else:
        _count_key(hist, key, Boolean(True), ha.lo, ha.hi, ha.shift)


@cute.jit
def visit_row(cfg: cutlass.Constexpr, sh, win, action: cutlass.Constexpr, ha, ea):
    """Visit the whole row: tiles of ``unroll`` vectors per thread (warp-uniform trip count),
    then the scalar tail on warp 0, applying ``action`` to every ``(bits, pos, ok)``:
    ``Action.HIST`` counts a radix level (``ha``: :class:`~.layout.HistArgs`), ``Action.EMIT``
    emits the selection (``ea``: :class:`~.layout.EmitArgs`)."""
    tid, _, _ = cute.arch.thread_idx()
    lane = cute.arch.lane_idx()
    fmt = format_of(cfg)
    tile = cfg.threads * cfg.unroll
    for tb in cutlass.range(0, win.nvec, tile):
        regs, oks, vs = load_tile(cfg.threads, cfg.unroll, win.base, tb, win.nvec, Int32(0), fmt)
        for u in cutlass.range_constexpr(cfg.unroll):
            bits = vector_bits(regs[u], fmt)
            for q in cutlass.range_constexpr(fmt.vec):
                pos = vs[u] * fmt.vec + q - win.lead
                _act(cfg, sh, action, bits[q], pos, oks[u] & (pos >= 0), ha, ea)
    if tid // 32 == 0:
        t = win.tail_start + lane
        ok = t < win.n
        bits = load_score(win.base + (win.lead + cutlass.select_(ok, t, Int32(0))), fmt)
        _act(cfg, sh, action, bits, t, ok, ha, ea)


@cute.jit
def _act(
    cfg: cutlass.Constexpr, sh, action: cutlass.Constexpr, bits: Uint32, pos: Int32, ok, ha, ea
):
    if const_expr(action == Action.HIST):
        _count_entry(sh.hist, ha, bits, pos, ok, False, format_of(cfg))
    elif const_expr(action == Action.HIST_WARP):
        _count_entry(sh.hist, ha, bits, pos, ok, True, format_of(cfg))
    else:
        _emit_entry(cfg, sh.ctl, ea, bits, pos, ok)


# ---------------------------------------------------------------------- selection + emission
@cute.jit
def select_and_emit(
    cfg: cutlass.Constexpr,
    sh,
    win,
    src: cutlass.Constexpr,
    out,
    values,
    row: Int32,
    k: Int32,
    lo: Uint32,
    hi: Uint32,
    count: Int32,
    merge: cutlass.Constexpr = None,
    values_from=None,
):
    """Exact selection over the staged survivors (``Source.STAGE``), the whole row
    (``Source.ROW``) or a row in registers (``Source.REGS``: ``win`` is the
    :class:`~.layout.RegisterRow`), then one emission pass writing all ``k`` slots of output
    row ``row``. Families that stage order keys (``cfg.stages_keys``) and ``Source.REGS``
    read the selected scores' value bits back through ``values_from`` (the row's
    :class:`~.layout.Window`). ``merge``: as in :func:`narrow`."""
    thr, need_eq, count_thr = narrow(
        cfg, sh, win, src, Rank.BY_KEY, Goal.SELECT, k, lo, hi, Uint32(0), count, merge
    )
    emit_rule(
        cfg, sh, win, src, out, values, row, k, thr, need_eq, count_thr, count, merge, values_from
    )


@cute.jit
def emit_rule(
    cfg: cutlass.Constexpr,
    sh,
    win,
    src: cutlass.Constexpr,
    out,
    values,
    row: Int32,
    k: Int32,
    thr: Uint32,
    need_eq: Int32,
    count_thr: Int32,
    count: Int32,
    merge: cutlass.Constexpr = None,
    values_from=None,
    gt_start: Int32 = None,
):
    """One emission pass over a candidate source (as :func:`select_and_emit`) writing the rule
    "every key above ``thr``, plus ``need_eq`` keys equal to it" into all ``k`` slots of
    output row ``row``. ``count_thr``: candidates equal to ``thr``; in the deterministic mode,
    when ``0 < need_eq < count_thr``, a narrowing over ``KEY_MAX - index`` among them picks
    the ``need_eq`` smallest indices first. ``gt_start``: the first slot of the keys above
    ``thr`` (0 when None; more when slots below it were written before, from candidates
    outside this source, so the source's keys above ``thr`` fill
    ``[gt_start, k - need_eq)``)."""
    tid, _, _ = cute.arch.thread_idx()
    idx_max = Uint32(KEY_MAX)
    if const_expr(cfg.deterministic):
        if need_eq > 0 and need_eq < count_thr:
            # Index keys KEY_MAX - pos of window positions [0, n): the range starts there, so
            # the first level already spreads them over the bins.
            row_win = values_from if const_expr(src == Source.REGS) else win
            idx_lo = Uint32(KEY_MAX) - Uint32(cutlass.max(row_win.n - 1, Int32(0)))
            thr_i, need_i, _ = narrow(
                cfg,
                sh,
                win,
                src,
                Rank.BY_INDEX,
                Goal.SELECT,
                need_eq,
                idx_lo,
                Uint32(KEY_MAX),
                thr,
                count,
                merge,
            )
            idx_max = Uint32(KEY_MAX) - thr_i - Uint32(cutlass.select_(need_i == 0, 1, 0))
    if tid == 0:
        sh.ctl[Ctl.GT] = Int32(0) if const_expr(gt_start is None) else gt_start
        sh.ctl[Ctl.EQ] = Int32(0)
    cute.arch.barrier()
    ea = EmitArgs(out, values, row, k, k - need_eq, need_eq, thr, idx_max)

    if const_expr(src == Source.STAGE):
        for ib in cutlass.range(0, count, cfg.threads):
            i = ib + tid
            ok = i < count
            j = cutlass.select_(ok, i, Int32(0))
            if const_expr(_stages_keys(cfg)):
                _emit_key(cfg, sh.ctl, ea, sh.stage_bits[j], sh.stage_idx[j], ok, values_from)
            else:
                _emit_entry(cfg, sh.ctl, ea, sh.stage_bits[j], sh.stage_idx[j], ok)
    if const_expr(src == Source.ROW):
        ha = HistArgs(Rank.BY_KEY, Uint32(0), Uint32(0), Uint32(0), Uint32(0))
        visit_row(cfg, sh, win, Action.EMIT, ha, ea)
    if const_expr(src == Source.REGS):
        _emit_registers(cfg, sh.ctl, ea, win, values_from)
    cute.arch.barrier()


@cute.jit
def _emit_registers(cfg: cutlass.Constexpr, ctl, ea, regs, values_from):
    """Emission from a :class:`~.layout.RegisterRow`."""
    for i in cutlass.range_constexpr(len(regs.keys)):
        _emit_key(cfg, ctl, ea, regs.keys[i], regs.pos(i, cfg), Boolean(True), values_from)


def position_reader(cfg, values_from, pos):
    """A trace-time function reading the bits of window position ``pos`` (called only when
    values are written)."""

    def bits():
        return load_score(values_from.base + (values_from.lead + pos), format_of(cfg))

    return bits


@cute.jit
def _emit_key(cfg: cutlass.Constexpr, ctl, ea, key: Uint32, pos: Int32, ok, values_from):
    """Emission of a candidate given by its key; its value bits are read back from
    ``values_from`` (the row's window ``base``/``lead``) only when values are written."""

    def bits():
        return load_score(values_from.base + (values_from.lead + pos), format_of(cfg))

    is_eq = ok & (key == ea.thr) & (Uint32(pos) <= ea.idx_max)
    _emit_one(cfg, ctl, ea, bits, pos, ok & (key > ea.thr), is_eq)


@cute.jit
def _emit_entry(cfg: cutlass.Constexpr, ctl, ea, bits: Uint32, pos: Int32, ok: Boolean):
    key = order_key(bits, format_of(cfg))
    _emit_one(
        cfg,
        ctl,
        ea,
        bits,
        pos,
        ok & (key > ea.thr),
        ok & (key == ea.thr) & (Uint32(pos) <= ea.idx_max),
    )


@cute.jit
def _emit_one(cfg: cutlass.Constexpr, ctl, ea, bits, pos: Int32, is_gt: Boolean, is_eq: Boolean):
    """Warp-aggregated emission: keys above the threshold fill slots ``[0, n_gt)``, the
    first ``need_eq`` equal keys fill ``[n_gt, k)``."""
    lane = cute.arch.lane_idx()
    below = cute.arch.lanemask_lt()
    ballot_gt = cute.arch.vote_ballot_sync(is_gt)
    if ballot_gt != Uint32(0):
        base_gt = Int32(0)
        if lane == 0:
            base_gt = cute.arch.atomic_add(ctl.iterator + Ctl.GT, Int32(cute.arch.popc(ballot_gt)))
        slot = warp.broadcast(base_gt, Int32(0)) + Int32(cute.arch.popc(ballot_gt & below))
        if is_gt:
            write_slot(cfg, ea, slot, pos, bits)
    ballot_eq = cute.arch.vote_ballot_sync(is_eq)
    if ballot_eq != Uint32(0):
        base_eq = Int32(0)
        if lane == 0:
            base_eq = cute.arch.atomic_add(ctl.iterator + Ctl.EQ, Int32(cute.arch.popc(ballot_eq)))
        slot = warp.broadcast(base_eq, Int32(0)) + Int32(cute.arch.popc(ballot_eq & below))
        if is_eq & (slot < ea.need_eq):
            write_slot(cfg, ea, ea.n_gt + slot, pos, bits)


@cute.jit
def write_slot(cfg: cutlass.Constexpr, ea, slot: Int32, pos: Int32, bits):
    """Write one selected entry: its index, and its value bits when ``cfg.with_values``
    (``bits``: the raw bits, or a function that reads them, called only then), in the
    scores' format."""
    ea.out[ea.row, slot] = pos
    if const_expr(cfg.with_values):
        value = bits() if callable(bits) else bits
        at = ea.values.iterator + (Int64(ea.row) * Int64(ea.k) + Int64(slot))
        store_score(at, value, format_of(cfg))


#: 16-byte vectors per thread in flight per step of the in-order tie scan.
TIE_SCAN_UNROLL = 1


@cute.jit
def emit_ties_in_order(cfg: cutlass.Constexpr, sh, win, ea):
    """Slots ``[ea.n_gt, ea.k)``: the ``ea.need_eq`` scores of the row with the smallest
    positions whose key equals ``ea.thr``, by one in-order scan of the row that stops at the
    tile where it has them (at once, on a row crowded with the key).

    Order within a tile is ``(u, thread, lane)``, which is position order; each of the tile's
    ``unroll`` steps takes its slots from a CTA-wide exclusive scan of the per-thread counts
    (``sh.hist[0:warps]`` as scratch: the selection's histograms are done). Uses the whole
    CTA; ends with a barrier. The kept positions are the smallest, so the deterministic mode
    needs nothing more.

    Returns the ties found (CTA-uniform): ``>= ea.need_eq`` when the slots are complete;
    fewer means the row holds fewer ties than needed (the caller then rescues, overwriting
    every slot).
    """
    tid, _, _ = cute.arch.thread_idx()
    lane = cute.arch.lane_idx()
    warp_id = tid // 32
    fmt = format_of(cfg)
    unroll = TIE_SCAN_UNROLL
    tile = cfg.threads * unroll
    raw_lo, span = tie_range(ea.thr, fmt)
    taken = Int32(0)
    tb = Int32(0)
    while (taken < ea.need_eq) & (tb < win.nvec):
        regs, oks, vs = load_tile(cfg.threads, unroll, win.base, tb, win.nvec, Int32(0), fmt)
        for u in cutlass.range_constexpr(unroll):
            elems = []
            bits = vector_bits(regs[u], fmt)
            for q in cutlass.range_constexpr(fmt.vec):
                pos = vs[u] * fmt.vec + q - win.lead
                tie = oks[u] & (pos >= 0) & is_tie(bits[q], raw_lo, span, fmt)
                elems.append((bits[q], pos, tie))
            taken = _take_in_order(cfg, sh, ea, elems, taken)
        tb = tb + tile
    found = taken
    if taken < ea.need_eq:
        # The 0-3 scalar tail scores follow every vector.
        if warp_id == 0:
            t = win.tail_start + lane
            ok = t < win.n
            bits = load_score(win.base + (win.lead + cutlass.select_(ok, t, Int32(0))), fmt)
            tie = ok & is_tie(bits, raw_lo, span, fmt)
            ballot = cute.arch.vote_ballot_sync(tie)
            slot = taken + Int32(cute.arch.popc(ballot & cute.arch.lanemask_lt()))
            if tie & (slot < ea.need_eq):
                write_slot(cfg, ea, ea.n_gt + slot, t, bits)
            if lane == 0:
                sh.ctl[Ctl.BCAST] = Int32(cute.arch.popc(ballot))
        cute.arch.barrier()
        found = taken + sh.ctl[Ctl.BCAST]
    # The scratch words back to zero: a rescue may histogram next.
    if tid < cfg.threads // 32:
        sh.hist[tid] = Int32(0)
    cute.arch.barrier()
    return found


@cute.jit
def _take_in_order(cfg: cutlass.Constexpr, sh, ea, elems, taken: Int32) -> Int32:
    """Ordered slots for one step of :func:`emit_ties_in_order`: a CTA-wide exclusive scan of
    the per-thread counts of ``elems`` (``(bits, pos, is_tie)`` in position order); writes
    the ones whose slot is below ``ea.need_eq``; returns ``taken`` plus the step's count."""
    tid, _, _ = cute.arch.thread_idx()
    lane = cute.arch.lane_idx()
    warp_id = tid // 32
    warps = cfg.threads // 32
    c = Int32(0)
    for _bits, _pos, tie in elems:
        c = c + cutlass.select_(tie, Int32(1), Int32(0))
    incl = warp.inclusive_sum(c)
    if lane == 31:
        sh.hist[warp_id] = incl
    cute.arch.barrier()
    w = Int32(0)
    if lane < warps:
        w = sh.hist[lane]
    w_incl = warp.inclusive_sum(w)
    total = warp.broadcast(w_incl, Int32(warps - 1))
    before = warp.broadcast(w_incl - w, warp_id)
    slot = taken + before + incl - c
    for i in cutlass.range_constexpr(len(elems)):
        bits, pos, tie = elems[i]
        if tie:
            if slot < ea.need_eq:
                write_slot(cfg, ea, ea.n_gt + slot, pos, bits)
            slot = slot + 1
    cute.arch.barrier()
    return taken + total
