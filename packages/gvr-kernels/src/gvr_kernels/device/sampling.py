"""Row sampling: whole 16-byte vectors at positions that depend only on the row length.

The positions come from :func:`gvr_reference.ladder.row_plan` and
:func:`gvr_reference.ladder.sample_vector` (``sample_vecs`` vectors in runs of four at stride
``sample_step``), so every CTA of a split row samples exactly the same scores.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, Uint32
from gvr_reference.ladder import sample_vector

from .keys import F32, order_key, vector_bits
from .memory import load_vec4
from .ops import umax

__all__ = ["load_sample", "thread_sample_key", "sample_slot"]


@cute.jit
def load_sample(
    threads: cutlass.Constexpr,
    sample_max: cutlass.Constexpr,
    sample,
    base,
    lead: Int32,
    plan,
    fmt: cutlass.Constexpr = F32,
    runmax=None,
    policy=None,
    smax=None,
    slow=None,
):
    """Keys of the sampled vectors (``fmt.vec`` scores each) into shared ``sample``; lanes
    before the window get key 0. With ``runmax`` (a shared array of ``sample_max // (4 *
    fmt.vec)`` words), also the largest key of each run of four sampled vectors (the four
    lanes holding a run meet by two butterfly shuffles; the first writes it).

    With ``smax`` (a pointer to a shared uint32 word, zero before), also the largest sample
    key, by one atomic maximum per warp (visible after the caller's next CTA barrier). With
    ``slow`` (another such word), the complement of the smallest key of the window's sampled
    scores, the same way (the lanes before the window do not count).

    Every thread issues all its sample loads before using any (addresses of missing vectors
    are clamped to vector 0 and their data discarded).
    """
    tid, _, _ = cute.arch.thread_idx()
    vec = fmt.vec
    per_thread = sample_max // (vec * threads)
    regs = []
    for s in cutlass.range_constexpr(per_thread):
        t = s * threads + tid
        ok = t < plan.sample_vecs
        v = cutlass.select_(ok, sample_vector(t, plan.sample_step), Int32(0))
        regs.append(load_vec4(base + Int64(v) * Int64(vec), policy))
    largest = Uint32(0)
    low_c = Uint32(0)
    for s in cutlass.range_constexpr(per_thread):
        t = s * threads + tid
        top = Uint32(0)
        if t < plan.sample_vecs:
            v = sample_vector(t, plan.sample_step)
            bits = vector_bits(regs[s], fmt)
            for q in cutlass.range_constexpr(vec):
                key = order_key(bits[q], fmt)
                inside = v * vec + q >= lead
                key = cutlass.select_(inside, key, Uint32(0))
                sample[t * vec + q] = key
                if cutlass.const_expr(slow is not None):
                    low_c = umax(low_c, Uint32(cutlass.select_(inside, ~key, Uint32(0))))
                if cutlass.const_expr(runmax is not None):
                    top = cutlass.max(top, key)
                if cutlass.const_expr(smax is not None):
                    largest = umax(largest, key)
        if cutlass.const_expr(runmax is not None):
            # a run is four consecutive t: four consecutive lanes of one warp
            top = cutlass.max(top, Uint32(cute.arch.shuffle_sync_bfly(top, offset=1)))
            top = cutlass.max(top, Uint32(cute.arch.shuffle_sync_bfly(top, offset=2)))
            if ((t & 3) == 0) & (t < plan.sample_vecs):
                runmax[t >> 2] = top
    if cutlass.const_expr(smax is not None):
        largest = Uint32(cute.arch.warp_redux_sync(largest, "umax"))
        if cute.arch.lane_idx() == 0:
            cute.arch.atomic_max(smax, largest)
    if cutlass.const_expr(slow is not None):
        low_c = Uint32(cute.arch.warp_redux_sync(low_c, "umax"))
        if cute.arch.lane_idx() == 0:
            cute.arch.atomic_max(slow, low_c)


@cute.jit
def thread_sample_key(vecs: cutlass.Constexpr, keys, vec: cutlass.Constexpr = 4) -> Uint32:
    """The sample key of a thread holding ``keys`` (``vec * vecs`` vector slots first, ``vec``
    scores a 16-byte vector, as a :class:`~.layout.RegisterRow`): slot ``(j, q)`` with
    ``j = tid % vecs`` and ``q = (tid // vecs) % vec``, a sample spread over every vector the
    CTA holds (``gvr_reference.register_model.thread_sample``)."""
    return sample_slot(vecs, keys, Uint32(0), vec)


@cute.jit
def sample_slot(vecs: cutlass.Constexpr, slots, start=None, vec: cutlass.Constexpr = 4) -> Uint32:
    """The value of this thread's sample slot ``(j, q)``, ``j = tid % vecs`` and
    ``q = (tid // vecs) % vec``, among ``slots`` (``vec * vecs`` vector slots first, ``vec``
    scores per 16-byte vector): a select chain over the slots, no indexed register access.
    ``start``: the chain's initial value (every thread's slot is one of them, so it only
    shapes the code; default ``slots[0]``)."""
    tid, _, _ = cute.arch.thread_idx()
    pick = Uint32(slots[0] if start is None else start)
    for j in cutlass.range_constexpr(vecs):
        for q in cutlass.range_constexpr(vec):
            here = (tid % vecs == j) & ((tid // vecs) % vec == q)
            pick = Uint32(cutlass.select_(here, slots[j * vec + q], pick))
    return pick
