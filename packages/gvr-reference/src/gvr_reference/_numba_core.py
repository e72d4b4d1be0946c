"""Pieces the numba paths (CPU engine, validator) share: the order key on raw bits and a flat
view of a strided logits array.

The numba kernels read logits as raw uint32 bits, never as floats, so NaN payloads, signed
zeros and denormals travel bit-exactly from the input to the ``values`` output.
"""

from __future__ import annotations

import numba
import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = [
    "key_of",
    "flat_rows",
    "threshold_form",
    "count_key_at_least",
    "PAD_VALUE_BITS",
    "NEG_NAN_BITS",
]

PAD_VALUE_BITS = 0xFF7FFFFF
"""Bit pattern of ``-FLT_MAX`` (the ``values`` pad)."""

NEG_NAN_BITS = 0xFF800000
"""Raw bits above this (as unsigned) are negative NaNs; it is the pattern of ``-inf``."""


@numba.njit(inline="always", cache=True)
def key_of(bits):
    """Order key of one fp32 bit pattern (uint32) as an int64 in ``[0, 2**32)``.

    The same map as :func:`gvr_reference.keys.order_key`: flip the sign bit of non-negative
    values and every bit of negative ones, then send ``-0.0`` to the key of ``+0.0`` and every
    NaN to ``0xFFFFFFFF``. Computed in int64 so no operand ever mixes signedness.
    """
    x = np.int64(bits)
    sign = x >> 31
    key = x ^ (0x80000000 | (sign * 0x7FFFFFFF))
    # -0.0 (0x80000000) lands on 0x7FFFFFFF; one step up is the key of +0.0.
    if x == 0x80000000:
        key = 0x80000000
    if (x & 0x7FFFFFFF) > 0x7F800000:
        key = 0xFFFFFFFF
    return key


@numba.njit(cache=True, nogil=True)
def threshold_form(thr):
    """Rewrite ``key(x) >= thr`` as a test on the raw bits ``u`` of ``x``, which is cheaper
    than computing keys.

    Returns ``(high, tb, tu)``:

    - ``high`` (``thr > key(+0)``): ``key(x) >= thr`` iff ``int32(u) >= tb`` or
      ``u > NEG_NAN_BITS``. Signed int32 order is the order of non-negative floats with +inf
      and then positive NaNs on top, and among negative patterns only negative NaNs have a key
      above ``key(+0)``. ``tb`` is the fp32 pattern of ``thr`` (``0x7F800001``, the smallest
      positive NaN, when ``thr`` lies above ``key(+inf)``: only NaNs meet it).
    - otherwise: ``key(x) >= thr`` iff ``u <= tu`` or ``u > NEG_NAN_BITS`` with
      ``tu = min(max(0xFFFFFFFF ^ thr, 0x80000000), NEG_NAN_BITS)``. Non-negative patterns
      (below ``0x80000000``) all qualify, ``-0.0`` (``0x80000000``) has the key of ``+0.0``, and
      a negative non-NaN qualifies iff its bits are at most the complement of ``thr`` (its key
      is its bitwise complement). The clamp to ``NEG_NAN_BITS`` changes nothing (the NaN clause
      covers the rest) but makes the two clauses disjoint.

    In both forms at most one of the two clauses holds for any ``u``.
    """
    if thr > 0x80000000:
        tb = 0x7F800001 if thr > 0xFF800000 else thr ^ 0x80000000
        return True, np.int32(tb), np.uint32(0)
    tu = min(max(0xFFFFFFFF ^ thr, 0x80000000), NEG_NAN_BITS)
    return False, np.int32(0), np.uint32(tu)


@numba.njit(cache=True, nogil=True)
def count_key_at_least(srow, row, thr):
    """Number of elements of a row with order key ``>= thr`` (``row``: raw uint32 bits,
    ``srow``: the same memory as int32). Branch-free so the loop vectorizes."""
    high, tb, tu = threshold_form(thr)
    c = 0
    # The clauses are disjoint, so adding them counts each element at most once.
    if high:
        for i in range(row.shape[0]):
            c += np.int64(srow[i] >= tb) + np.int64(row[i] > NEG_NAN_BITS)
    else:
        for i in range(row.shape[0]):
            c += np.int64(row[i] <= tu) + np.int64(row[i] > NEG_NAN_BITS)
    return c


def flat_rows(logits: np.ndarray) -> tuple[np.ndarray, int]:
    """A read-only 1-D uint32 view spanning every row of a 2-D float32 array, and its row
    stride in elements.

    Row ``r``, column ``c`` is ``flat[r * row_stride + c]``. A row-strided view with unit
    inner stride (e.g. ``arena[:, :width]``) is viewed in place without a copy; any other
    layout (inner stride != 1, negative or unaligned row stride) is copied first.

    Args:
        logits: float32 ``[rows, width]``.

    Returns:
        ``(flat, row_stride)``; ``flat`` is empty when the array is.
    """
    rows, width = logits.shape
    if rows == 0 or width == 0:
        return np.zeros(0, np.uint32), 0
    if logits.flags.c_contiguous:
        flat = logits.view(np.uint32).reshape(-1)
        flat.flags.writeable = False
        return flat, width
    s0, s1 = logits.strides
    itemsize = logits.itemsize
    unit_inner = s1 == itemsize or width == 1
    good_rows = rows == 1 or (s0 >= 0 and s0 % itemsize == 0)
    if not (unit_inner and good_rows):
        logits = np.ascontiguousarray(logits)
        s0 = width * itemsize
    row_stride = s0 // itemsize if rows > 1 else width
    span = (rows - 1) * row_stride + width
    bits = logits.view(np.uint32)
    flat = as_strided(bits, shape=(span,), strides=(itemsize,), writeable=False)
    return flat, int(row_stride)
