"""The order key: a monotone map from fp32 scores to uint32.

Every GVR path (oracle, CPU engine, CPU model, kernels) decides membership by comparing these
keys as unsigned integers, never by float comparison. The map is

    key(x) = bits(x) ^ (0x80000000 | -(bits(x) >> 31))      (flip the sign bit of x >= +0,
                                                              flip every bit of x <= -0)

made canonical in two places so that the integer order is exactly the order ``torch.topk``
uses for ``largest=True``:

- every NaN (either sign, any payload) maps to ``0xFFFFFFFF``, above ``key(+inf) = 0xFF800000``:
  torch ranks NaN above +inf;
- ``-0.0`` maps to ``key(+0.0) = 0x80000000``: the two zeros compare equal in torch, so they
  form one tie class here too.

Denormals keep their own keys (no flush to zero). The map is injective on everything else,
so ``key(a) == key(b)`` iff ``a`` and ``b`` are equal as torch compares them (NaN == NaN).

One test is allowed to look like a float comparison because it is proven to be a key
comparison: ``key(x) >= T`` equals "``x`` unordered with, or greater than, the value
``stream_bound(T)``" (IEEE ``gtu``, subnormals kept) for every score ``x`` and every ``T``
(:func:`stream_bound`; exhaustively checked for the 16-bit formats in the tests). The
streaming kernels test each score with that one instruction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

KEY_NAN = np.uint32(0xFFFFFFFF)
KEY_POS_ZERO = np.uint32(0x80000000)
KEY_NEG_INF = np.uint32(0x007FFFFF)
KEY_POS_INF = np.uint32(0xFF800000)

__all__ = [
    "order_key",
    "key_to_float",
    "KEY_NAN",
    "KEY_POS_ZERO",
    "KEY_NEG_INF",
    "KEY_POS_INF",
    "KeyFormat",
    "KEY_FORMATS",
    "key_format",
    "format_bits",
    "format_keys",
    "round_to_format",
    "stream_bound",
    "above_bound",
]


def _check_float32(x) -> None:
    """Raise ``TypeError`` unless ``x`` is a float32 numpy array."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError(
            f"x must be a float32 numpy array, got {type(x).__name__} "
            f"of dtype {getattr(x, 'dtype', None)}"
        )


def order_key(x: np.ndarray) -> np.ndarray:
    """Map fp32 scores to their uint32 order keys.

    Args:
        x: array of dtype float32, any shape.

    Returns:
        uint32 array of the same shape; ``order_key(a) < order_key(b)`` iff ``a`` ranks below
        ``b`` in ``torch.topk(largest=True)`` order (NaN highest, -0.0 == +0.0).

    Raises:
        TypeError: ``x`` is not a float32 array.
    """
    _check_float32(x)
    u = x.view(np.uint32)
    mask = np.where(u >> np.uint32(31), np.uint32(0xFFFFFFFF), np.uint32(0x80000000))
    k = u ^ mask
    k = np.where(np.isnan(x), KEY_NAN, k)
    k = np.where(u == np.uint32(0x80000000), KEY_POS_ZERO, k)
    return k.astype(np.uint32, copy=False)


def key_to_float(k: np.ndarray) -> np.ndarray:
    """Inverse of :func:`order_key` on canonical keys (NaN comes back as a positive quiet NaN
    with an all-ones payload, -0.0 as +0.0).

    Args:
        k: uint32 array of keys.

    Returns:
        float32 array of the same shape.
    """
    k = np.asarray(k, dtype=np.uint32)
    u = np.where(k >> np.uint32(31), k ^ np.uint32(0x80000000), ~k)
    return u.astype(np.uint32).view(np.float32)


