"""The one tile loader of the streaming passes."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64

from .keys import F32
from .memory import load_vec4

__all__ = ["load_tile"]


@cute.jit
def load_tile(
    threads: cutlass.Constexpr,
    unroll: cutlass.Constexpr,
    base,
    tb: Int32,
    v_end: Int32,
    v_fallback: Int32,
    fmt: cutlass.Constexpr = F32,
):
    """Issue the 16-byte loads of one tile before any is used.

    Thread ``t`` loads vectors ``tb + u * threads + t`` for ``u < unroll``; a vector at or past
    ``v_end`` loads ``v_fallback`` instead (a vector the CTA may read) and is marked not ok.

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
        ok = v < v_end
        at = Int64(cutlass.select_(ok, v, v_fallback)) * Int64(fmt.vec)
        regs.append(load_vec4(base + at))
        oks.append(ok)
        vs.append(v)
    return regs, oks, vs
