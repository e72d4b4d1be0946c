"""Device form of the order key (``gvr_reference.keys.order_key``).

``key(bits) = bits ^ (0x80000000 | -(bits >> 31))`` flips the sign bit of non-negative floats
and every bit of negative ones, so unsigned key order is float order over all finite values
and +-inf. Two canonicalisations make the integer order exactly ``torch.topk``'s:
every NaN maps to ``0xFFFFFFFF`` (above ``key(+inf) = 0xFF800000``), and ``-0.0`` maps to
``key(+0.0) = 0x80000000`` (one tie class). Denormals keep distinct keys: membership is
decided on these integers, so no float comparison (and no flush-to-zero) is ever involved.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Uint32

KEY_MAX = 0xFFFFFFFF
#: Bits of -FLT_MAX, the value written beside a -1 index.
NEG_FLT_MAX_BITS = 0xFF7FFFFF


@cute.jit
def order_key(bits: Uint32) -> Uint32:
    """uint32 order key of the fp32 value with raw bits ``bits``."""
    flip = Uint32(0x80000000) | (Uint32(0) - (bits >> Uint32(31)))
    key = bits ^ flip
    key = Uint32(
        cutlass.select_((bits & Uint32(0x7FFFFFFF)) > Uint32(0x7F800000), Uint32(KEY_MAX), key)
    )
    key = Uint32(cutlass.select_(bits == Uint32(0x80000000), Uint32(0x80000000), key))
    return key


@cute.jit
def stream_threshold(thr_key: Uint32) -> Uint32:
    """The threshold :func:`survives` compares raw keys against, for the canonical ``thr_key``.

    The raw key ``bits ^ (0x80000000 | -(bits >> 31))`` equals the canonical key for every
    non-NaN value except ``-0.0`` (raw ``0x7FFFFFFF``, canonical ``0x80000000``); no other
    value has raw key ``0x7FFFFFFF``. So for non-NaN ``x``:
    ``key(x) >= T  <=>  raw(x) >= (T == 0x80000000 ? 0x7FFFFFFF : T)``.
    """
    return Uint32(cutlass.select_(thr_key == Uint32(0x80000000), Uint32(0x7FFFFFFF), thr_key))


@cute.jit
def survives(bits: Uint32, raw_thr: Uint32) -> cutlass.Boolean:
    """``order_key(bits) >= T`` with ``raw_thr = stream_threshold(T)``, in about five integer
    operations: the raw-key compare, or NaN (whose canonical key is the maximum)."""
    raw = raw_key(bits)
    is_nan = (bits & Uint32(0x7FFFFFFF)) > Uint32(0x7F800000)
    return (raw >= raw_thr) | is_nan


@cute.jit
def raw_key(bits: Uint32) -> Uint32:
    """The raw key ``bits ^ (0x80000000 | -(bits >> 31))``: the order key of every non-NaN
    value except ``-0.0`` (raw ``0x7FFFFFFF``), without the canonicalisations."""
    return bits ^ (Uint32(Int32(bits) >> Int32(31)) | Uint32(0x80000000))


@cute.jit
def tie_range(thr_key: Uint32):
    """``(raw_lo, span)`` such that ``order_key(x) == thr_key  <=>  raw(x) - raw_lo < span``
    (unsigned) for every value ``x``, NaN included (:func:`is_tie`).

    With :func:`stream_threshold`, ``key(x) == T`` is ``raw(x) >= stream_threshold(T)`` and
    not ``raw(x) >= stream_threshold(T + 1)`` for non-NaN ``x``. For ``T`` in
    ``[key(-inf), key(+inf)]`` that raw interval holds no NaN's raw key (those are
    ``[0, 0x007FFFFE]`` and ``[0xFF800001, 0xFFFFFFFF]``); any other ``T`` is no finite or
    infinite value's key, and the span is 0.
    """
    lo = stream_threshold(thr_key)
    hi = stream_threshold(thr_key + Uint32(1))
    real = (thr_key >= Uint32(0x007FFFFF)) & (thr_key <= Uint32(0xFF800000))
    return lo, Uint32(cutlass.select_(real, hi - lo, Uint32(0)))


@cute.jit
def is_tie(bits: Uint32, raw_lo: Uint32, span: Uint32) -> cutlass.Boolean:
    """``order_key(bits) == T`` for ``(raw_lo, span) = tie_range(T)``: two integer operations
    after the raw key."""
    return (raw_key(bits) - raw_lo) < span
