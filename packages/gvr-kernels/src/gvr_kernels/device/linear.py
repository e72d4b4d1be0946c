"""The streaming family's selection over its staged survivors, by one linear level.

The staged survivors of a row (a CTA's own, or a split row's gathered by its finishing CTA)
number about ``aim_mult * k`` on a sampled row and up to the staging capacity on a short
unsampled one. A radix narrowing over them histograms 8 key bits a level, and a float32 key
range spans 20-32 bits, so it takes three or four levels (each a pass over the staging and two
CTA barriers) before the rule is known. One level of :data:`LINEAR_BINS` bins spread evenly
over the staged values (the bracket map of :mod:`.bracket`, one ``fma.rn.f32`` a key) leaves
a few keys in the crossing bin on gaussian and DSA-like rows, so:

1. the histogram of the staged keys over ``[lo, hi]`` (``lo`` the selection's low key, or the
   staging's smallest key when that is not a finite value's; ``hi`` the largest staged key).
   A workspace split row's finishing CTA counts it as it gathers the slab, over ``[lo, top]``
   with ``top`` the row sample's largest key (known to every CTA before any slab entry is),
   the keys above ``top`` in the top bin;
2. the crossing bin of ``k`` (``above`` keys in higher bins, ``m`` in it; the whole CTA,
   :func:`~.bracket.find_crossing_cta`);
3. one emission pass: every key of a higher bin to the slots ``[0, above)``; the crossing
   bin's keys to ``[above, k)`` when all of them are wanted (``m == k - above``), else into a
   small staging of at most :data:`CROSS_MAX` entries;
4. those are ranked by (key descending, position ascending), every thread of the CTA one of
   them, and the first ``k - above`` go to slots ``above + rank``.

Exact because the bin is a non-decreasing function of the key (:mod:`.bracket`, invariant I8
of ``docs/kernels.md``): every key of a higher bin is above every key of the crossing bin and
below, so those ``above < k`` keys are selected, the boundary's tie class lies in the
crossing bin, and the ranks (distinct: positions are) give its ``k - above`` largest with the
smallest positions first, which is also the deterministic mode's rule. Rows whose ends are not
finite values (a NaN or an infinity staged), too close for the float scale, or whose
crossing bin holds more than :data:`CROSS_MAX` keys but not exactly the ones wanted (a tie
class, scores piled on one value) take the radix narrowing (:func:`~.select.select_and_emit`);
so do 16-bit rows. The CPU twin of the decisions is ``gvr_reference.model.linear_select``.

Shared memory: the histogram, the crossing search's scratch words, the smallest-key word and
the crossing bin's staging lie in the row's sample buffer (``sh.sample``), dead once the rung
and any retry are known (:data:`SAMPLE_WORDS` words; configurations with a smaller sample
keep the radix narrowing). Barriers: 1 (the histogram zeroed) + 1 (the smallest key, rows
without a finite low key) + 1 (histogram) + 2 (crossing) + 1 (emission) + 1 (the ranks
written), against 2 a radix level and 2 for the emission.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Uint32, const_expr
from gvr_reference.bracket import KEY_NEG_FLT_MAX
from gvr_reference.model import LINEAR_BINS, LINEAR_CROSS_MAX

from . import warp
from .bracket import bracket_bin, bracket_setup, find_crossing_cta
from .keys import format_of, order_key
from .layout import Ctl, EmitArgs, Source
from .ops import umin
from .select import select_and_emit, write_slot
from .shared import stamp_phase

__all__ = [
    "LINEAR_BINS",
    "CROSS_MAX",
    "SAMPLE_WORDS",
    "bin_setup",
    "clear",
    "count_key",
    "select_staged",
]

#: Keys of the crossing bin staged and ranked (``gvr_reference.model.LINEAR_CROSS_MAX``).
CROSS_MAX = LINEAR_CROSS_MAX
# Word offsets in the sample buffer.
_WSUM = LINEAR_BINS  # the crossing search's per-warp totals (at most 32 warps)
_MIN = _WSUM + 32  # complement of the staging's smallest key (atomic max)
_ZEROED = _MIN + 1  # words zeroed on entry
_CBITS = _WSUM + 64  # the crossing bin's staged bits ...
_CPOS = _CBITS + CROSS_MAX  # ... and positions
#: Sample-buffer words the linear selection needs.
SAMPLE_WORDS = _CPOS + CROSS_MAX


def serves(cfg) -> bool:
    """Whether a streaming configuration selects its staged survivors by the linear level:
    float32 scores and a sample buffer of at least :data:`SAMPLE_WORDS` words."""
    return format_of(cfg).bits == 32 and cfg.sample_max >= SAMPLE_WORDS


@cute.jit
def select_staged(
    cfg: cutlass.Constexpr, sh, win, out, values, row: Int32, k: Int32, lo: Uint32, hi: Uint32,
    count: Int32, paths, stamps: cutlass.Constexpr, counted=None, top=None,
):  # fmt: skip
    """Select the top ``k`` of the ``count`` staged survivors (``k <= count <= capacity``,
    their keys in ``[lo, hi]``) and write all ``k`` slots of output row ``row``: by the linear
    level where it serves (module docstring), else by :func:`~.select.select_and_emit`. Every
    thread calls it; ends with a CTA barrier.

    ``counted`` (a Boolean; None for false) and ``top`` (a key): the histogram is already
    counted over the bracket ``[lo, top]`` (after :func:`clear`; :func:`bin_setup` true for
    it; each key by :func:`count_key`, those above ``top`` in the top bin) and the CTA has
    passed a barrier since; ``top`` at most ``hi``, and ``hi`` a finite
    value's key. A ``stamp_phases`` build stamps the boundaries ``"hist"`` (the histogram
    counted) and ``"cross"`` (the crossing bin found) of the family's phase names ``stamps``
    into ``paths`` (:func:`~.shared.stamp_phase`)."""
    done = Boolean(False)
    if const_expr(serves(cfg)):
        if const_expr(counted is None):
            counted = Boolean(False)
            top = hi
        done = _linear(
            cfg, sh, win, out, values, row, k, lo, hi, count, paths, stamps, counted, top
        )
    if not done:
        select_and_emit(cfg, sh, win, Source.STAGE, out, values, row, k, lo, hi, count)


@cute.jit
def clear(cfg: cutlass.Constexpr, sh):
    """Zero the linear level's histogram and scratch words (in ``sh.sample``) and its
    emission cursors (``ctl[Ctl.GT]``, ``ctl[Ctl.EQ]``); a CTA barrier must follow before any
    key is counted."""
    tid, _, _ = cute.arch.thread_idx()
    words = cute.recast_ptr(sh.sample.iterator, dtype=Int32)
    for i in cutlass.range(tid, _ZEROED, cfg.threads):
        words[i] = Int32(0)
    if tid == 0:
        sh.ctl[Ctl.GT] = Int32(0)
        sh.ctl[Ctl.EQ] = Int32(0)


@cute.jit
def bin_setup(lo: Uint32, top: Uint32):
    """``(ok, scale, bias)``: whether keys of at least ``lo`` can be counted into the linear
    level's histogram over the bracket ``[lo, top]`` before :func:`select_staged` runs
    (``lo`` a finite value's key and the bracket valid: the test and the bracket
    :func:`select_staged` then takes), and that bracket."""
    ok, scale, bias = bracket_setup(lo, top, LINEAR_BINS)
    return ok & (lo >= Uint32(KEY_NEG_FLT_MAX)), scale, bias


@cute.jit
def _bin(bits: Uint32, scale: Uint32, bias: Uint32) -> Int32:
    # The bracket bin, keys above the bracket's top in the top bin (the bin stays a
    # non-decreasing function of the key; +inf and NaN, whose fma is +inf or the canonical
    # NaN, positive bits, land there too).
    return cutlass.min(bracket_bin(bits, scale, bias), Int32(LINEAR_BINS - 1))


@cute.jit
def count_key(sh, bits: Uint32, scale: Uint32, bias: Uint32):
    """Count the float32 score ``bits`` (a key of at least the bracket's low end) in the
    linear level's histogram over the bracket of :func:`bin_setup`; a key above the
    bracket's top counts in the top bin."""
    words = cute.recast_ptr(sh.sample.iterator, dtype=Int32)
    cute.arch.atomic_add(words + _bin(bits, scale, bias), Int32(1))


@cute.jit
def _linear(
    cfg: cutlass.Constexpr, sh, win, out, values, row, k, lo, hi, count, paths,
    stamps: cutlass.Constexpr, counted, top,
) -> Boolean:  # fmt: skip
    tid, _, _ = cute.arch.thread_idx()
    threads = cfg.threads
    words = cute.recast_ptr(sh.sample.iterator, dtype=Int32)
    hist = cute.make_tensor(words, cute.make_layout(LINEAR_BINS))
    wsum = cute.make_tensor(words + _WSUM, cute.make_layout(32))
    ok = Boolean(True)
    scale = Uint32(0)
    bias = Uint32(0)
    if counted:
        ok, scale, bias = bracket_setup(lo, top, LINEAR_BINS)
    else:
        clear(cfg, sh)
        cute.arch.barrier()
        if lo < Uint32(KEY_NEG_FLT_MAX):
            # (an unsampled row: every score staged) the staging's smallest key
            low = Uint32(0xFFFFFFFF)
            for i in cutlass.range(tid, count, threads):
                low = umin(low, order_key(Uint32(sh.stage_bits[i])))
            low = Uint32(cute.arch.warp_redux_sync(low, "umin"))
            if cute.arch.lane_idx() == 0:
                cute.arch.atomic_max(cute.recast_ptr(words + _MIN, dtype=Uint32), ~low)
            cute.arch.barrier()
            lo = ~Uint32(words[_MIN])
        ok, scale, bias = bracket_setup(lo, hi, LINEAR_BINS)
        if ok:
            for i in cutlass.range(tid, count, threads):
                cute.arch.atomic_add(words + bracket_bin(sh.stage_bits[i], scale, bias), Int32(1))
            cute.arch.barrier()
    done = Boolean(False)
    if ok:
        stamp_phase(cfg, paths, stamps, "hist")
        cb, above, m = find_crossing_cta(hist, wsum, sh.ctl, LINEAR_BINS, threads, k)
        stamp_phase(cfg, paths, stamps, "cross")
        need = k - above
        whole = m == need
        if whole | (m <= CROSS_MAX):
            done = Boolean(True)
            ea = EmitArgs(out, values, row, k, Int32(0), Int32(0), Uint32(0), Uint32(0))
            for ib in cutlass.range(0, count, threads):
                i = ib + tid
                ok_i = i < count
                j = cutlass.select_(ok_i, i, Int32(0))
                bits = Uint32(sh.stage_bits[j])
                pos = sh.stage_idx[j]
                b = _bin(bits, scale, bias)
                is_eq = ok_i & (b == cb)
                is_gt = ok_i & (b > cb)
                if whole:
                    _take(cfg, sh.ctl, Ctl.GT, is_gt | is_eq, ea, bits, pos, None)
                else:
                    _take(cfg, sh.ctl, Ctl.GT, is_gt, ea, bits, pos, None)
                    _take(cfg, sh.ctl, Ctl.EQ, is_eq, ea, bits, pos, words)
            cute.arch.barrier()
            if not whole:
                if tid < m:
                    my_bits = Uint32(words[_CBITS + tid])
                    my_pos = words[_CPOS + tid]
                    key = order_key(my_bits)
                    rank = Int32(0)
                    for j in cutlass.range(m, unroll=4):
                        kj = order_key(Uint32(words[_CBITS + j]))
                        pj = words[_CPOS + j]
                        rank = rank + cutlass.select_(
                            (kj > key) | ((kj == key) & (pj < my_pos)), 1, 0
                        )
                    if rank < need:
                        write_slot(cfg, ea, above + rank, my_pos, my_bits)
                cute.arch.barrier()
    return done


@cute.jit
def _take(cfg: cutlass.Constexpr, ctl, cursor: cutlass.Constexpr, take, ea, bits, pos, cross):
    """Warp-aggregated slots from the cursor ``ctl[cursor]`` for the lanes with ``take``: an
    output slot (``cross`` None) or a slot of the crossing bin's staging in the sample
    buffer's words ``cross``."""
    lane = cute.arch.lane_idx()
    ballot = cute.arch.vote_ballot_sync(take)
    if ballot != Uint32(0):
        first = Int32(0)
        if lane == 0:
            first = cute.arch.atomic_add(ctl.iterator + cursor, Int32(cute.arch.popc(ballot)))
        slot = warp.broadcast(first, Int32(0)) + Int32(
            cute.arch.popc(ballot & cute.arch.lanemask_lt())
        )
        if take:
            if const_expr(cross is None):
                write_slot(cfg, ea, slot, pos, bits)
            else:
                cross[_CBITS + slot] = Int32(bits)
                cross[_CPOS + slot] = pos
