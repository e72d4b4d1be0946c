"""The bracket histogram of the register-resident and cluster-register families (and the
streaming rung's linear level, ``device.rung``): scores to bins by one IEEE float32 fused
multiply-add, the float reductions that find the bracket's ends, the crossing-bin search over
that many bins by the whole CTA, and the crossing bin's selection once its keys are staged
(ranked by one warp, or narrowed).

The CPU twin of every formula is in ``gvr_reference.bracket`` (:func:`bracket`,
:func:`bracket_bins`, :func:`crossing`): the same IEEE operations, so the kernel's bins, and
the path each row takes, are what the model predicts. Exactness needs less than that: the bin
only has to be a non-decreasing function of the score, identical in every pass, which the
correctly rounded ``fma.rn`` by a positive scale (no flush of subnormals) gives, recomputed
the same way in each pass.
"""

from __future__ import annotations

import struct

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Int64, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from gvr_reference.bracket import (
    BIN0_BITS,
    EDGE_BIAS_MAX,
    EDGE_BIAS_MIN,
    KEY_FLT_MAX,
    KEY_NEG_FLT_MAX,
)
from gvr_reference.register_model import CROWD_KEY_SHIFT

from . import warp
from .keys import F32, KEY_MAX, key_bits, order_key, widen_bits
from .layout import Ctl, Goal, Rank, Source
from .memory import store_u32, store_u32_if
from .ops import umax, umin
from .select import emit_rule, narrow, position_reader, write_slot
from .shared import ctl_u32

__all__ = [
    "NEG_INF_BITS",
    "POS_INF_BITS",
    "warp_crowd",
    "crowd_word",
    "crowd_clear",
    "fmax_nan",
    "fmin",
    "BIN0_BITS",
    "bracket_setup",
    "bin_edge",
    "edge_exact",
    "bracket_bin",
    "spill_floor",
    "count_bracket",
    "hist_base",
    "find_crossing_cta",
    "may_lead",
    "bin_masks",
    "write_masked",
    "write_positions",
    "stage_masked",
    "walks",
    "lowest_slot",
    "slot_position",
    "held_bits",
    "rank_crossing",
    "narrow_crossing",
]

#: float32 bits of -inf (the value an empty register slot holds on the bracket path) and +inf.
NEG_INF_BITS = 0xFF800000
POS_INF_BITS = 0x7F800000
#: ``bit_walk``: a warp walks its set bits when its busiest lane holds at most one key in
#: this many held slots, else it keeps the predicated form. The sm_90a SASS of the
#: 1024 x 4 register route: about 20 instructions a key walked against 5 a slot for the
#: predicated stores (:func:`write_masked`; even at one key in four), and about 55 a key
#: (the select chain) against 16 a slot for the branch per slot of the crossing bin's
#: staging (:func:`stage_masked`). The ratios come from those counts, not from timings (the
#: walk as a whole was timed: ``benchmarks/results/h200/tune_variants.log``).
WALK_STORE_RATIO = 3
WALK_STAGE_RATIO = 4


def _f32_bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


@dsl_user_op
def _asm2(a: Uint32, b: Uint32, op: str, *, loc=None, ip=None) -> Uint32:
    operands = [Uint32(a).ir_value(loc=loc, ip=ip), Uint32(b).ir_value(loc=loc, ip=ip)]
    res = llvm.inline_asm(T.i32(), operands, f"{op}.f32 $0, $1, $2;", "=r,r,r", loc=loc, ip=ip)
    return Uint32(res)


@cute.jit
def fmax_nan(a: Uint32, b: Uint32) -> Uint32:
    """The larger of two float32 values given as bits, or the canonical NaN when either is
    NaN (``max.NaN.f32``): a running maximum that also reports any NaN of the row."""
    return _asm2(a, b, "max.NaN")


@cute.jit
def fmin(a: Uint32, b: Uint32) -> Uint32:
    """The smaller of two float32 values given as bits (``min.f32``; a NaN operand yields the
    other)."""
    return _asm2(a, b, "min")


