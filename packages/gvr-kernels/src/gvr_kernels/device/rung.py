"""The streaming family's first rung: one linear level over the sample's value range.

A radix level over the key bits lumps whole binades into one bin (the top byte of a float32
key is its sign and seven exponent bits), so the sample of a gaussian or DSA-like row needs two
radix levels, each a histogram of the sample and two CTA barriers, before its crossing bin holds
at most ``reach`` keys. One level of :data:`RUNG_BINS` bins spread evenly over the sample's
values, from its smallest key to its largest (the bracket map of :mod:`.bracket`: one
``fma.rn.f32`` a key), settles it at once on such rows; the rung is the crossing bin's lower
edge (:func:`~.bracket.bin_edge`, three IEEE operations, exact while the bracket's bias lies in
``[2**22, 2**24)``). When that bin still leaves more than ``reach`` sample keys (a tie class,
scores piled near one value), radix levels go on over the keys from the edge to the sample's
largest: they hold every key of the crossing bin and above, so at least ``target``. Samples
whose ends are not finite values, too close for the float scale, or whose bias falls outside
that range (a spread of under about 500 units in the last place), and 16-bit samples, take the
radix levels from ``[0, key_max]``.

The CPU twin is ``gvr_reference.model.sample_rung``. Any rung is exact for the kernel (the pass
counts the survivors it leaves, invariant I6 of ``docs/kernels.md``); the arithmetic only has to
match the model's for the path to be the predicted one.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Uint32, const_expr
from gvr_reference.model import RUNG_BINS

from . import radix
from .bracket import bin_edge, bracket_bin, bracket_setup, edge_exact
from .keys import key_bits, order_key
from .layout import Ctl, Goal, Rank, Source
from .select import narrow

__all__ = ["RUNG_BINS", "sample_rung"]


@cute.jit
def sample_rung(
    cfg: cutlass.Constexpr,
    sh,
    win,
    target: Int32,
    reach: Int32,
    count: Int32,
    low: Uint32,
    top: Uint32,
):
    """The first rung from the sample's ``count`` keys in ``sh.sample``: ``(T, ties,
    reached)`` as :func:`~.select.narrow` with ``Goal.RUNG`` (``target <= reached =
    #(sample >= T) <= reach``, or a single key with ``ties`` sample keys on it; on the linear
    level ``reached`` is the histogram's count, which leaves out at most the keys equal to
    ``T`` in the bin below).

    ``low`` and ``top``: the smallest and the largest key of the window's sample scores (lanes
    before the window hold key 0, below ``low``: bin 0). Every thread calls it; the histogram
    is zero on entry and on return."""
    tid, _, _ = cute.arch.thread_idx()
    key_max = Uint32(cfg.key_format.key_max)
    lo = Uint32(0)
    hi = key_max
    thr = Uint32(0)
    ties = Int32(0)
    reached = Int32(0)
    settled = Boolean(False)
    if const_expr(cfg.key_format.bits == 32):
        ok, scale, bias = bracket_setup(low, top, RUNG_BINS)
        ok = ok & edge_exact(bias)
        if ok:
            for i in cutlass.range(tid, count, cfg.threads):
                key = sh.sample[i]
                b_i = cutlass.select_(key < low, Int32(0), bracket_bin(key_bits(key), scale, bias))
                cute.arch.atomic_add(sh.hist.iterator + b_i, Int32(1))
            cute.arch.barrier()
            if tid // 32 == 0:
                b, ab, hb = radix.find_crossing(sh.hist, target)
                if tid == 0:
                    edge = order_key(bin_edge(b, scale, bias))
                    sh.ctl[Ctl.B] = Int32(cutlass.select_(b == 0, Uint32(0), edge))
                    sh.ctl[Ctl.COUNT_B] = ab + hb
            cute.arch.barrier()
            lo = Uint32(sh.ctl[Ctl.B])
            hi = top
            reached = sh.ctl[Ctl.COUNT_B]
            if reached <= reach:
                thr = lo
                settled = Boolean(True)
    if not settled:
        thr, ties, reached = narrow(
            cfg, sh, win, Source.SAMPLE, Rank.BY_KEY, Goal.RUNG, target, lo, hi, Uint32(0),
            count, reach=reach,
        )  # fmt: skip
    return thr, ties, reached
