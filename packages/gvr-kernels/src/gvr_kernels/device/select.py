"""Exact key-space radix selection over a candidate source, and the emission of its result.

``RadixSelectMixin`` is mixed into a kernel class that provides ``cfg`` (``with_values``,
``deterministic``), ``threads`` and ``unroll``. One primitive serves every path of the family:
the sample rungs (source: the sample), the selection among staged survivors (source: the
staging buffer) and the whole-row rescue (source: the row, re-read from global memory). Each
level histograms 8 key bits of the live range ``[lo, hi]`` and keeps the crossing bin, so after
at most four levels the rule "keys above ``thr`` plus ``need_eq`` keys equal to it" is exact
(``gvr_reference.model.select_rule`` is the CPU twin).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Int64, Uint32, const_expr

from . import radix, warp
from .keys import KEY_MAX, order_key
from .layout import (
    _ABOVE,
    _ACT_EMIT,
    _ACT_HIST,
    _B,
    _COUNT_B,
    _EQ,
    _GT,
    _SRC_ROW,
    _SRC_SAMPLE,
    _SRC_STAGE,
)
from .memory import load_scalar, load_vec4, store_u32


class RadixSelectMixin:
    """Radix narrowing, the whole-row visitor, and warp-aggregated emission."""

    @cute.jit
    def _narrow(
        self,
        sh,
        src: cutlass.Constexpr,
        by_index: cutlass.Constexpr,
        threshold_mode: cutlass.Constexpr,
        target: Int32,
        lo: Uint32,
        hi: Uint32,
        eq_key: Uint32,
        count: Int32,
        base,
        lead: Int32,
        nvec: Int32,
        tail_start: Int32,
        n: Int32,
    ):
        """Radix narrowing over a candidate source, 8 key bits per level.

        ``threshold_mode``: returns a rung ``T`` with ``target <= #(keys >= T) <= 2 * target``
        (or a single-key bin), as ``gvr_reference.model.narrow_threshold``.
        Otherwise returns ``(thr, need_eq, count_thr)``: the top-``target`` candidates are the
        keys above ``thr`` plus ``need_eq`` keys equal to it (``count_thr`` of them exist when
        the last level was a single key), as ``gvr_reference.model.select_rule``.

        ``by_index``: candidates are the entries whose key equals ``eq_key``, ranked by
        ``KEY_MAX - index`` (smallest index first), for the deterministic tie mode.
        """
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        warp_id = tid // 32
        lane = cute.arch.lane_idx()
        done = Boolean(False)
        above = Int32(0)
        need = target
        thr = Uint32(0)
        need_eq = Int32(0)
        count_thr = Int32(0)
        while not done:
            shift = radix.level_shift(lo, hi)
            self._histogram(
                sh, src, by_index, lo, hi, shift, eq_key, count, base, lead, nvec, tail_start, n
            )
            cute.arch.barrier()
            if warp_id == 0:
                goal = need
                if const_expr(threshold_mode):
                    goal = target - above
                b, ab, hb = radix.find_crossing(hist, goal)
                if lane == 0:
                    ctl[_B] = b
                    ctl[_ABOVE] = ab
                    ctl[_COUNT_B] = hb
            cute.arch.barrier()
            b = Uint32(ctl[_B])
            ab = ctl[_ABOVE]
            hb = ctl[_COUNT_B]
            lo_b = lo + (b << shift)
            top_bin = (hi - lo) >> shift
            hi_b = Uint32(
                cutlass.select_(b == top_bin, hi, lo_b + ((Uint32(1) << shift) - Uint32(1)))
            )
            if const_expr(threshold_mode):
                reached = above + ab + hb
                if shift == Uint32(0) or reached <= target * 2:
                    thr = lo_b
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
        self,
        sh,
        src: cutlass.Constexpr,
        by_index: cutlass.Constexpr,
        lo,
        hi,
        shift,
        eq_key,
        count,
        base,
        lead,
        nvec,
        tail_start,
        n,
    ):
        """One radix level's histogram of the candidates with key in ``[lo, hi]``."""
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()

        if const_expr(src == _SRC_SAMPLE):
            for i in cutlass.range(tid, count, self.threads):
                self._count_key(hist, sample[i], Boolean(True), lo, hi, shift)
        if const_expr(src == _SRC_STAGE):
            for i in cutlass.range(tid, count, self.threads):
                self._count_entry(
                    hist,
                    by_index,
                    stage_bits[i],
                    stage_idx[i],
                    Boolean(True),
                    lo,
                    hi,
                    shift,
                    eq_key,
                )
        if const_expr(src == _SRC_ROW):
            emit_args = (None, None, Int32(0), Int32(0), Int32(0), Int32(0), Uint32(0), Uint32(0))
            self._row_loop(
                sh,
                _ACT_HIST,
                base,
                lead,
                nvec,
                tail_start,
                n,
                (by_index, lo, hi, shift, eq_key),
                emit_args,
            )

    @cute.jit
    def _count_key(self, hist, key: Uint32, keep: Boolean, lo: Uint32, hi: Uint32, shift: Uint32):
        if keep & (key >= lo) & (key <= hi):
            cute.arch.atomic_add(hist.iterator + Int32((key - lo) >> shift), Int32(1))

    @cute.jit
    def _count_entry(
        self,
        hist,
        by_index: cutlass.Constexpr,
        bits: Uint32,
        pos: Int32,
        ok: Boolean,
        lo: Uint32,
        hi: Uint32,
        shift: Uint32,
        eq_key: Uint32,
    ):
        key = order_key(bits)
        if const_expr(by_index):
            self._count_key(
                hist, Uint32(KEY_MAX) - Uint32(pos), ok & (key == eq_key), lo, hi, shift
            )
        else:
            self._count_key(hist, key, ok, lo, hi, shift)

    @cute.jit
    def _row_loop(
        self,
        sh,
        action: cutlass.Constexpr,
        base,
        lead: Int32,
        nvec: Int32,
        tail_start: Int32,
        n: Int32,
        hist_args,
        emit_args,
    ):
        """Visit the whole row: tiles of ``unroll`` vectors per thread (warp-uniform trip
        count), then the scalar tail on warp 0, applying ``action`` to every ``(bits, pos, ok)``:
        ``_ACT_HIST`` counts a radix level (``hist_args``), ``_ACT_EMIT`` emits the selection
        (``emit_args``)."""
        tid, _, _ = cute.arch.thread_idx()
        lane = cute.arch.lane_idx()
        tile = self.threads * self.unroll
        for tb in cutlass.range(0, nvec, tile):
            regs = []
            oks = []
            vs = []
            for u in cutlass.range_constexpr(self.unroll):
                v = tb + u * self.threads + tid
                ok = v < nvec
                regs.append(load_vec4(base + Int64(cutlass.select_(ok, v, Int32(0))) * Int64(4)))
                oks.append(ok)
                vs.append(v)
            for u in cutlass.range_constexpr(self.unroll):
                for q in cutlass.range_constexpr(4):
                    pos = vs[u] * 4 + q - lead
                    self._act(
                        sh, action, regs[u][q], pos, oks[u] & (pos >= 0), hist_args, emit_args
                    )
        if tid // 32 == 0:
            t = tail_start + lane
            ok = t < n
            bits = load_scalar(base + (lead + cutlass.select_(ok, t, Int32(0))))
            self._act(sh, action, bits, t, ok, hist_args, emit_args)

    @cute.jit
    def _act(
        self,
        sh,
        action: cutlass.Constexpr,
        bits: Uint32,
        pos: Int32,
        ok: Boolean,
        hist_args,
        emit_args,
    ):
        hist, ctl, sample, stage_bits, stage_idx = sh
        if const_expr(action == _ACT_HIST):
            by_index, lo, hi, shift, eq_key = hist_args
            self._count_entry(hist, by_index, bits, pos, ok, lo, hi, shift, eq_key)
        else:
            out, values, row, k, n_gt, need_eq, thr, idx_max = emit_args
            self._emit_entry(ctl, out, values, row, k, n_gt, need_eq, thr, idx_max, bits, pos, ok)

    # ------------------------------------------------------------------ selection + emission
    @cute.jit
    def _select_and_emit(
        self,
        sh,
        src: cutlass.Constexpr,
        out,
        values,
        row: Int32,
        k: Int32,
        lo: Uint32,
        hi: Uint32,
        count: Int32,
        base,
        lead: Int32,
        nvec: Int32,
        tail_start: Int32,
        n: Int32,
    ):
        """Exact selection over the staged survivors (``src`` stage) or the whole row, then
        one emission pass writing all ``k`` slots of the row."""
        hist, ctl, sample, stage_bits, stage_idx = sh
        tid, _, _ = cute.arch.thread_idx()
        thr, need_eq, count_thr = self._narrow(
            sh, src, False, False, k, lo, hi, Uint32(0), count, base, lead, nvec, tail_start, n
        )
        idx_max = Uint32(KEY_MAX)
        if const_expr(self.cfg.deterministic):
            if need_eq > 0 and need_eq < count_thr:
                thr_i, need_i, _ = self._narrow(
                    sh,
                    src,
                    True,
                    False,
                    need_eq,
                    Uint32(0),
                    Uint32(KEY_MAX),
                    thr,
                    count,
                    base,
                    lead,
                    nvec,
                    tail_start,
                    n,
                )
                idx_max = Uint32(KEY_MAX) - thr_i - Uint32(cutlass.select_(need_i == 0, 1, 0))
        if tid == 0:
            ctl[_GT] = Int32(0)
            ctl[_EQ] = Int32(0)
        cute.arch.barrier()
        n_gt = k - need_eq

        if const_expr(src == _SRC_STAGE):
            for ib in cutlass.range(0, count, self.threads):
                i = ib + tid
                ok = i < count
                j = cutlass.select_(ok, i, Int32(0))
                self._emit_entry(
                    ctl,
                    out,
                    values,
                    row,
                    k,
                    n_gt,
                    need_eq,
                    thr,
                    idx_max,
                    stage_bits[j],
                    stage_idx[j],
                    ok,
                )
        if const_expr(src == _SRC_ROW):
            self._row_loop(
                sh,
                _ACT_EMIT,
                base,
                lead,
                nvec,
                tail_start,
                n,
                (False, Uint32(0), Uint32(0), Uint32(0), Uint32(0)),
                (out, values, row, k, n_gt, need_eq, thr, idx_max),
            )
        cute.arch.barrier()

    @cute.jit
    def _emit_entry(
        self,
        ctl,
        out,
        values,
        row: Int32,
        k: Int32,
        n_gt: Int32,
        need_eq: Int32,
        thr: Uint32,
        idx_max: Uint32,
        bits: Uint32,
        pos: Int32,
        ok: Boolean,
    ):
        key = order_key(bits)
        self._emit_one(
            ctl,
            out,
            values,
            row,
            k,
            n_gt,
            need_eq,
            bits,
            pos,
            ok & (key > thr),
            ok & (key == thr) & (Uint32(pos) <= idx_max),
        )

    @cute.jit
    def _emit_one(
        self,
        ctl,
        out,
        values,
        row: Int32,
        k: Int32,
        n_gt: Int32,
        need_eq: Int32,
        bits: Uint32,
        pos: Int32,
        is_gt: Boolean,
        is_eq: Boolean,
    ):
        """Warp-aggregated emission: keys above the threshold fill slots ``[0, n_gt)``, the
        first ``need_eq`` equal keys fill ``[n_gt, k)``."""
        lane = cute.arch.lane_idx()
        below = cute.arch.lanemask_lt()
        ballot_gt = cute.arch.vote_ballot_sync(is_gt)
        if ballot_gt != Uint32(0):
            base_gt = Int32(0)
            if lane == 0:
                base_gt = cute.arch.atomic_add(ctl.iterator + _GT, Int32(cute.arch.popc(ballot_gt)))
            slot = warp.broadcast(base_gt, Int32(0)) + Int32(cute.arch.popc(ballot_gt & below))
            if is_gt:
                self._write(out, values, row, k, slot, pos, bits)
        ballot_eq = cute.arch.vote_ballot_sync(is_eq)
        if ballot_eq != Uint32(0):
            base_eq = Int32(0)
            if lane == 0:
                base_eq = cute.arch.atomic_add(ctl.iterator + _EQ, Int32(cute.arch.popc(ballot_eq)))
            slot = warp.broadcast(base_eq, Int32(0)) + Int32(cute.arch.popc(ballot_eq & below))
            if is_eq & (slot < need_eq):
                self._write(out, values, row, k, n_gt + slot, pos, bits)

    @cute.jit
    def _write(self, out, values, row: Int32, k: Int32, slot: Int32, pos: Int32, bits: Uint32):
        out[row, slot] = pos
        if const_expr(self.cfg.with_values):
            store_u32(values.iterator + (Int64(row) * Int64(k) + Int64(slot)), bits)