@dsl_user_op
def _fma(a: Uint32, b: Uint32, c: Uint32, *, loc=None, ip=None) -> Uint32:
    operands = [Uint32(x).ir_value(loc=loc, ip=ip) for x in (a, b, c)]
    res = llvm.inline_asm(
        T.i32(),
        operands,
        "fma.rn.f32 $0, $1, $2, $3;",
        "=r,r,r,r",
        # Volatile, so it is not hoisted or merged: the emission pass recomputes each bin
        # from the bracket reread from shared memory, or ptxas keeps each counting-pass bin
        # live across the crossing search (a register per slot, which spills at 64).
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )
    return Uint32(res)


@cute.jit
def warp_crowd(key: Uint32, need: cutlass.Constexpr) -> Uint32:
    """The largest nonzero ``key`` that at least ``need`` lanes of the warp hold, else 0
    (uniform over the warp): the crowd key of one warp's sample keys,
    ``gvr_reference.register_model.crowd_key`` (0 stands for an invalid key).

    ``match.any`` counts each lane's key among the warp, but it runs about 55 cycles a warp,
    one warp after another on the SM (``benchmarks/results/h100/phases_crowd.log``: 0.5 /
    0.9 us of a 512- / 1024-thread CTA's reductions). So it runs only in a warp where some
    lane's key equals the key of one of the ``32 // need`` lanes after it (cyclically), which
    every warp with ``need`` equal keys has: those lanes split the cycle of 32 into ``need``
    gaps that sum to 32, so one gap is at most ``32 // need``
    (:func:`gvr_reference.register_model.near_pair`). A warp of distinct keys pays four
    shuffles and a vote."""
    lane = cute.arch.lane_idx()
    near = Boolean(False)
    for d in cutlass.range_constexpr(1, 32 // need + 1):
        other = Uint32(cute.arch.shuffle_sync(Int32(key), (lane + d) & 31))
        near = near | (other == key)
    near = near & (key != Uint32(0))
    crowd = Uint32(0)
    if cute.arch.vote_any_sync(near):
        same = Int32(cute.arch.popc(cute.arch.match_sync(0xFFFFFFFF, key, "any")))
        crowd = Uint32(cute.arch.warp_redux_sync(
            Uint32(cutlass.select_(same >= need, key, Uint32(0))), "umax"
        ))  # fmt: skip
    return crowd


def _crowd_shift(fmt) -> int:
    """Low bits of a crowd key the packed word drops: ``CROWD_KEY_SHIFT`` for float32 keys,
    none for 16-bit ones."""
    return CROWD_KEY_SHIFT if fmt.bits == 32 else 0


@cute.jit
def crowd_word(n_valid: Int32, crowd: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """One warp's word of the reductions: its valid sample slots (0-32) in the low six bits,
    and above them its crowd key (:func:`warp_crowd`) plus one, a float32 key without its
    low ``CROWD_KEY_SHIFT`` bits (``gvr_reference.register_model.crowd_bound``), 0 for none.
    Over the warps, the sum of the low bits is the sample's size and the maximum of the
    high bits the row's crowd (:func:`crowd_clear`). (A key whose field would pass 26 bits
    is a NaN's, and a row holding a NaN never takes the bracket: its top is not finite.)"""
    shift = _crowd_shift(fmt)
    field = Uint32(cutlass.select_(crowd != Uint32(0), (crowd >> Uint32(shift)) + Uint32(1), 0))
    return Uint32(n_valid) | (field << Uint32(6))


@cute.jit
def crowd_clear(field: Uint32, scale: Uint32, bias: Uint32, fmt: cutlass.Constexpr = F32):
    """Whether the row's crowd (the largest :func:`crowd_word` field of its warps, the
    word shifted right by six) leaves the bracket ``(scale, bias)`` alone: no crowd, or the
    bound of its key (``gvr_reference.register_model.crowd_bound``) maps below
    ``2**23 - 16``, where :func:`count_bracket` counts every score in its lane's own word
    (``gvr_reference.register_model.crowd_harms``)."""
    shift = _crowd_shift(fmt)
    bound = ((field - Uint32(1)) << Uint32(shift)) | Uint32((1 << shift) - 1)
    t = Int32(_fma(widen_bits(key_bits(bound, fmt), fmt), scale, bias))
    return Boolean((field == Uint32(0)) | (t < Int32(BIN0_BITS - 32)))


@cute.jit
def bracket_setup(lo: Uint32, top: Uint32, bins: cutlass.Constexpr):
    """``(ok, scale, bias)`` (float32 bits) of the bracket over keys ``[lo, top]``
    (``gvr_reference.bracket.bracket``): ``scale = (bins - 4) / (vmax - vlo)`` and
    ``bias = fma(-vlo, scale, 2**23 + 2)``, so a score ``v`` maps to
    ``t = fma(v, scale, bias)``, an integer-valued float (about ``2**23 + 2`` for ``vlo``,
    ``2**23 + bins - 2`` for ``vmax``) whose bits less :data:`BIN0_BITS` are its bin. ``ok``
    when both ends are finite values, ``top > lo``, the width and scale are finite, and
    ``t(vlo)`` and ``t(vmax)`` land in bins 1 and ``bins - 1`` or in between: always when
    ``-4,000 <= vlo / (vmax - vlo) <= 12,000`` or so, where ``bias`` is within half a unit
    of ``2**23 + 2 - vlo * scale``."""
    vlo = key_bits(lo)
    vmax = key_bits(top)
    width = _asm2(vmax, vlo, "sub.rn")
    scale = _asm2(Uint32(_f32_bits(float(bins - 4))), width, "div.rn")
    bias = _fma(vlo ^ Uint32(0x80000000), scale, Uint32(_f32_bits(2.0**23 + 2)))
    t_lo = Int32(_fma(vlo, scale, bias))
    t_top = Int32(_fma(vmax, scale, bias))
    ok = (lo >= Uint32(KEY_NEG_FLT_MAX)) & (top <= Uint32(KEY_FLT_MAX)) & (top > lo)
    ok = ok & (width < Uint32(0x7F800000)) & (scale < Uint32(0x7F800000))
    ok = ok & (t_lo >= Int32(BIN0_BITS + 1)) & (t_top <= Int32(BIN0_BITS + bins - 1))
    return Boolean(ok), scale, bias


@cute.jit
def bin_edge(b: Int32, scale: Uint32, bias: Uint32) -> Uint32:
    """The float32 bits of the lower edge of bracket bin ``b`` (``gvr_reference.bracket.
    bin_edge``): ``(2**23 + b - bias - 0.5) / scale`` by ``sub.rn``, ``sub.rn``, ``div.rn``.
    With ``2**22 <= bias < 2**24`` the two subtractions are exact, so one rounding in all,
    and every score of bin ``b`` or above is at least this value."""
    d = _asm2(Uint32(BIN0_BITS) + Uint32(b), bias, "sub.rn")
    d = _asm2(d, Uint32(_f32_bits(0.5)), "sub.rn")
    return _asm2(d, scale, "div.rn")


@cute.jit
def edge_exact(bias: Uint32) -> Boolean:
    """Whether :func:`bin_edge` bounds its bins (``gvr_reference.bracket.edge_exact``): the
    bias bits lie in ``[EDGE_BIAS_MIN, EDGE_BIAS_MAX)`` (positive floats order as their
    bits, and a negative bias, sign bit set, is above both)."""
    lo = Uint32(_f32_bits(EDGE_BIAS_MIN))
    return Boolean((bias >= lo) & (bias < Uint32(_f32_bits(EDGE_BIAS_MAX))))


@cute.jit
def bracket_bin(bits: Uint32, scale: Uint32, bias: Uint32) -> Int32:
    """The bracket bin of the float32 score ``bits`` (``gvr_reference.bracket.bracket_bins``
    for a score inside the bracket): the bits of ``fma(v, scale, bias)`` less ``BIN0_BITS``."""
    return Int32(_fma(bits, scale, bias)) - Int32(BIN0_BITS)


@cute.jit
def spill_floor() -> Uint32:
    """This lane's floor for :func:`count_bracket`: the float32 bits of
    ``2**23 - 16 + lane / 2``, so a score more than about 18 bins below the bracket's low
    end is counted in word ``lane - 32`` before the histogram (32 scratch words: no two
    lanes of a warp on one word, and no branch; a score nearer the low end, ``t`` in
    ``[2**23 - 16, 2**23)``, goes to the word its own ``t`` names, lanes may share it)."""
    return Uint32(BIN0_BITS - 32) + Uint32(cute.arch.lane_idx())


@dsl_user_op
def count_bracket(
    bits: Uint32, scale: Uint32, bias: Uint32, floor: Uint32, base: Int32, *, loc=None, ip=None
) -> None:
    """Count the float32 score ``bits`` in its bracket bin: ``t = max(fma(v, scale, bias),
    floor)``, one ``red.shared.add`` at byte ``base + 4 * bits(t)``; ``base`` is the
    histogram's address less ``4 * BIN0_BITS`` (mod 2**32). Scores at or above the bracket's
    low end land in bins 1 and up; scores below it in a bin at most the low end's or, ``t``
    below ``2**23``, in the 32 words before the histogram (:func:`spill_floor`). Four
    instructions a score. Needs a row without NaN (``max`` would drop it into the scratch
    words while :func:`bin_masks` ranks it above every bin): the bracket path checks the
    row's top with a NaN-propagating maximum."""
    operands = [Uint32(x).ir_value(loc=loc, ip=ip) for x in (bits, scale, bias, floor)]
    operands.append(Int32(base).ir_value(loc=loc, ip=ip))
    llvm.inline_asm(
        None,
        operands,
        "{ .reg .b32 t; fma.rn.f32 t, $0, $1, $2; max.f32 t, t, $3; "
        "mad.lo.u32 t, t, 4, $4; red.shared.add.u32 [t], 1; }",
        "r,r,r,r,r,~{memory}",
        has_side_effects=True,
        loc=loc,
        ip=ip,
    )


@cute.jit
def hist_base(hist_addr: Int32) -> Int32:
    """:func:`count_bracket`'s ``base`` for a histogram at shared byte address
    ``hist_addr``."""
    return hist_addr - Int32((4 * BIN0_BITS) % (1 << 32))


@cute.jit
def find_crossing_cta(
    hist, wsum, ctl, bins: cutlass.Constexpr, threads: cutlass.Constexpr, target: Int32
):
    """Crossing-bin search over ``bins`` histogram words by the whole CTA (every thread
    calls it); clears the histogram as it reads it; two CTA barriers.

    Thread ``t`` owns bins ``[t * per, (t + 1) * per)``, ``per = bins // threads``; a warp
    suffix scan of the per-thread sums, the warp totals through ``wsum`` and one warp sum of
    the totals of the higher warps give each thread the count at or above its first bin; the
    one thread whose bins hold the crossing walks them from the top and writes ``ctl[B]``,
    ``ctl[ABOVE]``, ``ctl[COUNT_B]`` (written only when a crossing exists:
    ``1 <= target <= total``).

    Args:
        hist: shared Int32 [bins], zeroed on return.
        wsum: shared Int32 scratch of at least ``threads // 32`` words.
        ctl: the shared control words (:class:`~.layout.Ctl`).
        target: the rank to cross, uniform over the CTA.

    Returns:
        ``(b, above, count_b)`` as :func:`~.radix.find_crossing`, read back after the second
        barrier (uniform over the CTA).
    """
    per = bins // threads
    warps = threads // 32
    tid, _, _ = cute.arch.thread_idx()
    lane = cute.arch.lane_idx()
    warp_id = tid // 32
    h = [Int32(0)] * per
    for j in cutlass.range_constexpr(per):
        h[j] = hist[tid * per + j]
    own = Int32(0)
    for j in cutlass.range_constexpr(per):
        own = own + h[j]
    for j in cutlass.range_constexpr(per):
        hist[tid * per + j] = Int32(0)
    suffix = warp.suffix_sum(own)
    if lane == 0:
        wsum[warp_id] = suffix
    cute.arch.barrier()
    w = Int32(0)
    if lane < warps:
        w = wsum[lane]
    # Sum over the warps above this one.
    higher = Int32(cute.arch.warp_redux_sync(cutlass.select_(lane > warp_id, w, 0), "add"))
    incl = higher + suffix
    # above_j[j]: count in this thread's bins above j plus every higher thread's bins; the
    # suffix above_j[j] + h[j] falls as j rises, so the last hit is the crossing bin.
    above_j = [Int32(0)] * per
    acc = incl - own
    for jj in cutlass.range_constexpr(per):
        j = per - 1 - jj
        above_j[j] = acc
        acc = acc + h[j]
    b = Int32(-1)
    above = Int32(0)
    count_b = Int32(0)
    for j in cutlass.range_constexpr(per):
        hit = above_j[j] + h[j] >= target
        b = cutlass.select_(hit, tid * per + j, b)
        above = cutlass.select_(hit, above_j[j], above)
        count_b = cutlass.select_(hit, h[j], count_b)
    if (b >= 0) & (incl - own < target):
        ctl[Ctl.B] = b
        ctl[Ctl.ABOVE] = above
        ctl[Ctl.COUNT_B] = count_b
    cute.arch.barrier()
    return ctl[Ctl.B], ctl[Ctl.ABOVE], ctl[Ctl.COUNT_B]


def may_lead(cfg, i: int) -> bool:
    """Whether register slot ``i`` of a thread holding ``cfg.vecs`` vectors of ``vec`` scores
    in a CTA of ``cfg.threads`` (a trace-time index) can hold a window position below the
    largest K (the first-k minimum reads only those): the tail slot, and the vector slots
    whose smallest position ``vec * (j * threads) - (vec - 1)`` is below ``max_k``."""
    vec = cfg.key_format.vec
    if i == vec * cfg.vecs:
        return True
    return (i // vec) * vec * cfg.threads < cfg.max_k + vec - 1


@cute.jit
def bin_masks(
    bits, scale: Uint32, bias: Uint32, cb: Int32, fmt: cutlass.Constexpr = F32,
):  # fmt: skip
    """The held scores (raw ``bits`` of format ``fmt``, binned as their float32 widening) of
    bins above the crossing bin ``cb >= 1`` and in it, as lists of 32-bit masks (bit
    ``i % 32`` of word ``i // 32`` for slot ``i``), and their counts: ``(gt, eq, n_gt,
    n_eq)``. A bin is compared as the bits of ``t = fma(v, scale, bias)`` (signed, so ``t``
    below zero is below every bin)."""
    nk = len(bits)
    edge = Int32(BIN0_BITS) + cb
    gt = []
    eq = []
    for w in cutlass.range_constexpr((nk + 31) // 32):
        mg = Uint32(0)
        me = Uint32(0)
        for i in cutlass.range_constexpr(32 * w, min(32 * w + 32, nk)):
            t = Int32(_fma(widen_bits(bits[i], fmt), scale, bias))
            one = Uint32(1 << (i % 32))
            mg = mg | Uint32(cutlass.select_(t > edge, one, Uint32(0)))
            me = me | Uint32(cutlass.select_(t == edge, one, Uint32(0)))
        gt.append(mg)
        eq.append(me)
    n_gt = Int32(0)
    n_eq = Int32(0)
    for w in cutlass.range_constexpr(len(gt)):
        n_gt = n_gt + Int32(cute.arch.popc(gt[w]))
        n_eq = n_eq + Int32(cute.arch.popc(eq[w]))
    return gt, eq, n_gt, n_eq


@cute.jit
def write_masked(cfg: cutlass.Constexpr, out, values, row: Int32, regs, masks, slot: Int32):
    """Write the held slots of ``regs`` (a :class:`~.layout.RegisterRow` of raw score bits
    in the configuration's format) whose bit is set in ``masks`` (a list of 32-bit words) to
    consecutive output slots from ``slot`` of output row ``row``, in slot order: each a
    predicated store of its window position (and, with values, of its bits, in the logits
    format), no branch; or, with ``cfg.bit_walk``, no values and few keys in the warp
    (:func:`walks`), :func:`write_positions`."""
    if const_expr(cfg.bit_walk and not cfg.with_values):
        if walks(regs, masks, WALK_STORE_RATIO):
            write_positions(cfg, out, row, regs, masks, slot)
        else:
            _write_predicated(cfg, out, values, row, regs, masks, slot)
    else:
        _write_predicated(cfg, out, values, row, regs, masks, slot)


@cute.jit
def _write_predicated(cfg: cutlass.Constexpr, out, values, row: Int32, regs, masks, slot: Int32):
    """:func:`write_masked`'s predicated stores, one (two with values) a held slot."""
    nbytes = cfg.key_format.elem_bytes
    at = out.iterator.toint() + Int64(row) * Int64(out.shape[1]) * Int64(4)
    vat = Int64(0)
    if const_expr(cfg.with_values):
        vat = values.iterator.toint() + Int64(row) * Int64(values.shape[1]) * Int64(nbytes)
    for i in cutlass.range_constexpr(len(regs.keys)):
        bit = (masks[i // 32] >> Uint32(i % 32)) & Uint32(1)
        store_u32_if(at + Int64(slot) * Int64(4), Uint32(regs.pos(i, cfg)), bit)
        if const_expr(cfg.with_values):
            store_u32_if(vat + Int64(slot) * Int64(nbytes), regs.keys[i], bit, 8 * nbytes)
        slot = slot + Int32(bit)


@cute.jit
def walks(regs, masks, ratio: cutlass.Constexpr) -> Boolean:
    """Whether the warp (all 32 lanes call it) walks the set bits of ``masks``: its busiest
    lane holds at most one set bit in ``ratio`` held slots (warp-uniform)."""
    n = Int32(0)
    for w in cutlass.range_constexpr(len(masks)):
        n = n + Int32(cute.arch.popc(masks[w]))
    most = Int32(cute.arch.warp_redux_sync(n, "max"))
    return Boolean(most * ratio <= len(regs.keys))


@cute.jit
def lowest_slot(m: Uint32, word: cutlass.Constexpr):
    """``(low, i)``: the lowest set bit of the mask word ``m`` (nonzero) of word index
    ``word``, and the held slot it stands for (``32 * word`` plus the bit's index)."""
    low = m & (Uint32(0) - m)
    return low, Int32(word * 32 + 31) - Int32(cute.arch.clz(low))


@cute.jit
def slot_position(cfg: cutlass.Constexpr, regs, i: Int32) -> Int32:
    """:meth:`~.layout.RegisterRow.pos` for a run-time slot index ``i``: lane ``i % vec``
    of vector ``i // vec`` (``vec``, a power of two), or the tail slot's position."""
    vec = cfg.key_format.vec
    shift = vec.bit_length() - 1
    pos = regs.p0 + (i >> Int32(shift)) * Int32(vec * cfg.threads) + (i & Int32(vec - 1))
    return cutlass.select_(i == len(regs.keys) - 1, regs.tail_pos, pos)


@cute.jit
def held_bits(regs, i: Int32) -> Uint32:
    """The held bits of a run-time slot index ``i`` (registers cannot be indexed at run
    time: a chain of selects over the slots, two instructions a slot)."""
    got = Uint32(regs.keys[0])
    for s in cutlass.range_constexpr(1, len(regs.keys)):
        got = Uint32(cutlass.select_(i == s, regs.keys[s], got))
    return got


@cute.jit
def walk_set_bits(masks, slot: Int32, visit: cutlass.Constexpr):
    """``visit(s, i)`` for every set bit of ``masks`` (bit ``i % 32`` of word ``i // 32`` marks
    held slot ``i``), lowest first, with ``s`` the consecutive output slots from ``slot``: one
    loop trip a set bit (:func:`lowest_slot`), none for the clear ones."""
    for w in cutlass.range_constexpr(len(masks)):
        m = masks[w]
        while m != Uint32(0):
            low, i = lowest_slot(m, w)
            visit(slot, i)
            slot = slot + 1
            m = m ^ low


@cute.jit
def write_positions(cfg: cutlass.Constexpr, out, row: Int32, regs, masks, slot: Int32):
    """:func:`write_masked` for a launch that writes no values (``bit_walk``
    configurations): the window positions of the held slots whose bit is set in ``masks`` go
    to consecutive output slots from ``slot`` of output row ``row``, in slot order, by a walk
    over the set bits (lowest first) that computes each position from its slot index: one
    store per set bit and none for the others, where the predicated form spends a store and
    its address on every held slot. A thread holds few keys above the crossing bin (``K`` of
    the row's ``n``), so the walk is short. Values need the held bits: those launches keep
    the predicated stores."""
    at = out.iterator + Int64(row) * Int64(out.shape[1])  # (the row's base, out of the loop)

    def store(s, i):
        store_u32(at + s, Uint32(slot_position(cfg, regs, i)))

    walk_set_bits(masks, slot, store)


@cute.jit
def stage_masked(cfg: cutlass.Constexpr, regs, masks, slot: Int32, put: cutlass.Constexpr):
    """Hand the held keys whose bit is set in ``masks`` (the crossing bin's) to
    ``put(slot, key, position)`` for consecutive slots from ``slot``, in slot order (``key``:
    the order key in the configuration's format): a branch a held slot, or, with
    ``cfg.bit_walk`` and few keys in the warp (:func:`walks`), a walk over the set bits with
    each key's bits read by :func:`held_bits`. The whole warp calls it."""
    fmt = cfg.key_format
    if const_expr(cfg.bit_walk):
        if walks(regs, masks, WALK_STAGE_RATIO):

            def stage(s, i):
                put(s, order_key(held_bits(regs, i), fmt), slot_position(cfg, regs, i))

            walk_set_bits(masks, slot, stage)
        else:
            _stage_slots(cfg, regs, masks, slot, put)
    else:
        _stage_slots(cfg, regs, masks, slot, put)


@cute.jit
def _stage_slots(cfg: cutlass.Constexpr, regs, masks, slot: Int32, put: cutlass.Constexpr):
    """:func:`stage_masked`'s form with a branch a held slot."""
    for i in cutlass.range_constexpr(len(regs.keys)):
        if ((masks[i // 32] >> Uint32(i % 32)) & Uint32(1)) != Uint32(0):
            put(slot, order_key(regs.keys[i], cfg.key_format), regs.pos(i, cfg))
            slot = slot + 1


@cute.jit
def rank_crossing(cfg: cutlass.Constexpr, sh, ea, win, m: Int32, above: Int32, need: Int32):
    """One warp (called by its 32 lanes): the ``m <= 32`` staged keys of the crossing bin
    ranked by (key descending, position ascending); the first ``need`` go to slots
    ``above + rank``. Ranks are distinct (positions are), so the slots
    ``[above, above + need)`` are each written once, and the tie class at the boundary yields
    its smallest positions."""
    lane = cute.arch.lane_idx()
    mine = lane < m
    at = cutlass.select_(mine, lane, Int32(0))
    key = Uint32(cutlass.select_(mine, sh.stage_bits[at], Uint32(0)))
    pos = sh.stage_idx[at]
    rank = Int32(0)
    # Lanes at or past m hold no staged key: only the first m lanes are compared.
    for j in cutlass.range(m, unroll=4):
        kj = Uint32(warp.broadcast(Int32(key), Int32(j)))
        pj = warp.broadcast(pos, Int32(j))
        rank = rank + cutlass.select_((kj > key) | ((kj == key) & (pj < pos)), 1, 0)
    if mine & (rank < need):
        write_slot(cfg, ea, above + rank, pos, position_reader(cfg, win, pos))


@cute.jit
def narrow_crossing(cfg: cutlass.Constexpr, sh, win, out, values, row, k, m, need, above):
    """The whole CTA: radix narrowing over the ``m`` staged keys of the crossing bin (their
    key range first), then the emission of its ``need`` winners into slots ``[above, k)``."""
    _staged_range(cfg, sh, m)
    cute.arch.barrier()
    lo = ~Uint32(sh.ctl[Ctl.CMIN])
    hi = Uint32(sh.ctl[Ctl.CMAX])
    thr, need_eq, count_thr = narrow(
        cfg, sh, win, Source.STAGE, Rank.BY_KEY, Goal.SELECT, need, lo, hi, Uint32(0), m
    )
    emit_rule(
        cfg, sh, win, Source.STAGE, out, values, row, k, thr, need_eq, count_thr, m,
        values_from=win, gt_start=above,
    )  # fmt: skip


@cute.jit
def _staged_range(cfg: cutlass.Constexpr, sh, m: Int32):
    """The smallest and largest of the ``m`` staged keys into ``ctl[CMIN]`` (complemented)
    and ``ctl[CMAX]``: a strided pass over the staging, one atomic pair per warp."""
    cmin = Uint32(KEY_MAX)
    cmax = Uint32(0)
    tid, _, _ = cute.arch.thread_idx()
    for ib in cutlass.range(0, m, cfg.threads):
        i = ib + tid
        key = sh.stage_bits[cutlass.select_(i < m, i, Int32(0))]
        cmin = umin(cmin, key)
        cmax = umax(cmax, key)
    cmin = Uint32(cute.arch.warp_redux_sync(cmin, "umin"))
    cmax = Uint32(cute.arch.warp_redux_sync(cmax, "umax"))
    if cute.arch.lane_idx() == 0:
        cute.arch.atomic_max(ctl_u32(sh.ctl, Ctl.CMIN), ~cmin)
        cute.arch.atomic_max(ctl_u32(sh.ctl, Ctl.CMAX), cmax)
