"""The one tile loader of the streaming passes."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Int64, Uint32, const_expr

from .keys import F32
from .memory import load_vec4, prefetch_l2_bulk

__all__ = ["load_tile", "prefetch_vectors"]


@cute.jit
def prefetch_vectors(base, v_lo: Int32, v_hi: Int32, v_end: Int32, fmt: cutlass.Constexpr = F32):
    """Ask L2 for the 16-byte vectors ``[v_lo, min(v_hi, v_end))`` of a row (one bulk
    prefetch, issued by the calling thread alone; nothing when the range is empty)."""
    hi = cutlass.min(v_hi, v_end)
    if v_lo < hi:
        prefetch_l2_bulk(base + Int64(v_lo) * Int64(fmt.vec), Uint32(hi - v_lo) * Uint32(16))


@cute.jit
def load_tile(
    threads: cutlass.Constexpr,
    unroll: cutlass.Constexpr,
    base,
    tb: Int32,
    v_end: Int32,
    v_fallback: Int32,
    fmt: cutlass.Constexpr = F32,
    checked: cutlass.Constexpr = True,
    policy=None,
):
    """Issue the 16-byte loads of one tile before any is used.

    Thread ``t`` loads vectors ``tb + u * threads + t`` for ``u < unroll``; a vector at or past
    ``v_end`` loads ``v_fallback`` instead (a vector the CTA may read) and is marked not ok.
    ``checked=False``: the caller knows the whole tile lies before ``v_end`` (no test; every
    ``ok`` is True). ``policy``: the loads' L2 cache policy
    (``memory.l2_policy``), or None.

    Returns:
        ``(regs, oks, vs)``: per ``u``, the vector's four raw uint32 words (``fmt.vec`` scores:
        :func:`~.keys.vector_bits`), whether the vector is in range, and its vector index.
    """
    tid, _, _ = cute.arch.thread_idx()
    regs = []
    oks = []
    vs = []
    for u in cutlass.range_constexpr(unroll):
        v = tb + u * threads + tid
        ok = Boolean(True)
        at = Int64(v) * Int64(fmt.vec)
        if const_expr(checked):
            ok = v < v_end
            at = Int64(cutlass.select_(ok, v, v_fallback)) * Int64(fmt.vec)
        regs.append(load_vec4(base + at, policy))
        oks.append(ok)
        vs.append(v)
    return regs, oks, vs
