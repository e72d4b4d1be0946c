"""Device form of the order key (``gvr_reference.keys.order_key``).

``key(bits) = bits ^ (0x80000000 | -(bits >> 31))`` flips the sign bit of non-negative floats
and every bit of negative ones, so unsigned key order is float order over all finite values
and +-inf. Two canonicalisations make the integer order exactly ``torch.topk``'s:
every NaN maps to ``0xFFFFFFFF`` (above ``key(+inf) = 0xFF800000``), and ``-0.0`` maps to
``key(+0.0) = 0x80000000`` (one tie class). Denormals keep distinct keys: membership is
decided on these integers, so no float comparison (and no flush-to-zero) is ever involved.

Every function takes the score format as a compile-time :class:`gvr_reference.keys.KeyFormat`
(default float32). A 16-bit format's raw bits arrive zero-extended in a ``Uint32`` and its keys
are the same map within 16 bits (``[0, 0xFFFF]``, NaN ``0xFFFF``), so the float32 code is
unchanged and the 16-bit code is the same handful of integer operations.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op
from gvr_reference.keys import KEY_FORMATS, KeyFormat
from gvr_reference.keys import stream_bound as _stream_bound

#: The float32 format, the default of every function here.
F32: KeyFormat = KEY_FORMATS["float32"]
#: The float32 key space's largest key (the NaN key); also the top of the index-key space of
#: the deterministic tie mode, whatever the score format.
KEY_MAX = 0xFFFFFFFF
#: Bits of -FLT_MAX, the value written beside a -1 index.
NEG_FLT_MAX_BITS = 0xFF7FFFFF


def format_of(cfg) -> KeyFormat:
    """The score format of a configuration (``cfg.key_format``; float32 when it has none)."""
    return getattr(cfg, "key_format", F32)


@cute.jit
def order_key(bits: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """uint32 order key of the score with raw bits ``bits`` (zero-extended for 16 bits)."""
    if const_expr(fmt.bits == 32):
        flip = Uint32(0x80000000) | (Uint32(0) - (bits >> Uint32(31)))
        key = bits ^ flip
        key = Uint32(
            cutlass.select_((bits & Uint32(0x7FFFFFFF)) > Uint32(0x7F800000), Uint32(KEY_MAX), key)
        )
        key = Uint32(cutlass.select_(bits == Uint32(0x80000000), Uint32(0x80000000), key))
        return key
    else:
        key = raw_key(bits, fmt)
        key = Uint32(cutlass.select_(_is_nan(bits, fmt), Uint32(fmt.key_max), key))
        key = Uint32(cutlass.select_(bits == Uint32(fmt.sign), Uint32(fmt.sign), key))
        return key


@cute.jit
def _is_nan(bits: Uint32, fmt: cutlass.Constexpr) -> cutlass.Boolean:
    return (bits & Uint32(fmt.mask ^ fmt.sign)) > Uint32(fmt.inf_bits)


@cute.jit
def stream_threshold(thr_key: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The threshold :func:`survives` compares raw keys against, for the canonical ``thr_key``.

    The raw key ``bits ^ (0x80000000 | -(bits >> 31))`` equals the canonical key for every
    non-NaN value except ``-0.0`` (raw ``0x7FFFFFFF``, canonical ``0x80000000``); no other
    value has raw key ``0x7FFFFFFF``. So for non-NaN ``x``:
    ``key(x) >= T  <=>  raw(x) >= (T == 0x80000000 ? 0x7FFFFFFF : T)``.

    16-bit formats are tested top-aligned (:func:`top_aligned`): the raw key of ``b << 16`` is
    ``raw16(b) << 16`` plus ``0`` or ``0xFFFF`` below, so ``key16(x) >= T`` is
    ``raw(x << 16) >= stream_threshold(T << 16)`` by the same rule.
    """
    if const_expr(fmt.bits == 16):
        thr_key = thr_key << Uint32(16)
    return Uint32(cutlass.select_(thr_key == Uint32(0x80000000), Uint32(0x7FFFFFFF), thr_key))


@cute.jit
def survives(top: Uint32, raw_thr: Uint32, fmt: cutlass.Constexpr = F32) -> cutlass.Boolean:
    """``order_key(bits) >= T`` with ``raw_thr = stream_threshold(T)``, in about five integer
    operations: the raw-key compare, or NaN (whose canonical key is the maximum). ``top``:
    the score's bits top-aligned in 32 bits (:func:`top_aligned`; float32: the bits)."""
    raw = raw_key(top)
    nan_top = fmt.inf_bits << (32 - fmt.bits)
    return (raw >= raw_thr) | ((top & Uint32(0x7FFFFFFF)) > Uint32(nan_top))


