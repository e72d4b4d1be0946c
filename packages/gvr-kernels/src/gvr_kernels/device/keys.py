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
    raw = bits ^ (Uint32(Int32(bits) >> Int32(31)) | Uint32(0x80000000))
    is_nan = (bits & Uint32(0x7FFFFFFF)) > Uint32(0x7F800000)
    return (raw >= raw_thr) | is_nan