# ------------------------------------------------------------------ score formats
@dataclass(frozen=True)
class KeyFormat:
    """The order key of one score format (IEEE binary32, bfloat16 or binary16).

    The same map as :func:`order_key` on the format's own bits: ``key(b) = b ^ (sign | -(b >>
    (bits - 1)))`` within ``bits`` bits, every NaN mapped to :attr:`key_max` and ``-0.0`` to
    :attr:`sign` (the key of ``+0.0``). A 16-bit key lies in ``[0, 0xFFFF]``, so two 8-bit radix
    levels decide it. Widening a bfloat16 or float16 score to float32 is exact and keeps the
    order, so the 16-bit key order is the float32 key order of the widened scores.

    Attributes:
        name: ``"float32"``, ``"bfloat16"`` or ``"float16"`` (torch's dtype names).
        bits: width of a score in bits (32 or 16).
        inf_bits: bits of ``+inf``; a magnitude above it is a NaN.
        neg_max_bits: bits of the most negative finite value (the pad beside ``-1``).
    """

    name: str
    bits: int
    inf_bits: int
    neg_max_bits: int

    @property
    def mask(self) -> int:
        """All ``bits`` ones."""
        return (1 << self.bits) - 1

    @property
    def sign(self) -> int:
        """The sign bit; also the key of both zeros."""
        return 1 << (self.bits - 1)

    @property
    def key_max(self) -> int:
        """The largest key: every NaN."""
        return self.mask

    @property
    def key_neg_inf(self) -> int:
        """The key of ``-inf``, the smallest key of a non-NaN score."""
        return (self.sign | self.inf_bits) ^ self.mask

    @property
    def key_pos_inf(self) -> int:
        """The key of ``+inf``."""
        return self.inf_bits ^ self.sign

    @property
    def neg_max_widened_bits(self) -> int:
        """float32 bits of the most negative finite value (the pad beside ``-1`` of values in
        this format, as its exact float32 widening reads)."""
        if self.bits == 32:
            return self.neg_max_bits
        if self.name == "bfloat16":
            return self.neg_max_bits << 16
        h = np.array([self.neg_max_bits], np.uint16).view(np.float16).astype(np.float32)
        return int(h.view(np.uint32)[0])

    @property
    def elem_bytes(self) -> int:
        """Bytes per score."""
        return self.bits // 8

    @property
    def vec(self) -> int:
        """Scores per 16-byte vector."""
        return 16 // self.elem_bytes


#: The formats every entry point accepts, by name.
KEY_FORMATS = {
    f.name: f
    for f in (
        KeyFormat("float32", 32, 0x7F800000, 0xFF7FFFFF),
        KeyFormat("bfloat16", 16, 0x7F80, 0xFF7F),
        KeyFormat("float16", 16, 0x7C00, 0xFBFF),
    )
}


def key_format(name: str) -> KeyFormat:
    """The :class:`KeyFormat` named ``name``.

    Raises:
        ValueError: ``name`` is not one of :data:`KEY_FORMATS`.
    """
    try:
        return KEY_FORMATS[name]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(KEY_FORMATS)}, got {name!r}") from None


def format_bits(x: np.ndarray, fmt: KeyFormat) -> np.ndarray:
    """The raw bits, in ``fmt``, of float32 scores that are values of ``fmt`` (a widened
    bfloat16 or float16 row), as uint32.

    Raises:
        TypeError: ``x`` is not a float32 array.
        ValueError: a finite or infinite score of ``x`` is not a value of ``fmt``.
    """
    _check_float32(x)
    u = x.view(np.uint32)
    if fmt.bits == 32:
        return u.copy()
    if fmt.name == "bfloat16":
        b = u >> np.uint32(16)
        exact = (u & np.uint32(0xFFFF)) == 0
        # a NaN keeps being a NaN in its top half (its payload may sit in the low half)
        b = np.where(np.isnan(x), np.uint32(0x7FC0) | (b & np.uint32(0x8000)), b)
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            h = x.astype(np.float16)
        b = h.view(np.uint16).astype(np.uint32)
        exact = h.astype(np.float32).view(np.uint32) == u
    if not np.all(exact | np.isnan(x)):
        raise ValueError(f"x holds scores that are not {fmt.name} values")
    return b.astype(np.uint32)