@cute.jit
def top_aligned(bits: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """A score's raw bits moved to the top of 32 bits (what :func:`survives` tests)."""
    if const_expr(fmt.bits == 16):
        return bits << Uint32(16)
    else:
        return bits


@cute.jit
def raw_key(bits: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The raw key ``bits ^ (sign | -(bits >> (w - 1)))`` (within the format's ``w`` bits): the
    order key of every non-NaN value except ``-0.0``, without the canonicalisations."""
    if const_expr(fmt.bits == 32):
        return bits ^ (Uint32(Int32(bits) >> Int32(31)) | Uint32(0x80000000))
    else:
        # Bit 15 spread over the low 16 bits (the high half of ``bits`` is zero).
        spread = Uint32(Int32(bits << Uint32(16)) >> Int32(31)) >> Uint32(16)
        return bits ^ (spread | Uint32(fmt.sign))


@cute.jit
def tie_range(thr_key: Uint32, fmt: cutlass.Constexpr = F32):
    """``(raw_lo, span)`` such that ``order_key(x) == thr_key  <=>  raw(x) - raw_lo < span``
    (unsigned) for every value ``x``, NaN included (:func:`is_tie`; ``raw`` of the top-aligned
    score, as :func:`survives` tests it).

    With :func:`stream_threshold`, ``key(x) == T`` is ``raw(x) >= stream_threshold(T)`` and
    not ``raw(x) >= stream_threshold(T + 1)`` for non-NaN ``x``. For ``T`` in
    ``[key(-inf), key(+inf)]`` that raw interval holds no NaN's raw key (float32: those are
    ``[0, 0x007FFFFE]`` and ``[0xFF800001, 0xFFFFFFFF]``; a top-aligned 16-bit NaN's raw key
    lies below ``key16(-inf) << 16`` or at or above ``(key16(+inf) + 1) << 16``); any other
    ``T`` is no finite or infinite value's key, and the span is 0.
    """
    lo = stream_threshold(thr_key, fmt)
    hi = stream_threshold(thr_key + Uint32(1), fmt)
    real = (thr_key >= Uint32(fmt.key_neg_inf)) & (thr_key <= Uint32(fmt.key_pos_inf))
    return lo, Uint32(cutlass.select_(real, hi - lo, Uint32(0)))


@cute.jit
def is_tie(bits: Uint32, raw_lo: Uint32, span: Uint32, fmt: cutlass.Constexpr = F32):
    """``order_key(bits) == T`` for ``(raw_lo, span) = tie_range(T)``: two integer operations
    after the raw key (of the top-aligned score, the domain :func:`stream_threshold` and so
    :func:`tie_range` work in)."""
    return (raw_key(top_aligned(bits, fmt)) - raw_lo) < span


@cute.jit
def vector_bits(words, fmt: cutlass.Constexpr = F32):
    """The ``fmt.vec`` scores of one 16-byte vector (four loaded ``Uint32`` words), as raw
    bits in position order: the words themselves for float32; for 16-bit scores the low
    half then the high half of each word (little-endian), zero-extended."""
    if const_expr(fmt.bits == 32):
        return [words[0], words[1], words[2], words[3]]
    else:
        out = []
        for q in cutlass.range_constexpr(4):
            out.append(words[q] & Uint32(0xFFFF))
            out.append(words[q] >> Uint32(16))
        return out


@cute.jit
def stream_bound(thr_key: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The word :func:`above_bound` compares against for ``order_key(x) >= thr_key``: the
    bits of :func:`gvr_reference.keys.stream_bound` (the same formula, traced here), repeated
    in both halves for a 16-bit format (whose scores are compared two at a time)."""
    bits = _stream_bound(thr_key, fmt, cutlass.select_, Uint32)
    if const_expr(fmt.bits == 16):
        bits = bits | (bits << Uint32(16))
    return bits


@dsl_user_op
def _gtu_f32(bits: Uint32, bound: Uint32, *, loc=None, ip=None) -> Boolean:
    operands = [Uint32(bits).ir_value(loc=loc, ip=ip), Uint32(bound).ir_value(loc=loc, ip=ip)]
    res = llvm.inline_asm(T.bool(), operands, "setp.gtu.f32 $0, $1, $2;", "=b,r,r", loc=loc, ip=ip)
    return Boolean(res)


@dsl_user_op
def _gtu_pair(word: Uint32, bound: Uint32, ptx_type: str, *, loc=None, ip=None):
    operands = [Uint32(word).ir_value(loc=loc, ip=ip), Uint32(bound).ir_value(loc=loc, ip=ip)]
    res = llvm.inline_asm(
        llvm.StructType.get_literal([T.bool(), T.bool()]),
        operands,
        f"setp.gtu.{ptx_type} $0|$1, $2, $3;",
        "=b,=b,r,r",
        loc=loc,
        ip=ip,
    )
    lo = Boolean(llvm.extractvalue(T.bool(), res, [0], loc=loc, ip=ip))
    hi = Boolean(llvm.extractvalue(T.bool(), res, [1], loc=loc, ip=ip))
    return lo, hi


@cute.jit
def above_bound(words, bound: Uint32, fmt: cutlass.Constexpr = F32):
    """``order_key(x) >= T`` for the ``fmt.vec`` scores of a loaded 16-byte vector, with
    ``bound = stream_bound(T)``: one IEEE ``setp.gtu`` per float32 score, one per pair of
    16-bit scores (``bf16x2`` / ``f16x2``, low half first), no ``.ftz`` (subnormals kept,
    ``-0.0 == +0.0``, NaN unordered). The equivalence is
    :func:`gvr_reference.keys.stream_bound`'s. Returns the ``fmt.vec`` Booleans in element
    order."""
    out = []
    if const_expr(fmt.bits == 32):
        for w in cutlass.range_constexpr(4):
            out.append(_gtu_f32(words[w], bound))
    else:
        ptx_type = "bf16x2" if fmt.name == "bfloat16" else "f16x2"
        for w in cutlass.range_constexpr(4):
            lo, hi = _gtu_pair(words[w], bound, ptx_type)
            out.append(lo)
            out.append(hi)
    return out


@cute.jit
def key_bits(key: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The raw bits of a canonical order key of format ``fmt`` (float32:
    ``gvr_reference.keys.key_to_float``; the NaN key gives a NaN, the key of both zeros
    ``+0.0``; 16-bit formats: the same map within 16 bits, zero-extended)."""
    if const_expr(fmt.bits == 32):
        return key ^ (Uint32(0x80000000) | ((key >> Uint32(31)) - Uint32(1)))
    else:
        flip = (Uint32(fmt.sign) | ((key >> Uint32(fmt.bits - 1)) - Uint32(1))) & Uint32(fmt.mask)
        return key ^ flip


@cute.jit
def bound_word(thr_key: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The float32 word a float32 upper bound is compared with (:func:`bound_reaches`) to
    decide whether a block it bounds may hold a score of format ``fmt`` with key
    ``>= thr_key``: :func:`stream_bound` of the float32 key of the threshold's exact widening
    (:func:`widen_bits` is order-preserving, so a 16-bit score with key ``>= thr_key`` widens
    to a float32 at or above the widened threshold, and so does every bound of it)."""
    t32 = thr_key
    if const_expr(fmt.bits == 16):
        t32 = order_key(widen_bits(key_bits(thr_key, fmt), fmt))
        # a key below key(-inf) is no value's (a negative NaN pattern): every non-NaN score
        # is above it, so every block is live
        t32 = Uint32(cutlass.select_(thr_key < Uint32(fmt.key_neg_inf), Uint32(0), t32))
    return stream_bound(t32)


@cute.jit
def bound_reaches(bits: Uint32, word: Uint32) -> Boolean:
    """Whether a float32 bound with raw ``bits`` is ``>= T`` in order-key terms, for
    ``word = bound_word(T)``: one IEEE ``setp.gtu.f32`` (a NaN bound reaches every key)."""
    return _gtu_f32(bits, word)


@dsl_user_op
def _cvt(bits: Uint32, body: str, *, loc=None, ip=None) -> Uint32:
    operands = [Uint32(bits).ir_value(loc=loc, ip=ip)]
    res = llvm.inline_asm(
        T.i32(), operands, "{ .reg .b16 h; " + body + " }", "=r,r", loc=loc, ip=ip
    )
    return Uint32(res)


@cute.jit
def widen_bits(bits: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The float32 bits of a score of format ``fmt`` given as raw bits (zero-extended): its
    exact widening (bfloat16: the bits moved up 16; float16: ``cvt.f32.f16``, exact for every
    finite and infinite value, subnormals included; a NaN stays a NaN). Order-preserving, so
    ``order_key(widen_bits(b))`` orders scores as ``order_key(b, fmt)`` does."""
    if const_expr(fmt.bits == 32):
        return bits
    elif const_expr(fmt.name == "bfloat16"):
        return bits << Uint32(16)
    else:
        return _cvt(bits, "cvt.u16.u32 h, $1; cvt.f32.f16 $0, h;")


@cute.jit
def format_key_of(key: Uint32, fmt: cutlass.Constexpr = F32) -> Uint32:
    """The key in ``fmt``'s key space of the score whose float32 order key is ``key``, for
    float32 keys of widened ``fmt`` scores (:func:`widen_bits`; the NaN key maps to
    ``fmt.key_max``): narrowing such a value back is exact (bfloat16: the top 16 bits;
    float16: ``cvt.rn.f16.f32``)."""
    if const_expr(fmt.bits == 32):
        return key
    else:
        bits = key_bits(key)
        if const_expr(fmt.name == "bfloat16"):
            bits = bits >> Uint32(16)
        else:
            bits = _cvt(bits, "cvt.rn.f16.f32 h, $1; cvt.u32.u16 $0, h;")
        return order_key(bits, fmt)