def format_keys(x: np.ndarray, fmt: KeyFormat) -> np.ndarray:
    """uint32 order keys of float32 scores in the key space of ``fmt`` (for float32 the same
    as :func:`order_key`; for a 16-bit format keys in ``[0, 0xFFFF]`` of the scores' bits)."""
    if fmt.bits == 32:
        return order_key(x)
    b = format_bits(x, fmt)
    flip = np.where(b >> np.uint32(15), np.uint32(0xFFFF), np.uint32(0x8000))
    k = b ^ flip
    k = np.where((b & np.uint32(0x7FFF)) > np.uint32(fmt.inf_bits), np.uint32(fmt.key_max), k)
    k = np.where(b == np.uint32(0x8000), np.uint32(0x8000), k)
    return k.astype(np.uint32)


def round_to_format(x: np.ndarray, fmt: KeyFormat) -> np.ndarray:
    """float32 scores rounded to the nearest value of ``fmt`` (ties to even, overflow to
    +-inf, NaN kept), returned as float32: what a producer writing ``fmt`` scores emits, in
    the exact float32 widening every reference of this package reads.

    Raises:
        TypeError: ``x`` is not a float32 array.
    """
    _check_float32(x)
    if fmt.bits == 32:
        return x.copy()
    if fmt.name == "float16":
        with np.errstate(over="ignore"):
            return x.astype(np.float16).astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) & np.uint64(0xFFFF0000)
    out = r.astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), np.float32(np.nan), out).astype(np.float32)


def _py_u32(x):
    return x


def stream_bound(key, fmt: KeyFormat, select=None, u32=_py_u32):
    """The bits (in ``fmt``) of the value ``t`` with ``key(x) >= key``  <=>  ``x > t`` or ``x``
    unordered with ``t`` (IEEE ``gtu``: true for NaN), for every score ``x`` of ``fmt``.

    ``t`` is the largest value whose key is below ``key`` (the key just below ``key``, skipping
    ``0x7F..FF``, the raw key of ``-0.0`` that no canonical key takes, so ``key(+0.0)`` gets
    ``-denorm_min``); a NaN when ``key <= key(-inf)`` (every score passes, since every
    comparison with a NaN is unordered); ``+inf`` when ``key > key(+inf)`` (only NaN keys,
    the maximum, are that high, and only a NaN is unordered with ``+inf``). The comparison must
    keep subnormals (no flush to zero) and treat ``-0.0 == +0.0``, as IEEE ``setp`` without
    ``.ftz`` does.

    Written once for both sides: on the host ``key`` is an int and ``select``/``u32`` default
    to Python's; the kernels pass the CuTe DSL's ``select_`` and ``Uint32``.
    """
    if select is None:

        def select(c, a, b):
            return a if c else b

    sign = u32(fmt.sign)
    prev = select(key == sign, u32(fmt.sign - 2), key - u32(1))
    bits = select(prev >= sign, prev ^ sign, prev ^ u32(fmt.mask))
    bits = select(key <= u32(fmt.key_neg_inf), u32(fmt.inf_bits + 1), bits)
    return select(key > u32(fmt.key_pos_inf), u32(fmt.inf_bits), bits)


def above_bound(x: np.ndarray, key: int, fmt: KeyFormat) -> np.ndarray:
    """The streaming test on the host: ``x > t`` or unordered, ``t`` the value of
    :func:`stream_bound` (``x``: float32 scores that are values of ``fmt``, compared in
    float32, which is exact for the widened 16-bit values). Equal to ``format_keys(x, fmt) >=
    key`` for every ``x``."""
    _check_float32(x)
    b = np.array([stream_bound(int(key), fmt)], np.uint32)
    if fmt.bits == 32:
        t = b.view(np.float32)[0]
    elif fmt.name == "bfloat16":
        t = (b << np.uint32(16)).view(np.float32)[0]
    else:
        t = b.astype(np.uint16).view(np.float16).astype(np.float32)[0]
    with np.errstate(invalid="ignore"):
        return ~(x <= t)
